package kubelet

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestProbeRun(t *testing.T) {
	tests := []struct {
		name             string
		success, failure int32
		results          string // o: success, x: failure
		want             string // per result: S set success, F set failure, - unchanged
	}{
		{name: "thresholds 1", success: 1, failure: 1, results: "oxox", want: "SFSF"},
		{name: "failure threshold 3", success: 1, failure: 3, results: "oxxoxxxx", want: "S--S--FF"},
		{name: "success threshold 2", success: 2, failure: 1, results: "ooxoxoo", want: "-SF-F-S"},
		{name: "a failure resets the success run", success: 3, failure: 3, results: "ooxooo", want: "-----S"},
		{name: "zero thresholds count as 1", success: 0, failure: 0, results: "ox", want: "SF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newProbeRun(&corev1.Probe{SuccessThreshold: tt.success, FailureThreshold: tt.failure})
			var got strings.Builder
			for _, c := range tt.results {
				ok := c == 'o'
				switch {
				case !r.observe(ok):
					got.WriteByte('-')
				case ok:
					got.WriteByte('S')
				default:
					got.WriteByte('F')
				}
			}
			if got.String() != tt.want {
				t.Errorf("results %s gave %s, want %s", tt.results, got.String(), tt.want)
			}
		})
	}
}

func TestProbeDue(t *testing.T) {
	delayed := &corev1.Probe{InitialDelaySeconds: 2}
	tests := []struct {
		name       string
		kind       probeKind
		probe      *corev1.Probe
		sinceStart time.Duration
		started    bool
		want       bool
	}{
		{name: "readiness at start", kind: readiness, want: true, started: true},
		{name: "readiness before initial delay", kind: readiness, probe: delayed, sinceStart: 1999 * time.Millisecond, started: true},
		{name: "readiness at initial delay", kind: readiness, probe: delayed, sinceStart: 2 * time.Second, started: true, want: true},
		{name: "readiness waits for startup", kind: readiness, sinceStart: time.Minute},
		{name: "liveness waits for startup", kind: liveness, sinceStart: time.Minute},
		{name: "liveness after startup", kind: liveness, started: true, want: true},
		{name: "startup until started", kind: startup, want: true},
		{name: "startup stops once started", kind: startup, started: true},
		{name: "startup honours initial delay", kind: startup, probe: delayed, sinceStart: time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := due(tt.kind, tt.probe, tt.sinceStart, tt.started); got != tt.want {
				t.Errorf("due = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestStopTimeout(t *testing.T) {
	tests := []struct {
		name  string
		grace int64
		ran   time.Duration
		want  time.Duration
	}{
		{name: "no hook", grace: 30, want: 30 * time.Second},
		{name: "hook seconds are truncated", grace: 3, ran: 1900 * time.Millisecond, want: 2 * time.Second},
		{name: "one second hook", grace: 3, ran: 1001 * time.Millisecond, want: 2 * time.Second},
		{name: "short grace gets the minimum", grace: 1, want: 2 * time.Second},
		{name: "hook overran the grace", grace: 5, ran: 5 * time.Second, want: 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := stopTimeout(tt.grace, tt.ran); got != tt.want {
				t.Errorf("stopTimeout(%d, %v) = %v, want %v", tt.grace, tt.ran, got, tt.want)
			}
		})
	}
}

func TestGracePeriod(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	withProbe := func(podGrace, probeGrace, deletion *int64) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{TerminationGracePeriodSeconds: podGrace, Containers: []corev1.Container{{
			LivenessProbe: &corev1.Probe{TerminationGracePeriodSeconds: probeGrace},
		}}}}
		p.DeletionGracePeriodSeconds = deletion
		return p
	}
	tests := []struct {
		name   string
		pod    *corev1.Pod
		reason killReason
		want   int64
	}{
		{name: "deletion grace wins", pod: withProbe(i64(30), i64(5), i64(7)), reason: killLiveness, want: 7},
		{name: "probe grace for a liveness kill", pod: withProbe(i64(30), i64(5), nil), reason: killLiveness, want: 5},
		{name: "pod grace for a startup kill without its own", pod: withProbe(i64(30), i64(5), nil), reason: killStartup, want: 30},
		{name: "pod grace for deletion", pod: withProbe(i64(30), i64(5), nil), reason: killDeleted, want: 30},
		{name: "nothing set", pod: withProbe(nil, nil, nil), reason: killDeleted, want: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := gracePeriod(tt.pod, tt.reason); got != tt.want {
				t.Errorf("gracePeriod = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestPreStopHook(t *testing.T) {
	exec := func(cmd ...string) *corev1.LifecycleHandler {
		return &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: cmd}}
	}
	tests := []struct {
		name      string
		handler   *corev1.LifecycleHandler
		want      time.Duration
		wantField string // non-empty: a SpecError on this field
	}{
		{name: "sleep action", handler: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 5}}, want: 5 * time.Second},
		{name: "sleep action zero", handler: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{}}, want: 0},
		{name: "sleep action past the grace", handler: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 31}}, wantField: "containers[0].lifecycle.preStop.sleep.seconds"},
		{name: "sleep action negative", handler: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: -1}}, wantField: "containers[0].lifecycle.preStop.sleep.seconds"},
		{name: "exec sleep", handler: exec("sleep", "10"), want: 10 * time.Second},
		{name: "exec sleep path and fraction", handler: exec("/bin/sleep", "0.5"), want: 500 * time.Millisecond},
		{name: "exec sleep minutes", handler: exec("sleep", "1m"), want: time.Minute},
		{name: "exec shell sleep", handler: exec("/bin/sh", "-c", "sleep 15"), want: 15 * time.Second},
		{name: "exec shell sleep with spaces", handler: exec("sh", "-c", "  sleep   2s "), want: 2 * time.Second},
		{name: "exec other command", handler: exec("/bin/sh", "-c", "nginx -s quit"), wantField: "containers[0].lifecycle.preStop.exec.command"},
		{name: "exec sleep then more", handler: exec("/bin/sh", "-c", "sleep 5 && kill 1"), wantField: "containers[0].lifecycle.preStop.exec.command"},
		{name: "exec bad duration", handler: exec("sleep", "soon"), wantField: "containers[0].lifecycle.preStop.exec.command"},
		{name: "exec infinite", handler: exec("sleep", "inf"), wantField: "containers[0].lifecycle.preStop.exec.command"},
		{name: "exec negative", handler: exec("sleep", "-3"), wantField: "containers[0].lifecycle.preStop.exec.command"},
		{name: "httpGet", handler: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/quit"}}, wantField: "containers[0].lifecycle.preStop.httpGet"},
		{name: "no action", handler: &corev1.LifecycleHandler{}, wantField: "containers[0].lifecycle.preStop"},
	}
	grace := int64(30)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &corev1.Container{Lifecycle: &corev1.Lifecycle{PreStop: tt.handler}}
			h, err := preStopHook(c, &grace)
			if tt.wantField != "" {
				var se *SpecError
				if !errors.As(err, &se) || se.Field != tt.wantField {
					t.Fatalf("error %v, want a SpecError on %s", err, tt.wantField)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if h == nil || h.Sleep != tt.want {
				t.Errorf("hook %+v, want a sleep of %v", h, tt.want)
			}
		})
	}
}

