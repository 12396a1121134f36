package verdict

import (
	"fmt"
	"math"
	"strings"

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
	// Reason gives the figures: schedule lag, calls not sent, CPU, and
	// for a burst what the lab was doing.
	Reason string `json:"reason"`
	// Burst is true when the lab's own work explains it: in every second
	// the generator fell behind, the lab was starting pods or opening
	// connections (labBurst), and no other process kept the CPUs busy.
	// Such a stretch says nothing about the machine; the timing checks it
	// could have decided are still INVALID.
	Burst bool `json:"burst,omitempty"`
	// Steal is true when the hypervisor's steal time coincided with every
	// second that made the stretch overloaded and was not the lab's own
	// burst, by the rule of theft (well above the run's usual steal, CPU
	// to spare without it, lag within the time stolen). It is still the
	// machine's overload, and invalidates as any other; it says the lab
	// is unlikely to have caused it.
	Steal bool `json:"steal,omitempty"`
	// ProbeStallMs is, for the run as a whole, the largest lag of one call
	// (ms) when it reached ProbeStall; 0 otherwise. The process then could
	// not answer readiness and liveness probes in time, so which pods were
	// Ready, and every share the run measured, may be the machine's.
	ProbeStallMs float64 `json:"-"`
	// ProbeStallFrom is the first second of the run with such a stall:
	// windows that ended before it are not touched by it.
	ProbeStallFrom float64 `json:"-"`
}

// ProbeStall is the lag of one call (ms) from which the lab's process may
// have missed its probes: it reached the kubelet's default probe timeout
// (timeoutSeconds: 1). From the first such second on, no check is judged
// (windows that ended before it are), not even one of a metric overload
// does not time, unless overload could only have raised it (a fresh
// tester saw a contended machine with lags of up to 2.1 s turn pods not
// Ready and fail a fairness check). Such a second is never the lab's
// burst.
const ProbeStall = 1000.0

// A second is the lab's own burst when, in it or the second before, at
// least BurstPods of the variant's pods were starting (created or turned
// Ready), or
// its clients opened at least BurstConns connections: the lab's process
// then does the kubelet's, the controllers' and the clients' work at once
// (a scale from 2 to 10 pods in each of five variants side by side put the
// generator 20-28 ms behind for that second on 2 cores).
const (
	BurstPods  = 4
	BurstConns = 50
)

// overloads returns the overloaded windows of s, and the run itself when
// any second of it was overloaded; those the lab's own bursts explain are
// marked Burst, those the hypervisor's steal explains Steal.
func overloads(s *stats.Summary) []Overload {
	bursts := labBursts(s)
	th := newTheft(s)
	var out []Overload
	if o, ok := runOverload(s, bursts, th); ok {
		out = append(out, o)
	}
	for _, w := range s.Windows {
		if r := windowOverload(w); r != "" {
			o := Overload{Window: w.Name, Reason: r}
			busy := contended(w.MachineCPU, w.ProcessCPU)
			notSent := w.ErrorCauses[string(plan.CauseNotSent)]
			if w.MachineCPU >= 0 && !busy {
				notSent = 0 // as windowOverload: the system's doing
			}
			if b := burstOnly(s, bursts, w); b != "" && !busy && w.ErrorCauses[string(plan.CauseNotSent)] == 0 {
				o.Reason, o.Burst = b+": "+r, true
			} else if st := th.explains(th.windowSeconds(bursts, w)); st != "" && notSent == 0 {
				o.Reason, o.Steal = r+"; "+st, true
			}
			out = append(out, o)
		}
	}
	return out
}

// labBursts maps each second of s to what the lab was doing in it and the
// second before, when that was a burst (see BurstPods).
func labBursts(s *stats.Summary) map[int]string {
	pods, conns := map[int]map[string]bool{}, map[int]int{}
	for _, p := range s.Pods {
		for _, ph := range p.Phases {
			if ph.Phase == stats.PodCreated || ph.Phase == stats.PodReady {
				i := int(ph.At.Seconds())
				if pods[i] == nil {
					pods[i] = map[string]bool{}
				}
				pods[i][p.Name] = true
			}
		}
	}
	for _, c := range s.Clients {
		for _, at := range c.OpenedAt {
			conns[int(at)]++
		}
	}
	out := map[int]string{}
	for i := 0; i <= int(s.End.Seconds()); i++ {
		starting := map[string]bool{}
		for _, j := range []int{i - 1, i} {
			for name := range pods[j] {
				starting[name] = true
			}
		}
		p, c := len(starting), conns[i]+conns[i-1]
		if p >= BurstPods || c >= BurstConns {
			out[i] = fmt.Sprintf("%s starting, %s opening", plural(p, "pod"), plural(c, "connection"))
		}
	}
	return out
}

