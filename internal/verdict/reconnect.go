package verdict

import (
	"slices"

	"github.com/pinlab/pinlab/internal/stats"
)

// Causes of a reconnect, as observed. Others are close reasons as the
// client saw them ("eof", "reset", "goaway <debug data>").
const (
	causeMaxAge       = "goaway max_age"
	causeGracefulStop = "goaway graceful_stop"
	causeRestart      = "restart"
	causeNewAddress   = "new address"
)

// reconnectLag bounds how long after a connection ended a new one still
// counts as its replacement: grpc-go's reconnect backoff starts at 1 s and
// a blackholed dial takes its connect timeout.
const reconnectLag = 30.0 // seconds

// reconnect is a client connection opened after the client's start-up,
// why, and when what caused it happened (the open's own time for a new
// address).
type reconnect struct {
	at, since float64
	cause     string
}

// ending is an event that ended a client's connection (or, for a restart,
// all of them): a GOAWAY (at the time it arrived when known), a close, or a
// client restart.
type ending struct {
	at    float64
	cause string
	used  bool
}

// connFacts are the clients' connections read for causes.
type connFacts struct {
	// reconnects are the connections opened after each client's start-up,
	// in time order.
	reconnects []reconnect
	// late holds, for each client whose first connection came more than
	// startup after the start of load, when it came.
	late []float64
	// unreplaced are the endings (not restarts, not the clients' own
	// closes) that no later connection replaced.
	unreplaced []ending
}

// readConns reads the clients' connections: each client's start-up set
// (its first connection and those opened within startup of it before any
// ending) is not a reconnect; every later open is, with the cause
// observed: a restart of the client within startup before it (a restart's
// new channel connects to every address), else the latest earlier unused
// ending on the same client within reconnectLag, else a new address.
// Closes the client made itself are not causes: a client closes the
// connections it no longer wants (after a restart, when an address leaves
// its list).
func readConns(clients []stats.ClientStats, end stats.Offset) connFacts {
	var f connFacts
	for _, c := range clients {
		f.add(c, end.Seconds())
	}
	slices.SortStableFunc(f.reconnects, func(a, b reconnect) int { return cmpFloat(a.at, b.at) })
	slices.Sort(f.late)
	slices.SortStableFunc(f.unreplaced, func(a, b ending) int { return cmpFloat(a.at, b.at) })
	return f
}

func (f *connFacts) add(c stats.ClientStats, end float64) {
	ends := endings(c, end)
	first := -1.0
	for i, cn := range c.Conns {
		at := cn.Opened.Seconds()
		if i == 0 {
			first = at
			if at > startup.Seconds() {
				f.late = append(f.late, at)
			}
		}
		if at <= first+startup.Seconds() && !slices.ContainsFunc(ends, func(e ending) bool { return e.at <= at }) {
			continue // the client's start-up set
		}
		f.reconnects = append(f.reconnects, match(ends, c.Restarts, at))
	}
	for _, e := range ends {
		if !e.used {
			f.unreplaced = append(f.unreplaced, e)
		}
	}
}

// endings returns the events that ended c's connections before end.
func endings(c stats.ClientStats, end float64) []ending {
	var out []ending
	for _, cn := range c.Conns {
		if cn.Closed == nil || cn.Reason == "client" {
			continue
		}
		at := cn.Closed.Seconds()
		if cn.GoAway != nil {
			at = cn.GoAway.Seconds()
		}
		if at < end {
			out = append(out, ending{at: at, cause: cn.Reason})
		}
	}
	return out
}

// match finds the cause of a connection opened at at.
func match(ends []ending, restarts []float64, at float64) reconnect {
	for _, r := range restarts {
		if r <= at+0.05 && at-r <= startup.Seconds() {
			return reconnect{at: at, since: r, cause: causeRestart}
		}
	}
	best := -1
	for i, e := range ends {
		if !e.used && e.at <= at+0.05 && at-e.at <= reconnectLag && (best < 0 || e.at > ends[best].at) {
			best = i
		}
	}
	if best < 0 {
		return reconnect{at: at, since: at, cause: causeNewAddress}
	}
	ends[best].used = true
	return reconnect{at: at, since: ends[best].at, cause: ends[best].cause}
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
