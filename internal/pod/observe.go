package pod

import (
	"context"
	"net/netip"

	"github.com/pinlab/pinlab/internal/loopback"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// connObserver is a grpc stats.Handler that forwards connection and call
// events to an Observer, keyed by the remote peer.
type connObserver struct {
	obs Observer
}

type peerKey struct{}
type methodKey struct{}

func (h *connObserver) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	return context.WithValue(ctx, peerKey{}, loopback.AddrPort(info.RemoteAddr))
}

func (h *connObserver) HandleConn(ctx context.Context, s stats.ConnStats) {
	if h.obs == nil {
		return
	}
	peer, _ := ctx.Value(peerKey{}).(netip.AddrPort)
	switch s.(type) {
	case *stats.ConnBegin:
		h.obs.Conn(peer, true)
	case *stats.ConnEnd:
		h.obs.Conn(peer, false)
	}
}

func (h *connObserver) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	return context.WithValue(ctx, methodKey{}, info.FullMethodName)
}

func (h *connObserver) HandleRPC(ctx context.Context, s stats.RPCStats) {
	end, ok := s.(*stats.End)
	if !ok || h.obs == nil {
		return
	}
	peer, _ := ctx.Value(peerKey{}).(netip.AddrPort)
	method, _ := ctx.Value(methodKey{}).(string)
	h.obs.Served(peer, method, status.Code(end.Error))
}

// nopObserver discards what a server reports.
type nopObserver struct{}

func (nopObserver) Served(netip.AddrPort, string, codes.Code) {}
func (nopObserver) Conn(netip.AddrPort, bool)                 {}
