package runner

import "github.com/pinlab/pinlab/internal/outcome"

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
	Event(variant int, e outcome.LiveEvent)
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

func (t tap) event(e outcome.LiveEvent) {
	if t.live != nil {
		t.live.Event(t.variant, e)
	}
}
