package load

import (
	"context"
	"net/netip"

	"github.com/pinlab/pinlab/internal/loopback"

	"google.golang.org/grpc/stats"
)

// connObserver is a client-side grpc stats.Handler reporting connections.
type connObserver struct{ obs Observer }

type remoteKey struct{}

func (h *connObserver) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	return context.WithValue(ctx, remoteKey{}, loopback.AddrPort(info.RemoteAddr))
}

func (h *connObserver) HandleConn(ctx context.Context, s stats.ConnStats) {
	remote, _ := ctx.Value(remoteKey{}).(netip.AddrPort)
	switch s.(type) {
	case *stats.ConnBegin:
		h.obs.Conn(remote, true)
	case *stats.ConnEnd:
		h.obs.Conn(remote, false)
	}
}

func (h *connObserver) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (h *connObserver) HandleRPC(context.Context, stats.RPCStats)                       {}
