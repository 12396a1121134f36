package runner

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/pinlab/pinlab/internal/plan"
)

// File descriptors a lab uses, by what opens them. Pods, clients and the
// lab's components share one process, so a connection between a client
// and a pod costs both of its ends; through a ClusterIP VIP the lab's
// kube-proxy holds two more (its accepted and its dialled socket).
const (
	fdsPerDirectConn = 2
	fdsPerVIPConn    = 4
)

// ErrTooManyFiles is returned by Run when a run would need more file
// descriptors than the process may open.
var ErrTooManyFiles = errors.New("more file descriptors than the process may open")

// fdNeed estimates the file descriptors a variant holds at its peak and
// says what most of them are for.
func fdNeed(v plan.Variant) (int, string) {
	need := plan.FDsPerLab + plan.FDsPerPod*v.PeakPods
	biggest, what := 0, ""
	for _, g := range v.Groups {
		conns, per := connsPerClient(g)
		n := g.Clients * conns * per
		if g.Settings.L7Proxy != nil { // the proxies' connections to the pods
			n += g.Clients*fdsPerDirectConn + max(g.Target.PeakPods, 1)*fdsPerDirectConn*proxies(g)
		}
		need += n
		if n > biggest {
			biggest = n
			what = fmt.Sprintf("group %s: %d clients x %d connections x %d", g.Name, g.Clients, conns, per)
		}
	}
	return need, what
}

// connsPerClient is how many connections a client of g holds at most, and
// the descriptors each costs.
func connsPerClient(g plan.Group) (conns, per int) {
	s, t := g.Settings, g.Target
	per = fdsPerDirectConn
	if !t.Headless && !t.XDS {
		per = fdsPerVIPConn
	}
	switch {
	case s.L7Proxy != nil:
		return 0, per // counted with the proxies
	case s.Protocol == plan.ProtocolHTTP:
		return max(s.MaxConnsPerHost, s.MaxIdleConnsPerHost+2, 2), per
	case (t.Headless || t.XDS) && g.Policy != "pick_first":
		return max(t.PeakPods, 1), per // a connection to every address
	}
	return 1, per
}

// proxies is how many L7 proxies a group runs: one per client as
// sidecars, Replicas as a gateway.
func proxies(g plan.Group) int {
	if g.Settings.L7Proxy.Placement == "gateway" {
		return g.Settings.L7Proxy.Replicas
	}
	return g.Clients
}

// checkFiles refuses variants that together (side by side, or the
// largest one alone) would need more file descriptors than the process
// may open, after EnsureFiles raised the limit where it may.
func checkFiles(p *plan.Plan, sideBySide bool) error {
	need, why := 0, ""
	for _, v := range p.Variants {
		n, w := fdNeed(v)
		if sideBySide {
			need += n
		} else {
			need = max(need, n)
		}
		if why == "" || n > need/2 {
			why = fmt.Sprintf("variant %s needs about %d (%s)", v.Name, n, w)
		}
	}
	limit, ok := EnsureFiles(uint64(need))
	if ok {
		return nil
	}
	what := "this run"
	if len(p.Variants) > 1 && sideBySide {
		what = "the variants side by side"
	} else if len(p.Variants) > 1 {
		what = "the largest variant"
	}
	fixes := "raise the hard limit (ulimit -Hn, as root) or lower counts and replicas"
	if len(p.Variants) > 1 && sideBySide {
		fixes = "raise the hard limit (ulimit -Hn, as root), run the variants one after another, or lower counts and replicas"
	}
	return fmt.Errorf("runner: %s would hold about %d file descriptors at their peak, more than 90%% of the %d this process may open (ulimit -n); %s. To run it, %s: %w",
		what, need, limit, why, fixes, ErrTooManyFiles)
}

// EnsureFiles makes room for need file descriptors: it returns true when
// need is within 90% of the process's soft limit (Go raises the soft limit
// to the hard one at start), raising both limits first when it may (as
// root or with CAP_SYS_RESOURCE, up to need and a quarter more, but no
// further than the system's fs.nr_open). It returns the soft limit it
// leaves, for messages. Safe for concurrent use; it changes the whole
// process's limit.
func EnsureFiles(need uint64) (limit uint64, ok bool) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, true // cannot tell: let the run find out
	}
	if need <= lim.Cur*9/10 {
		return lim.Cur, true
	}
	want := need * 5 / 4
	if sys := nrOpen(); sys > 0 && want > sys {
		want = sys
	}
	next := syscall.Rlimit{Cur: want, Max: max(lim.Max, want)}
	if want <= lim.Cur || syscall.Setrlimit(syscall.RLIMIT_NOFILE, &next) != nil {
		return lim.Cur, false
	}
	return next.Cur, need <= next.Cur*9/10
}

// nrOpen is the system's ceiling on a process's file limit
// (/proc/sys/fs/nr_open), 0 if unknown.
func nrOpen() uint64 {
	b, err := os.ReadFile("/proc/sys/fs/nr_open")
	if err != nil {
		return 0
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0
	}
	return n
}
