package verdict

import (
	"fmt"
	"math"
	"slices"

	"github.com/pinlab/pinlab/internal/stats"
)

// StealShare is how far above the run's usual steal (see theft) the
// hypervisor's steal in a second must be, as a share of all CPUs, for
// that second's lag to be the hypervisor's: on 2 CPUs, 100 ms more of the
// vCPUs' time given to other guests than in the seconds that kept their
// schedule. A vCPU the hypervisor deschedules stops every thread on it,
// the generator's among them, for that slice.
const StealShare = 0.05

// theft judges whether the hypervisor's steal (stats.CPUSecond.Steal)
// explains the seconds that made a run or window overloaded. A second is
// stolen when its CPU sample (the one covering most of it) shows
//   - steal at least StealShare above base, the median steal of the run's
//     seconds that kept their schedule: steal this VM has every second
//     (5-17% of most seconds here, for hours) explains no one second's
//     lag, and a run with no such second has no base and no stolen
//     second;
//   - without the steal, the machine's CPUs less busy than OverloadBusy,
//     and the machine's other processes (busy less steal less the lab's
//     process; the kernel's interrupt work included) using less than the
//     steal: where this machine's own processes filled the CPUs, or
//     others took more than the hypervisor, the lab would have waited
//     anyway;
//   - a schedule lag no larger than the time each vCPU lost on average
//     in it (steal x 1 s): a stall past that, and so any past a probe's
//     timeout, is something else.
//
// The rule attributes, it does not prove: a second can meet it while the
// lab also fell behind on its own. It is meant to keep a virtual machine's
// neighbours from reading as the lab's fault, and to be hard to meet for a
// lab that falls behind every second.
type theft struct {
	s       *stats.Summary
	base    float64                 // +Inf when no second kept its schedule
	samples map[int]stats.CPUSecond // by the second each covers most of
}

func newTheft(s *stats.Summary) theft {
	samples := map[int]stats.CPUSecond{}
	for _, c := range s.CPU {
		if _, ok := samples[secondOf(c)]; !ok {
			samples[secondOf(c)] = c
		}
	}
	var calm []float64
	for _, c := range s.CPU {
		i := secondOf(c)
		if i >= 0 && i < len(s.Lag) && float64(i) < s.End.Seconds() && !lagged(s.Lag[i]) && c.Machine >= 0 {
			calm = append(calm, c.Steal)
		}
	}
	if len(calm) == 0 {
		return theft{s: s, base: math.Inf(1), samples: samples}
	}
	slices.Sort(calm)
	return theft{s: s, base: calm[len(calm)/2], samples: samples}
}

// secondOf is the second of the run a CPU sample covers most of: samples
// are taken every second, a little after the run's start, and At is the
// end of the second sampled.
func secondOf(c stats.CPUSecond) int { return int(math.Floor(c.At.Seconds() - 0.5)) }

// sample returns the CPU sample covering most of second i.
func (t theft) sample(i int) (stats.CPUSecond, bool) {
	c, ok := t.samples[i]
	return c, ok && c.Machine >= 0
}

// stolen reports whether the hypervisor's steal explains second i.
func (t theft) stolen(i int) bool {
	c, ok := t.sample(i)
	others := c.Machine - c.Steal - max(c.Process, 0)
	if !ok || c.Steal < t.base+StealShare || c.Machine-c.Steal >= OverloadBusy || others >= c.Steal {
		return false
	}
	return i >= len(t.s.Lag) || t.s.Lag[i].Max <= 1000*c.Steal
}

// explains says what the hypervisor took when it explains every one of
// secs, and there is at least one ("" otherwise).
func (t theft) explains(secs []int) string {
	if len(secs) == 0 {
		return ""
	}
	low, high := math.Inf(1), 0.0
	for _, i := range secs {
		if !t.stolen(i) {
			return ""
		}
		c, _ := t.sample(i)
		low, high = min(low, c.Steal), max(high, c.Steal)
	}
	return fmt.Sprintf("the hypervisor's: in %s it ran other guests for %.0f-%.0f%% of the CPUs' time (steal), against %.0f%% in the seconds that kept their schedule", plural(len(secs), "such second"), 100*low, 100*high, 100*t.base)
}

// runSeconds returns the seconds that made the run overloaded and that
// the lab's own bursts do not explain: bad (lagged) seconds but bursts
// without a probe stall, and busy (contended) ones.
func (t theft) runSeconds(bursts map[int]string, bad, busy []int) []int {
	var out []int
	for _, i := range bad {
		if _, ok := bursts[i]; ok && t.s.Lag[i].Max < ProbeStall {
			continue
		}
		out = append(out, i)
	}
	for _, i := range busy {
		if !slices.Contains(out, i) {
			out = append(out, i)
		}
	}
	return out
}

// windowSeconds returns the seconds of window w that fell behind or were
// contended, but the lab's own bursts without a probe stall.
func (t theft) windowSeconds(bursts map[int]string, w stats.WindowStats) []int {
	var out []int
	for i := int(w.From); i < int(math.Ceil(w.To)); i++ {
		bad := i < len(t.s.Lag) && lagged(t.s.Lag[i])
		c, ok := t.sample(i)
		if !bad && !(ok && contended(c.Machine, c.Process)) {
			continue
		}
		if _, burst := bursts[i]; burst && bad && t.s.Lag[i].Max < ProbeStall {
			continue
		}
		out = append(out, i)
	}
	return out
}
