// Package webapi is the wire contract of the lab's HTTP/1.1 and WebSocket
// workload, the counterpart of the generated api/pricing/v1 for the gRPC
// one: paths and routes, the JSON shapes of requests and replies, and how
// an HTTP status counts as a gRPC code. The pod server (internal/pod's
// WebServer) and the load clients (internal/load's HTTPClient and
// WSClient) both import it and not each other. It is hand-written, not
// generated, and pure: no I/O.
//
// # Wire shapes
//
//   - GET /v1/price?sku=X: 200 with a Quote in JSON; 400 without sku.
//   - GET /healthz: 200 "ok"; 503 once the pod is stopping.
//   - GET /v1/watch: upgrades to a WebSocket (RFC 6455). Each client text
//     message is a WatchRequest in JSON ({"id":7,"sku":"a"}; text that is
//     not a JSON object is taken as the SKU with id 0) and gets one Quote
//     in reply, carrying the request's id. Binary messages close the
//     connection with 1003 (unsupported data).
//
// Errors are JSON too, an ErrorReply ({"error": "...", "pod": "...",
// "podIp": "..."}). HTTP statuses become gRPC codes with CodeOf, on both
// sides.
//
// # WebSocket library
//
// Both sides speak WebSocket with github.com/coder/websocket (formerly
// nhooyr.io/websocket), chosen over github.com/gorilla/websocket because
// its API takes a context on every blocking call (Dial, Read, Write), which
// fits Run(ctx) and the lab's bounded waits without per-call deadlines;
// Write is safe for concurrent use (gorilla allows one writer at a time);
// Close performs the RFC 6455 close handshake with its own bounded waits
// (5 s to write, 5 s for the peer's reply); it dials through a caller's
// *http.Client, so the clients' http.Transport with the lab's source-IP
// dialer and resolver serves the handshake too; and it has no
// dependencies. Both are maintained.
package webapi

// Paths the pod server serves.
const (
	PathPrice  = "/v1/price"
	PathHealth = "/healthz"
	PathWatch  = "/v1/watch"
)

// Routes as the pod server reports them to pod.Observer.Served: the
// ServeMux pattern of each HTTP request, RouteWatchMessage for each
// WebSocket message, and RouteUnmatched for requests no pattern matched
// (404, 405).
const (
	RoutePrice        = "GET " + PathPrice
	RouteHealth       = "GET " + PathHealth
	RouteWatch        = "GET " + PathWatch
	RouteWatchMessage = "WS " + PathWatch
	RouteUnmatched    = "unmatched"
)

// Quote is the JSON reply of GET /v1/price and of each WebSocket message.
type Quote struct {
	// ID echoes WatchRequest.ID on the WebSocket; absent over plain HTTP.
	ID int64 `json:"id,omitempty"`
	// Pod, PodIP and Namespace name the pod that answered.
	Pod       string `json:"pod"`
	PodIP     string `json:"podIp"`
	Namespace string `json:"namespace,omitempty"`
	SKU       string `json:"sku"`
	// PriceCents is a stable function of SKU, the same on every pod and
	// the same as the gRPC GetPrice's.
	PriceCents int64 `json:"priceCents"`
}

// WatchRequest is one client message on /v1/watch.
type WatchRequest struct {
	// ID is the client's number for the message, echoed in the reply.
	ID  int64  `json:"id"`
	SKU string `json:"sku"`
}

// ErrorReply is the JSON body of every error status, and the reply to a
// WebSocket message that cannot be priced.
type ErrorReply struct {
	// ID echoes WatchRequest.ID on the WebSocket; absent over plain HTTP.
	ID int64 `json:"id,omitempty"`
	// Error says what went wrong; never empty.
	Error string `json:"error"`
	// Pod and PodIP name the pod that answered.
	Pod   string `json:"pod"`
	PodIP string `json:"podIp"`
}
