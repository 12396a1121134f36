package verdict

import (
	"fmt"
	"strings"

	"github.com/pinlab/pinlab/internal/load"
	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/stats"
)

// The load generator's health: where it fell behind its own schedule, the
// machine, not the system under test, shaped the timing figures (every
// pod, proxy and client of a lab shares the machine's CPUs).
const (
	// OverloadLagP99 is the schedule lag p99 (ms) above which a window or
	// second was overloaded: calls went out that much later than due.
	OverloadLagP99 = 20.0
	// OverloadStall is the largest schedule lag (ms) of one call above
	// which a window or second was overloaded: the process stalled (CPU
	// starved, or a long pause) for that long.
	OverloadStall = 200.0
)

// Overload is a stretch where the load generator could not keep its
// schedule.
type Overload struct {
	// Window names the window; empty for the run as a whole.
	Window string `json:"window,omitempty"`
	// Reason gives the figures: schedule lag, calls not sent, CPU.
	Reason string `json:"reason"`
}

// overloads returns the overloaded windows of s, and the run itself when
// any second of it was overloaded.
func overloads(s *stats.Summary) []Overload {
	var out []Overload
	if r := runOverload(s); r != "" {
		out = append(out, Overload{Reason: r})
	}
	for _, w := range s.Windows {
		if r := windowOverload(w); r != "" {
			out = append(out, Overload{Window: w.Name, Reason: r})
		}
	}
	return out
}

// OverloadBusy is the machine's busy CPU share (all CPUs, averaged over a
// window or a second) from which the machine is overloaded: the pods,
// proxies and clients of a lab wait for CPU whatever the schedule's lag
// says. Calls not sent (clients at their in-flight limit) count as
// overload only from it: below it they were waiting on the system under
// test (a hung or slow pod), which is what the run measures.
const OverloadBusy = 0.9

// windowOverload says why window w was overloaded; "" if it was not: a
// late schedule, calls not sent on a busy machine, or CPUs busier than
// OverloadBusy mostly with other processes' work (contended), which slows
// the pods and proxies as much as the generator (2 x cores of CPU hogs
// beside a run raised its p99 from about 2 to 50 ms with the schedule lag
// p99 under 20 ms).
func windowOverload(w stats.WindowStats) string {
	busy := contended(w.MachineCPU, w.ProcessCPU)
	notSent := w.ErrorCauses[string(load.CauseNotSent)]
	if w.MachineCPU >= 0 && !busy {
		notSent = 0
	}
	if w.LagP99 <= OverloadLagP99 && w.LagMax <= OverloadStall && notSent == 0 && !busy {
		return ""
	}
	parts := []string{fmt.Sprintf("schedule lag p99 %.1f ms, max %.0f ms", w.LagP99, w.LagMax)}
	if notSent > 0 {
		parts = append(parts, fmt.Sprintf("%d calls not sent (clients at their in-flight limit)", notSent))
	}
	return strings.Join(append(parts, cpuText(w.MachineCPU, w.ProcessCPU)...), "; ")
}

// runOverload says why the run was overloaded, from its seconds' lag and
// its clients' unsent calls; "" if it was not.
func runOverload(s *stats.Summary) string {
	var bad []int
	worst := stats.LagSecond{}
	for i, l := range s.Lag {
		if float64(i) >= s.End.Seconds() {
			break
		}
		if l.P99 > OverloadLagP99 || l.Max > OverloadStall {
			bad = append(bad, i)
			worst.P99, worst.Max = max(worst.P99, l.P99), max(worst.Max, l.Max)
		}
	}
	var busy []int
	for _, c := range s.CPU {
		if contended(c.Machine, c.Process) && c.At.Seconds() <= s.End.Seconds() {
			busy = append(busy, int(c.At.Seconds()))
		}
	}
	var notSent int64
	if b := busiest(s.CPU); b < 0 || b >= OverloadBusy { // unknown counts as busy
		for _, c := range s.Clients {
			notSent += c.Causes[string(load.CauseNotSent)]
		}
	}
	if len(bad) == 0 && notSent == 0 && len(busy) == 0 {
		return ""
	}
	var parts []string
	if len(bad) > 0 {
		parts = append(parts, fmt.Sprintf("%s with schedule lag p99 up to %.1f ms, max %.0f ms (from %ds)", plural(len(bad), "second"), worst.P99, worst.Max, bad[0]))
	}
	if len(busy) > 0 {
		parts = append(parts, fmt.Sprintf("%s with the machine's CPUs over %.0f%% busy, mostly with other work (from %ds)", plural(len(busy), "second"), 100*OverloadBusy, busy[0]-1))
	}
	if notSent > 0 {
		parts = append(parts, fmt.Sprintf("%d calls not sent", notSent))
	}
	return strings.Join(parts, "; ")
}

// contended reports CPUs busier than OverloadBusy with other processes
// taking at least half of that: the lab waited for CPU others held. A lab
// that keeps the CPUs busy by itself is judged by its schedule's lag.
func contended(machine, process float64) bool {
	return machine >= OverloadBusy && process >= 0 && process <= machine/2
}

// busiest returns the machine's highest busy share over the seconds of
// cpu (-1 when it was not measured).
func busiest(cpu []stats.CPUSecond) float64 {
	m := -1.0
	for _, c := range cpu {
		m = max(m, c.Machine)
	}
	return m
}

func cpuText(machine, process float64) []string {
	if process < 0 {
		return nil
	}
	if machine < 0 {
		return []string{fmt.Sprintf("the lab process used %.0f%% of the CPUs", 100*process)}
	}
	return []string{fmt.Sprintf("machine CPU %.0f%% busy, the lab process %.0f%%", 100*machine, 100*process)}
}

// overloadOf returns the overload that invalidates a timing check on
// window (empty: the run), if any.
func overloadOf(os []Overload, window string) (Overload, bool) {
	for _, o := range os {
		if o.Window == window {
			return o, true
		}
	}
	return Overload{}, false
}

// timing reports whether metric is one an overloaded machine changes.
func timing(metric string) bool { return plan.Metrics[metric].Timing }