func TestWorkloadForProbesAndHooks(t *testing.T) {
	grpcProbe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 8471}}}
	tcpProbe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("grpc")}}}
	execProbe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
	tests := []struct {
		name      string
		mod       func(*corev1.Container, *corev1.PodSpec)
		wantField string
		wantHook  time.Duration
	}{
		{name: "liveness and startup probes", mod: func(c *corev1.Container, _ *corev1.PodSpec) {
			c.LivenessProbe, c.StartupProbe, c.ReadinessProbe = grpcProbe, tcpProbe, grpcProbe
		}},
		{name: "exec liveness probe", mod: func(c *corev1.Container, _ *corev1.PodSpec) { c.LivenessProbe = execProbe }, wantField: "containers[0].livenessProbe"},
		{name: "exec startup probe", mod: func(c *corev1.Container, _ *corev1.PodSpec) { c.StartupProbe = execProbe }, wantField: "containers[0].startupProbe"},
		{name: "preStop sleep", mod: func(c *corev1.Container, _ *corev1.PodSpec) {
			c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 3}}}
		}, wantHook: 3 * time.Second},
		{name: "postStart", mod: func(c *corev1.Container, _ *corev1.PodSpec) {
			c.Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 1}}}
		}, wantField: "containers[0].lifecycle.postStart"},
		// Ports are int32 in the API; 70000 must not wrap to 4464 (issue 15).
		{name: "containerPort above 65535", mod: func(c *corev1.Container, _ *corev1.PodSpec) { c.Ports[0].ContainerPort = 70000 }, wantField: "containers[0].ports[0].containerPort"},
		{name: "grpc probe port above 65535", mod: func(c *corev1.Container, _ *corev1.PodSpec) {
			c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 8471 + 65536}}}
		}, wantField: "containers[0].readinessProbe.grpc.port"},
		{name: "unknown restartPolicy", mod: func(_ *corev1.Container, s *corev1.PodSpec) { s.RestartPolicy = "Sometimes" }, wantField: "restartPolicy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			grace := int64(30)
			spec := corev1.PodSpec{TerminationGracePeriodSeconds: &grace, Containers: []corev1.Container{{
				Name: "app", Image: "pinlab", Args: []string{"pod", "pricing"},
				Ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: 8471}},
			}}}
			tt.mod(&spec.Containers[0], &spec)
			w, err := WorkloadFor(&spec)
			if err == nil {
				err = CheckProbePort(&spec.Containers[0], w.Port)
			}
			if tt.wantField != "" {
				var se *SpecError
				if !errors.As(err, &se) || se.Field != tt.wantField {
					t.Fatalf("error %v, want a SpecError on %s", err, tt.wantField)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got time.Duration
			if w.PreStop != nil {
				got = w.PreStop.Sleep
			}
			if got != tt.wantHook {
				t.Errorf("preStop sleep %v, want %v", got, tt.wantHook)
			}
			if err := CheckProbePort(&spec.Containers[0], w.Port); err != nil {
				t.Errorf("CheckProbePort: %v", err)
			}
		})
	}
}

func TestCheckProbePortAllProbes(t *testing.T) {
	c := &corev1.Container{Ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: 8471}, {Name: "admin", ContainerPort: 9000}}}
	c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("admin")}}}
	var se *SpecError
	err := CheckProbePort(c, 8471)
	if !errors.As(err, &se) {
		t.Fatalf("CheckProbePort = %v, want a SpecError", err)
	}
	if diff := cmp.Diff("containers[0].livenessProbe.tcpSocket.port", se.Field); diff != "" {
		t.Errorf("field (-want +got):\n%s", diff)
	}
}
