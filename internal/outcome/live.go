package outcome

import (
	"time"

	"github.com/pinlab/pinlab/internal/stats"
)

// Progress is one variant's state for a progress line.
type Progress struct {
	Variant  string
	State    string // "waiting", "starting", "running", "done", "interrupted", "failed"
	Elapsed  time.Duration
	Duration time.Duration
	Calls    int64
	Failed   int64
}

// LiveEvent is one change in a variant's lab, for a live view.
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
