package scenario_test

import (
	"strings"
	"testing"

	"github.com/pinlab/pinlab/internal/scenario"
)

// TestProbesThatNeverSucceed: lab up's LoadObjects accepts a probe on a
// port nothing listens on, as the API server does, and lists it with the
// workload; a scenario's Load refuses it at the field.
func TestProbesThatNeverSucceed(t *testing.T) {
	tests := []struct {
		name       string
		probe      string
		field      string
		neverReady bool
	}{
		{"readiness", "        readinessProbe: {grpc: {port: 9999}}", "containers[0].readinessProbe.grpc.port", true},
		{"startup", "        startupProbe: {tcpSocket: {port: 9999}}", "containers[0].startupProbe.tcpSocket.port", true},
		{"liveness", "        livenessProbe: {tcpSocket: {port: 9999}}", "containers[0].livenessProbe.tcpSocket.port", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := strings.Replace(objects(2), "        args: [pod, pricing]", "        args: [pod, pricing]\n"+tt.probe, 1)
			f, err := scenario.LoadObjects("f.yaml", []byte(objs))
			if err != nil {
				t.Fatalf("LoadObjects: %v; want the probe accepted", err)
			}
			ws := f.ProbeWarnings()
			if len(ws) != 1 {
				t.Fatalf("ProbeWarnings = %v, want 1", ws)
			}
			w := ws[0]
			if w.Kind != "Deployment" || w.Namespace != "shop" || w.Name != "pricing" || w.NeverReady != tt.neverReady {
				t.Errorf("warning for %s %s/%s never ready %v, want Deployment shop/pricing %v", w.Kind, w.Namespace, w.Name, w.NeverReady, tt.neverReady)
			}
			if !strings.Contains(w.Err.Error(), "spec.template.spec."+tt.field+": probes port 9999") {
				t.Errorf("warning %q is not at %s", w.Err, tt.field)
			}
			_, err = scenario.Load("f.yaml", []byte(objs+baseScenario))
			if err == nil || !strings.Contains(err.Error(), tt.field) || !strings.Contains(err.Error(), "a run waits for every pod to be Ready") {
				t.Errorf("Load error %v, want one at %s", err, tt.field)
			}
		})
	}
}
