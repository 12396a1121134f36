// Package web holds the lab's HTTP/1.1 and WebSocket load clients, beside
// the gRPC one in internal/load: HTTPClient (a net/http.Transport
// keep-alive pool) and WSClient (one WebSocket connection), both open-loop.
// Their pod server is internal/pod's WebServer. Every reply names the pod
// that served it, and results go to load.Observer as the gRPC client's do,
// so per-pod rates are reported the same way.
//
// The point, as in the gRPC case: a ClusterIP Service balances connections,
// not requests. An HTTP/1.1 client spreads its requests over the several
// connections of its keep-alive pool (net/http keeps up to
// MaxIdleConnsPerHost idle ones, 2 by default, and opens more under
// concurrency), so it reaches several pods and skews more mildly than a gRPC
// channel; a WebSocket is one long-lived connection and pins to one pod like
// gRPC does.
//
// The wire shapes, the status-to-code mapping and the choice of WebSocket
// library are in internal/webapi, which both sides share.
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
