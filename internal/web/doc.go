// Package web is the lab's HTTP/1.1 and WebSocket workload, beside the gRPC
// one in internal/pod and internal/load: a pod server (Server) answering
// price requests over HTTP/1.1 and price messages over a WebSocket, and two
// open-loop load clients, HTTPClient (a net/http.Transport keep-alive pool)
// and WSClient (one WebSocket connection). Every reply names the pod that
// served it, and results go to the same observers as the gRPC workload
// (pod.Observer on the server side, load.Observer on the client side), so
// per-pod rates are reported the same way.
//
// The point, as in the gRPC case: a ClusterIP Service balances connections,
// not requests. An HTTP/1.1 client spreads its requests over the several
// connections of its keep-alive pool (net/http keeps up to
// MaxIdleConnsPerHost idle ones, 2 by default, and opens more under
// concurrency), so it reaches several pods and skews more mildly than a gRPC
// channel; a WebSocket is one long-lived connection and pins to one pod like
// gRPC does.
//
// # Wire shapes
//
//   - GET /v1/price?sku=X: 200 with a Quote in JSON; 400 without sku.
//   - GET /healthz: 200 "ok"; 503 once Stop has begun.
//   - GET /v1/watch: upgrades to a WebSocket (RFC 6455). Each client text
//     message is a WatchRequest in JSON ({"id":7,"sku":"a"}; text that is
//     not a JSON object is taken as the SKU with id 0) and gets one Quote
//     in reply, carrying the request's id. Binary messages close the
//     connection with 1003 (unsupported data).
//
// Errors are JSON too ({"error": "...", "pod": "...", "podIp": "..."}).
// HTTP statuses become gRPC codes with CodeOf, on both sides.
//
// # WebSocket library
//
// github.com/coder/websocket (formerly nhooyr.io/websocket), chosen over
// github.com/gorilla/websocket because its API takes a context on every
// blocking call (Dial, Read, Write), which fits Run(ctx) and the lab's
// bounded waits without per-call deadlines; Write is safe for concurrent
// use (gorilla allows one writer at a time); Close performs the RFC 6455
// close handshake with its own bounded waits (5 s to write, 5 s for the
// peer's reply); it dials through a caller's *http.Client, so the clients'
// http.Transport with the lab's source-IP dialer and resolver serves the
// handshake too; and it has no dependencies. Both are maintained.
//
// # Name resolution
//
// The clients' URL host is an IP (a pod IP or a ClusterIP VIP) or a DNS
// name. Names are resolved by Go's own resolver (net.Resolver with PreferGo)
// sending every query to HTTPConfig.DNS or WSConfig.DNS, from the client's
// source IP. Go's resolver keeps no cache, and net/http calls the dialer for
// every new connection, so every new connection resolves again; requests on
// an existing keep-alive connection do not. (Concurrent lookups of one name
// share a single query: net.Resolver coalesces them.) The resolver still
// reads /etc/hosts and the search and ndots options of /etc/resolv.conf, so
// give fully qualified names ending in a dot to skip the search list. Of
// several A records, the first that accepts a connection is used, in the
// order the DNS server gave them (Go's RFC 6724 sort keeps the order of
// 127.0.0.0/8 addresses), as net.Dialer does.
package web
