// Package load drives the lab's traffic: each Client is a real grpc-go
// channel (grpc.NewClient) with a target and load-balancing policy, calling
// pricing.v1.Pricing/GetPrice open-loop at a fixed rate, so a slow pod never
// slows the offered load (no coordinated omission). Every call's result,
// including which pod answered and why a call failed, goes to an Observer.
//
// Clients can model different real runtimes: how they resolve names
// (grpc-go's resolver, a JVM-like cached resolver, or a static list
// resolved at start-up), client-side health checking, wait-for-ready and a
// retry policy; Reconfigure changes these on a running client.
//
// # HTTP/1.1 and WebSocket
//
// HTTPClient (a net/http.Transport keep-alive pool) and WSClient (one
// WebSocket connection) load the pods' HTTP/1.1 and WebSocket server
// (internal/pod's WebServer; the wire contract is package webapi) on the
// same open-loop schedule, and report to the same Observer, so per-pod
// rates are counted the same way for every protocol.
//
// The point, as in the gRPC case: a ClusterIP Service balances connections,
// not requests. An HTTP/1.1 client spreads its requests over the several
// connections of its keep-alive pool (net/http keeps up to
// MaxIdleConnsPerHost idle ones, 2 by default, and opens more under
// concurrency), so it reaches several pods and skews more mildly than a gRPC
// channel; a WebSocket is one long-lived connection and pins to one pod like
// gRPC does.
//
// # Name resolution of HTTPClient and WSClient
//
// Their URL host is an IP (a pod IP or a ClusterIP VIP) or a DNS
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
package load
