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

// reconnect is a client connection opened after start-up, why, and when
// what caused it happened (the open's own time for a new address).
type reconnect struct {
	at, since float64
	cause     string
}

// reconnects returns the connections the clients opened after start-up,
// in time order, each with the cause observed: the latest earlier event on
// the same client that ended a connection (a GOAWAY, at the time it
// arrived when known; a close; a client restart) and was not already
// matched to a reconnect. Closes the client made itself are not causes: a
// client closes connections it no longer wants (after a restart, when an
// address leaves its list). An open with no such event went to a new
// address.
func reconnects(clients []stats.ClientStats, end stats.Offset) []reconnect {
	var out []reconnect
	for _, c := range clients {
		out = append(out, clientReconnects(c, end)...)
	}
	slices.SortStableFunc(out, func(a, b reconnect) int {
		switch {
		case a.at < b.at:
			return -1
		case a.at > b.at:
			return 1
		}
		return 0
	})
	return out
}

type ending struct {
	at    float64
	cause string
	used  bool
}

func clientReconnects(c stats.ClientStats, end stats.Offset) []reconnect {
	var ends []ending
	for _, cn := range c.Conns {
		if cn.Closed == nil || cn.Reason == "client" {
			continue
		}
		at := cn.Closed.Seconds()
		if cn.GoAway != nil {
			at = cn.GoAway.Seconds()
		}
		if at < end.Seconds() {
			ends = append(ends, ending{at: at, cause: cn.Reason})
		}
	}
	for _, r := range c.Restarts {
		ends = append(ends, ending{at: r, cause: causeRestart})
	}
	var out []reconnect
	for _, cn := range c.Conns {
		at := cn.Opened.Seconds()
		if at <= startup.Seconds() {
			continue
		}
		best := -1
		for i, e := range ends {
			if !e.used && e.at <= at+0.05 && at-e.at <= reconnectLag && (best < 0 || e.at > ends[best].at) {
				best = i
			}
		}
		r := reconnect{at: at, since: at, cause: causeNewAddress}
		if best >= 0 {
			ends[best].used = true
			r.cause, r.since = ends[best].cause, ends[best].at
		}
		out = append(out, r)
	}
	return out
}
