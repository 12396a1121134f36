package pod

import (
	"net/netip"

	"github.com/pinlab/pinlab/internal/grpcconn"
	"google.golang.org/grpc/codes"
)

// statsHandler reports the server's connections and finished calls to obs,
// keyed by the remote peer; nil obs reports nothing.
func statsHandler(obs Observer) *grpcconn.Handler {
	if obs == nil {
		return &grpcconn.Handler{}
	}
	return &grpcconn.Handler{
		Opened: func(c grpcconn.Conn) { obs.Conn(c.Remote, true) },
		Closed: func(c grpcconn.Conn) { obs.Conn(c.Remote, false) },
		Finished: func(c grpcconn.Conn, method string, code codes.Code) {
			obs.Served(c.Remote, method, code)
		},
	}
}

// nopObserver discards what a server reports.
type nopObserver struct{}

func (nopObserver) Served(netip.AddrPort, string, codes.Code) {}
func (nopObserver) Conn(netip.AddrPort, bool)                 {}
