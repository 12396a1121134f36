package runner

import (
	"bufio"
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/pinlab/pinlab/internal/stats"
)

// sampleCPU records, every second until ctx ends, the machine's busy share
// of all CPUs and the hypervisor's steal (from /proc/stat; -1 and 0 where
// it cannot be read) and this process's share (getrusage over the time of
// all CPUs): what the report puts beside the schedule lag when it says a
// run was overloaded, and whose the overload was.
func sampleCPU(ctx context.Context, rec *stats.Recorder) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	t0, ok0 := machineTicks()
	cpu0, at0 := processCPU(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			t1, ok := machineTicks()
			machine, steal := -1.0, 0.0
			if ok && ok0 {
				machine, steal = shares(t0, t1)
			}
			cpu := processCPU()
			process := (cpu - cpu0).Seconds() / (now.Sub(at0).Seconds() * float64(runtime.NumCPU()))
			rec.CPU(now, machine, process, steal)
			t0, ok0, cpu0, at0 = t1, ok, cpu, now
		}
	}
}

// ticks are CPU time counters of all CPUs, in clock ticks.
type ticks struct{ busy, steal, total uint64 }

// machineTicks reads the CPU ticks of all CPUs from the first line of
// /proc/stat (proc(5)): user, nice, system, idle, iowait, irq, softirq,
// steal, then guest and guest_nice, which user and nice already count.
// Busy is all but idle and iowait, steal included.
func machineTicks() (ticks, bool) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return ticks{}, false
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	return parseTicks(line, err)
}

// shares returns the machine's busy share and the steal share of all CPUs
// between two readings: -1 and 0 (unknown) when no time passed or a
// counter went back (a VM's steal counter can jump back after it moved
// between hosts).
func shares(t0, t1 ticks) (machine, steal float64) {
	if t1.total <= t0.total || t1.busy < t0.busy || t1.steal < t0.steal {
		return -1, 0
	}
	all := float64(t1.total - t0.total)
	return min(float64(t1.busy-t0.busy)/all, 1), min(float64(t1.steal-t0.steal)/all, 1)
}

// parseTicks parses the first line of /proc/stat; err is its read error.
func parseTicks(line string, err error) (ticks, bool) {
	fields := strings.Fields(line)
	if err != nil || len(fields) < 6 || fields[0] != "cpu" {
		return ticks{}, false
	}
	var t ticks
	for i, s := range fields[1:min(len(fields), 9)] {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return ticks{}, false
		}
		t.total += n
		if i != 3 && i != 4 { // idle, iowait
			t.busy += n
		}
		if i == 7 {
			t.steal = n
		}
	}
	return t, true
}
