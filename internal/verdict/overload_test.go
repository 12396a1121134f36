package verdict

import (
	"strings"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/stats"
)

// TestOverloadCases: a quiet run is not overloaded; a second the lab
// itself spent starting pods or opening connections is the lab's burst,
// not the machine's overload; a CPU hog beside the lab or a stalled
// process is the machine's, also when a burst happened too; the
// hypervisor's steal explains an overload only when every second of it
// that is not a burst had steal StealShare above the run's usual, spare
// CPU without it, and no more lag than the time stolen (see theft).
func TestOverloadCases(t *testing.T) {
	quiet := func() stats.Summary {
		s := stats.Summary{End: stats.Offset(20e9)}
		for i := range 20 {
			s.Lag = append(s.Lag, stats.LagSecond{P99: 1, Max: 3})
			// sampled a little after each second's end, as sampleCPU does
			s.CPU = append(s.CPU, stats.CPUSecond{At: stats.Offset(float64(i+1)*1e9 + 3e6), Machine: 0.5, Process: 0.45, Steal: 0.01})
		}
		s.Windows = []stats.WindowStats{{Name: "before", From: 0, To: 10, LagP99: 1, LagMax: 3, MachineCPU: 0.5, ProcessCPU: 0.45},
			{Name: "after", From: 10, To: 20, LagP99: 1, LagMax: 3, MachineCPU: 0.5, ProcessCPU: 0.45}}
		for i := range 2 {
			s.Pods = append(s.Pods, stats.PodLife{Name: "old" + string(rune('a'+i)), Phases: []stats.PhaseChange{{Phase: stats.PodCreated, At: 0}, {Phase: stats.PodReady, At: stats.Offset(0.2e9)}}})
		}
		return s
	}
	lagAt := func(s *stats.Summary, second int, p99, max float64) {
		s.Lag[second] = stats.LagSecond{P99: p99, Max: max}
		for i := range s.Windows {
			w := &s.Windows[i]
			if float64(second) >= float64(w.From) && float64(second) < float64(w.To) {
				w.LagP99, w.LagMax = p99, max
			}
		}
	}
	stealAt := func(s *stats.Summary, second int, share float64) {
		s.CPU[second].Steal = share
		s.CPU[second].Machine += share
	}
	scaleAt := func(s *stats.Summary, second, pods int) {
		for i := range pods {
			at := stats.Offset(float64(second)*1e9 + float64(i)*1e7)
			s.Pods = append(s.Pods, stats.PodLife{Name: "new" + string(rune('a'+i)), Phases: []stats.PhaseChange{{Phase: stats.PodCreated, At: at}, {Phase: stats.PodReady, At: at + stats.Offset(3e8)}}})
		}
	}
	// background is this VM's usual steal: 5-17% of most seconds.
	background := func(s *stats.Summary, share float64) {
		for i := range s.CPU {
			stealAt(s, i, share)
		}
	}
	tests := []struct {
		name   string
		edit   func(*stats.Summary)
		kinds  string // per overload, the run's first: B burst, S the hypervisor's steal, - neither
		reason string // in the first's reason
	}{
		{name: "a quiet run", edit: func(*stats.Summary) {}},
		{name: "the lab's burst: 8 pods at 10s", edit: func(s *stats.Summary) { scaleAt(s, 10, 8); lagAt(s, 10, 28, 36) },
			kinds: "BB", reason: "the lab's own work (at 10s 8 pods starting, 0 connections opening)"},
		{name: "the lab's burst: connections", edit: func(s *stats.Summary) {
			s.Clients = []stats.ClientStats{{OpenedAt: func() (at []float64) {
				for i := range 80 {
					at = append(at, 12+float64(i)/100)
				}
				return at
			}()}}
			lagAt(s, 12, 25, 30)
		}, kinds: "BB", reason: "80 connections opening"},
		{name: "a CPU hog", edit: func(s *stats.Summary) {
			for i := range s.CPU {
				s.CPU[i].Machine, s.CPU[i].Process = 0.98, 0.3
			}
			for i := range s.Windows {
				s.Windows[i].MachineCPU, s.Windows[i].ProcessCPU = 0.98, 0.3
			}
		}, kinds: "---", reason: "mostly with other work"},
		{name: "a stalled process", edit: func(s *stats.Summary) { lagAt(s, 5, 150, 400) }, kinds: "--", reason: "max 400 ms"},
		{name: "a burst and a stall", edit: func(s *stats.Summary) { scaleAt(s, 10, 8); lagAt(s, 10, 28, 36); lagAt(s, 15, 150, 400) },
			kinds: "--", reason: "2 seconds with schedule lag"},
		{name: "the hypervisor's steal", edit: func(s *stats.Summary) { stealAt(s, 5, 0.12); lagAt(s, 5, 45, 60) },
			kinds: "SS", reason: "the hypervisor's: in 1 such second it ran other guests for 12-12% of the CPUs' time (steal), against 1% in the seconds that kept their schedule"},
		{name: "steal over this VM's usual", edit: func(s *stats.Summary) { background(s, 0.1); stealAt(s, 5, 0.2); lagAt(s, 5, 45, 60) },
			kinds: "SS", reason: "for 20-20% of the CPUs' time (steal), against 10%"},
		{name: "a sampler started late", edit: func(s *stats.Summary) {
			for i := range s.CPU {
				s.CPU[i].At += stats.Offset(0.7e9) // [i+0.7, i+1.7): most of second i+1
			}
			stealAt(s, 5, 0.2) // covers most of second 6
			lagAt(s, 6, 45, 60)
		}, kinds: "SS", reason: "the hypervisor's: in 1 such second it ran other guests for 20-20%"},
		{name: "a burst, and steal in another second", edit: func(s *stats.Summary) {
			scaleAt(s, 10, 8)
			lagAt(s, 10, 28, 36)
			stealAt(s, 5, 0.12)
			lagAt(s, 5, 45, 60)
		}, kinds: "SSB", reason: "the hypervisor's"},
		// A lab that falls behind on its own: none is the hypervisor's.
		{name: "steal under the share", edit: func(s *stats.Summary) { stealAt(s, 5, 0.05); lagAt(s, 5, 45, 60) },
			kinds: "--", reason: "1 second with schedule lag"},
		{name: "steal in another second", edit: func(s *stats.Summary) { stealAt(s, 4, 0.2); stealAt(s, 6, 0.2); lagAt(s, 5, 45, 60) },
			kinds: "--", reason: "1 second with schedule lag"},
		{name: "one second stolen, one not", edit: func(s *stats.Summary) { stealAt(s, 5, 0.2); lagAt(s, 5, 45, 60); lagAt(s, 15, 45, 60) },
			kinds: "-S-", reason: "2 seconds with schedule lag"},
		{name: "the usual steal while the lab fills the CPUs", edit: func(s *stats.Summary) {
			background(s, 0.08)
			for i := range s.CPU {
				s.CPU[i].Machine, s.CPU[i].Process = 0.99, 0.9
			}
			for i := 2; i < 10; i++ {
				lagAt(s, i, 45, 60)
			}
		}, kinds: "--", reason: "8 seconds with schedule lag"},
		{name: "a stall in stolen time", edit: func(s *stats.Summary) { stealAt(s, 5, 0.3); lagAt(s, 5, 150, 1200) },
			kinds: "--", reason: "max 1200 ms"},
		{name: "more lag than the time stolen", edit: func(s *stats.Summary) { stealAt(s, 5, 0.06); lagAt(s, 5, 150, 300) },
			kinds: "--", reason: "max 300 ms"},
		{name: "a process of this machine beside the steal", edit: func(s *stats.Summary) {
			stealAt(s, 5, 0.1)
			s.CPU[5].Machine, s.CPU[5].Process = 0.97, 0.2
			lagAt(s, 5, 45, 60)
		}, kinds: "--", reason: "mostly with other work"},
		{name: "lag in every second", edit: func(s *stats.Summary) {
			background(s, 0.3)
			for i := range 20 {
				lagAt(s, i, 45, 60)
			}
		}, kinds: "---", reason: "20 seconds with schedule lag"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := quiet()
			tt.edit(&s)
			got := overloads(&s)
			kinds := ""
			for _, o := range got {
				switch {
				case o.Burst && o.Steal:
					kinds += "?"
				case o.Burst:
					kinds += "B"
				case o.Steal:
					kinds += "S"
				default:
					kinds += "-"
				}
			}
			if kinds != tt.kinds {
				t.Fatalf("overloads %q, want %q: %+v", kinds, tt.kinds, got)
			}
			if len(got) > 0 && !strings.Contains(got[0].Reason, tt.reason) {
				t.Errorf("reason %q, want it to contain %q", got[0].Reason, tt.reason)
			}
		})
	}
}

