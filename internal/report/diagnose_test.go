package report

import (
	"bytes"
	"testing"

	"github.com/pinlab/pinlab/internal/diagnose"
	"github.com/pinlab/pinlab/internal/evidence"
	"github.com/pinlab/pinlab/internal/evidence/evidencetest"
)

type epod = evidencetest.Pod

// TestDiagnoseTextGolden renders named diagnoses and compares each with
// testdata/diagnose-<name>.golden (rewrite with -update).
func TestDiagnoseTextGolden(t *testing.T) {
	pinned := []epod{{Calls: map[int]float64{0: 250, 1: 250}}, {Calls: map[int]float64{2: 250, 3: 250}}}
	for range 8 {
		pinned = append(pinned, epod{Added: true, Calls: map[int]float64{-1: 1}})
	}
	even := []epod{{Calls: map[int]float64{0: 125, 1: 125}}, {Calls: map[int]float64{0: 125, 1: 125}}, {Calls: map[int]float64{0: 125, 1: 125}}, {Err: "127.244.0.13:8471 serves no channelz (grpc.channelz.v1 GetServers: Unimplemented); register google.golang.org/grpc/channelz/service on the server"}}
	tests := []struct {
		name string
		ev   evidence.Evidence
	}{
		{"clusterip-pinned", evidencetest.Build(false, pinned, 4, nil)},
		{"sidecar-balanced-partial", evidencetest.Build(false, even, 2, map[string]string{"sidecar.istio.io/status": "{}"})},
		{"no-calls", evidencetest.Build(true, []epod{{}, {}}, 0, nil)},
		{"agent-pinned", evidencetest.AsBytes(evidencetest.Build(false, []epod{{Calls: map[int]float64{0: 25000, 1: 25000}}, {}, {}}, 2, nil))},
		{"exec-pinned", evidencetest.AsConnections(evidencetest.Build(false, []epod{{Calls: map[int]float64{0: 1, 1: 1}}, {}, {}}, 2, nil))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := diagnose.Diagnose(tt.ev)
			var buf bytes.Buffer
			if err := DiagnoseText(&buf, &r); err != nil {
				t.Fatal(err)
			}
			checkGolden(t, "diagnose-"+tt.name+".golden", buf.Bytes())
		})
	}
}
