// Package grpcconn turns grpc-go's stats.Handler events
// (google.golang.org/grpc/stats) into the lab's connection events: a
// connection opening, closing, and each call finishing on it, keyed by the
// connection's addresses. The pods' servers (internal/pod) and the load
// clients (internal/load) report through it.
package grpcconn

import (
	"context"
	"net/netip"

	"github.com/pinlab/pinlab/internal/loopback"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// Conn is one connection as grpc-go tags it (stats.ConnTagInfo).
type Conn struct {
	// Local and Remote are the connection's addresses; zero when not TCP.
	Local, Remote netip.AddrPort
}

// Handler is a grpc-go stats.Handler (grpc.StatsHandler on a server,
// grpc.WithStatsHandler on a client) that calls its hooks; a nil hook
// ignores its event, and the zero Handler does nothing.
//
// grpc-go calls a Handler from many goroutines at once: each connection's
// transport, each call's goroutine, and whichever goroutine closes a
// connection. Hooks must therefore be safe for concurrent use, and quick,
// since they run on grpc-go's connection and call paths. For one
// connection, Opened returns before Closed is called: a server reports
// both from the connection's serving goroutine, a client reports ConnBegin
// before it starts the goroutines that can close the transport. A server
// does not wait for call handlers before reporting ConnEnd, so a call's
// Finished may follow its connection's Closed.
type Handler struct {
	// Opened is called when a connection is established (stats.ConnBegin).
	Opened func(Conn)
	// Closed is called when it has closed (stats.ConnEnd).
	Closed func(Conn)
	// Finished is called when a call ends (stats.End) with its full method
	// name ("/pricing.v1.Pricing/GetPrice") and status code. On a server c
	// is the call's connection; on a client grpc-go does not link calls to
	// connections and c is zero.
	Finished func(c Conn, method string, code codes.Code)
}

type connKey struct{}
type methodKey struct{}

// TagConn implements stats.Handler.
func (h *Handler) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	c := Conn{Local: loopback.AddrPort(info.LocalAddr), Remote: loopback.AddrPort(info.RemoteAddr)}
	return context.WithValue(ctx, connKey{}, c)
}

// HandleConn implements stats.Handler.
func (h *Handler) HandleConn(ctx context.Context, s stats.ConnStats) {
	c, _ := ctx.Value(connKey{}).(Conn)
	switch s.(type) {
	case *stats.ConnBegin:
		if h.Opened != nil {
			h.Opened(c)
		}
	case *stats.ConnEnd:
		if h.Closed != nil {
			h.Closed(c)
		}
	}
}

// TagRPC implements stats.Handler; it adds nothing when Finished is nil.
func (h *Handler) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	if h.Finished == nil {
		return ctx
	}
	return context.WithValue(ctx, methodKey{}, info.FullMethodName)
}

// HandleRPC implements stats.Handler.
func (h *Handler) HandleRPC(ctx context.Context, s stats.RPCStats) {
	end, ok := s.(*stats.End)
	if !ok || h.Finished == nil {
		return
	}
	c, _ := ctx.Value(connKey{}).(Conn)
	method, _ := ctx.Value(methodKey{}).(string)
	h.Finished(c, method, status.Code(end.Error))
}