// TestProbeStallInvalidatesEveryCheck: a second with a call late by a
// probe's timeout or more is the machine's even while the lab starts pods
// (at run and window level), and makes every check measured from it on
// INVALID, fairness included, but for a bound overload could only have
// raised the value to miss (failed <= 0 stands); a window that ended
// before it is judged.
func TestProbeStallInvalidatesEveryCheck(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	p := &plan.Plan{Duration: 20 * time.Second}
	v := plan.Variant{Expect: []plan.Expectation{
		{Name: "fair before", Metric: "jain", Window: "before", AtLeast: f(0.95)},
		{Name: "fair after", Metric: "jain", Window: "after", AtLeast: f(0.95)},
		{Name: "no call fails", Metric: "failed", AtMost: f(0)},
	}}
	summary := func(stallMs float64) stats.Summary {
		s := stats.Summary{End: stats.Offset(20e9)}
		for range 20 {
			s.Lag = append(s.Lag, stats.LagSecond{P99: 1, Max: 3})
		}
		s.Lag[12] = stats.LagSecond{P99: stallMs, Max: stallMs}
		for i := range 8 { // the lab starting pods in that second
			at := stats.Offset(12e9 + float64(i)*1e7)
			s.Pods = append(s.Pods, stats.PodLife{Name: "new" + string(rune('a'+i)), Phases: []stats.PhaseChange{{Phase: stats.PodCreated, At: at}}})
		}
		s.Windows = []stats.WindowStats{
			{Name: "before", From: 0, To: 10, Jain: 0.5, LagP99: 1, LagMax: 3},
			{Name: "after", From: 10, To: 20, Jain: 0.5, LagP99: stallMs, LagMax: stallMs},
		}
		return s
	}
	tests := []struct {
		name    string
		stallMs float64
		burst   bool     // the run's and the window's overload a burst
		want    []string // per expectation: PASS, FAIL or INVALID
	}{
		{name: "a 300 ms stall while pods start: a burst, fairness judged", stallMs: 300, burst: true, want: []string{"FAIL", "FAIL", "PASS"}},
		{name: "a 1500 ms stall: the machine's, fairness after it INVALID", stallMs: 1500, want: []string{"FAIL", "INVALID", "PASS"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := summary(tt.stallMs)
			all := overloads(&s)
			if len(all) != 2 {
				t.Fatalf("overloads %+v, want the run's and window after's", all)
			}
			for _, o := range all {
				if o.Burst != tt.burst {
					t.Errorf("overload %+v: Burst %v, want %v", o, o.Burst, tt.burst)
				}
			}
			if run, _ := overloadOf(all, ""); (run.ProbeStallMs > 0) != (tt.stallMs >= ProbeStall) {
				t.Errorf("run overload %+v: probe stall %v, want %v", run, run.ProbeStallMs, tt.stallMs >= ProbeStall)
			}
			for i, c := range check(p, v, s, all) {
				got := "FAIL"
				switch {
				case c.Invalid:
					got = "INVALID"
				case c.Pass:
					got = "PASS"
				}
				if got != tt.want[i] {
					t.Errorf("check %q: %s (note %q), want %s", c.Name, got, c.Note, tt.want[i])
				}
				if got == "INVALID" && !strings.Contains(c.Note, "probe") {
					t.Errorf("check %q: note %q does not name the probe stall", c.Name, c.Note)
				}
			}
		})
	}
}
