package kubelet

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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
