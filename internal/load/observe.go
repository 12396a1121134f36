package load

import "github.com/pinlab/pinlab/internal/grpcconn"

// statsHandler reports the channel's connections to obs, keyed by the
// remote address, with each close's reason from conns.
func statsHandler(obs Observer, conns *connTable) *grpcconn.Handler {
	return &grpcconn.Handler{
		Opened: func(c grpcconn.Conn) {
			conns.opened(c)
			obs.Conn(ConnEvent{Remote: c.Remote, Open: true})
		},
		Closed: func(c grpcconn.Conn) {
			reason, goAway := conns.closed(c)
			obs.Conn(ConnEvent{Remote: c.Remote, Reason: reason, GoAwayAt: goAway})
		},
	}
}
