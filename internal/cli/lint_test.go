package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/control"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/scenariotest"
	corev1 "k8s.io/api/core/v1"
)

// TestLabUpStartsNeverReadyPods: lab up starts a Deployment whose
// readiness probe can never pass, warns at the field and serves; the pod
// stays not Ready, as in Kubernetes.
func TestLabUpStartsNeverReadyPods(t *testing.T) {
	path := scenariotest.WriteFile(t, "never.yaml", scenariotest.WithNamespace(scenariotest.ProbeDocs, "        readinessProbe: {grpc: {port: 9999}, periodSeconds: 1}\n"))
	ctl, errb := upLabFile(t, path)
	if !strings.Contains(errb.String(), "warning: ") || !strings.Contains(errb.String(), "readinessProbe.grpc.port: probes port 9999") {
		t.Errorf("no warning at the probe's field:\n%s", errb)
	}
	var pod corev1.Pod
	labtest.WaitFor(t, 30*time.Second, "web's pod running", func() bool {
		objs, err := ctl.Objects(context.Background())
		if err != nil || len(objs.Pods) != 1 {
			return false
		}
		pod = objs.Pods[0]
		return pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP != ""
	})
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			t.Errorf("pod %s is Ready; its probe targets a port nothing listens on", pod.Name)
		}
	}
}

// upLabFile runs `pinlab lab up -f path` until the test ends and returns a
// client of its control API once it serves, and its standard error.
func upLabFile(t *testing.T, path string) (*control.Client, *labtest.Buffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, errb := &labtest.Buffer{}, &labtest.Buffer{}
	opts := &LabUpOptions{File: path, Control: freeAddr(t), LogLevel: "off", Pods: "disabled", Out: out, Err: errb}
	done := make(chan error, 1)
	go func() { done <- labUp(ctx, opts) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("lab up: %v", err)
		}
	})
	c := &control.Client{Addr: opts.Control}
	var stopped error
	labtest.WaitFor(t, 60*time.Second, "lab up serving its control API", func() bool {
		select {
		case stopped = <-done:
			done <- stopped // for the cleanup
			return true
		default:
		}
		_, err := c.Info(context.Background())
		return err == nil
	})
	if stopped != nil {
		t.Fatalf("lab up stopped: %v\n%s", stopped, errb)
	}
	return c, errb
}
