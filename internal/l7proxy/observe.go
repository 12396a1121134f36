package l7proxy

import (
	"net/netip"
	"time"

	"google.golang.org/grpc/codes"
)

// Observer receives what a Proxy routes, for per-pod reports. Methods are
// called concurrently from request and connection goroutines; they must be
// safe for concurrent use and quick, since they run on the request path.
type Observer interface {
	// Call reports one finished downstream request.
	Call(Call)
	// Conn reports a connection opening (open true) or closing: from a
	// client to the proxy, or from the proxy to a pod.
	Conn(c Conn, open bool)
}

// Call is one downstream request as the proxy finished it.
type Call struct {
	// Method is the request path, e.g. "/pricing.v1.Pricing/GetPrice".
	Method string
	// Endpoint is the pod address of the last attempt and Pod its name from
	// the EndpointSlice targetRef; zero and "" when no endpoint was eligible.
	Endpoint netip.AddrPort
	Pod      string
	// Attempts counts the endpoints tried: 1 normally, more when a request
	// was refused before being sent and went elsewhere, 0 when none was
	// eligible.
	Attempts int
	// Duration runs from the request headers' arrival to the end of the
	// response stream (or to the client's reset).
	Duration time.Duration
	// Code is the gRPC status the client got: the pod's grpc-status, or the
	// proxy's own (Unavailable, Canceled) when it answered itself.
	Code codes.Code
}

// Conn is one TCP connection of the proxy.
type Conn struct {
	// Local and Remote are the connection's addresses as the proxy sees
	// them: for a client connection Remote is the client; for an upstream
	// one Local is Config.Source (or the kernel's choice) and Remote the pod.
	Local, Remote netip.AddrPort
	// Upstream is true for proxy-to-pod connections, which also name the
	// pod.
	Upstream bool
	Pod      string
}
