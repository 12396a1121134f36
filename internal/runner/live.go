package runner

import (
	"time"

	"github.com/pinlab/pinlab/internal/stats"
)

// Live is told what each variant's lab does as it happens, for a live view
// (pinlab lab run --ui); variant is the variant's index in the plan.
// Methods are called from many goroutines, Served on every call a pod
// serves: they must return quickly and never block.
type Live interface {
	// Served: pod served one call of a load client.
	Served(variant int, pod string)
	// Conn: a load client's connection opened (open) or closed.
	Conn(variant int, client string, open bool)
	// Event: a pod changed or a timeline step was carried out.
	Event(variant int, e LiveEvent)
}

// LiveEvent is one change in a variant's lab.
type LiveEvent struct {
	At time.Time
	// Pod is the pod that changed, with its IP when known; Phase its new
	// phase as the API shows it (created, ready, not-ready, terminating,
	// deleted), or empty for a kubelet event (Text: "sigterm", "killed",
	// "restarted", ...).
	Pod, IP string
	Phase   stats.PodPhase
	// Text describes a timeline step ("10s: scale Deployment pricing to
	// 10") or a kubelet event; Err is a failed step's error.
	Text, Err string
}

// tap forwards one variant's events to Options.Live; its zero value
// forwards nothing.
type tap struct {
	live    Live
	variant int
}

func (t tap) served(pod string) {
	if t.live != nil {
		t.live.Served(t.variant, pod)
	}
}

func (t tap) conn(client string, open bool) {
	if t.live != nil {
		t.live.Conn(t.variant, client, open)
	}
}

func (t tap) event(e LiveEvent) {
	if t.live != nil {
		t.live.Event(t.variant, e)
	}
}