// lagged reports whether second l of the run fell behind.
func lagged(l stats.LagSecond) bool { return l.P99 > OverloadLagP99 || l.Max > OverloadStall }

// burstOnly says what the lab was doing when every second of window w
// that fell behind was one of its bursts ("" when none fell behind, or
// one that did was no burst).
func burstOnly(s *stats.Summary, bursts map[int]string, w stats.WindowStats) string {
	var what []string
	for i := int(w.From); i < int(math.Ceil(w.To)) && i < len(s.Lag); i++ {
		if !lagged(s.Lag[i]) {
			continue
		}
		b, ok := bursts[i]
		if !ok || s.Lag[i].Max >= ProbeStall { // a stall is the machine's
			return ""
		}
		what = append(what, fmt.Sprintf("at %ds %s", i, b))
	}
	if len(what) == 0 {
		return ""
	}
	return "the lab's own work (" + strings.Join(what, "; ") + ")"
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
	notSent := w.ErrorCauses[string(plan.CauseNotSent)]
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
// its clients' unsent calls, marking it Burst when the lab's own bursts
// explain every second that fell behind; false if it was not overloaded.
func runOverload(s *stats.Summary, bursts map[int]string, th theft) (Overload, bool) {
	var bad []int
	var what []string // the bursts of the seconds that fell behind
	worst := stats.LagSecond{}
	for i, l := range s.Lag {
		if float64(i) >= s.End.Seconds() {
			break
		}
		if lagged(l) {
			bad = append(bad, i)
			worst.P99, worst.Max = max(worst.P99, l.P99), max(worst.Max, l.Max)
			if b, ok := bursts[i]; ok {
				what = append(what, fmt.Sprintf("at %ds %s", i, b))
			}
		}
	}
	stall, stallFrom := 0.0, 0.0
	for i, l := range s.Lag {
		if float64(i) < s.End.Seconds() && l.Max >= ProbeStall {
			if stall == 0 {
				stallFrom = float64(i)
			}
			stall = max(stall, l.Max)
		}
	}
	var busy []int
	for _, c := range s.CPU {
		if contended(c.Machine, c.Process) && c.At.Seconds() <= s.End.Seconds() {
			busy = append(busy, secondOf(c))
		}
	}
	secs := th.runSeconds(bursts, bad, busy)
	var notSent int64
	if b := busiest(s.CPU); b < 0 || b >= OverloadBusy { // unknown counts as busy
		for _, c := range s.Clients {
			notSent += c.Causes[string(plan.CauseNotSent)]
		}
	}
	if len(bad) == 0 && notSent == 0 && len(busy) == 0 {
		return Overload{}, false
	}
	var parts []string
	if len(bad) > 0 {
		parts = append(parts, fmt.Sprintf("%s with schedule lag p99 up to %.1f ms, max %.0f ms (from %ds)", plural(len(bad), "second"), worst.P99, worst.Max, bad[0]))
	}
	// A stall past a probe's timeout is the machine's, whatever the lab was
	// doing.
	if len(what) == len(bad) && notSent == 0 && len(busy) == 0 && stall == 0 {
		return Overload{Reason: "the lab's own work (" + strings.Join(what, "; ") + "): " + strings.Join(parts, "; "), Burst: true}, true
	}
	if len(busy) > 0 {
		parts = append(parts, fmt.Sprintf("%s with the machine's CPUs over %.0f%% busy, mostly with other work (from %ds)", plural(len(busy), "second"), 100*OverloadBusy, busy[0]))
	}
	if notSent > 0 {
		parts = append(parts, fmt.Sprintf("%d calls not sent", notSent))
	}
	o := Overload{Reason: strings.Join(parts, "; "), ProbeStallMs: stall, ProbeStallFrom: stallFrom}
	if st := th.explains(secs); st != "" && notSent == 0 {
		o.Reason, o.Steal = o.Reason+"; "+st, true
	}
	return o, true
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
