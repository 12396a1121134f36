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
// of all CPUs (from /proc/stat; -1 where it cannot be read) and this
// process's share (getrusage over the time of all CPUs): what the report
// puts beside the schedule lag when it says a run was overloaded.
func sampleCPU(ctx context.Context, rec *stats.Recorder) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	busy0, total0, ok0 := machineTicks()
	cpu0, at0 := processCPU(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			busy, total, ok := machineTicks()
			machine := -1.0
			if ok && ok0 && total > total0 {
				machine = float64(busy-busy0) / float64(total-total0)
			}
			cpu := processCPU()
			process := (cpu - cpu0).Seconds() / (now.Sub(at0).Seconds() * float64(runtime.NumCPU()))
			rec.CPU(now, machine, process)
			busy0, total0, ok0, cpu0, at0 = busy, total, ok, cpu, now
		}
	}
}

// machineTicks reads the busy and total CPU ticks of all CPUs from the
// first line of /proc/stat (busy: all but idle and iowait).
func machineTicks() (busy, total uint64, ok bool) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	fields := strings.Fields(line)
	if err != nil || len(fields) < 6 || fields[0] != "cpu" {
		return 0, 0, false
	}
	for i, s := range fields[1:] {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total, true
}
