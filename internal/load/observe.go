package load

import "github.com/pinlab/pinlab/internal/grpcconn"

// statsHandler reports the channel's connections to obs, keyed by the
// remote address.
func statsHandler(obs Observer) *grpcconn.Handler {
	return &grpcconn.Handler{
		Opened: func(c grpcconn.Conn) { obs.Conn(c.Remote, true) },
		Closed: func(c grpcconn.Conn) { obs.Conn(c.Remote, false) },
	}
}
