// Package cachedns is a gRPC name resolver for dns:// targets that resolves
// through a per-channel address cache, as a JVM gRPC client does: grpc-java
// resolves with InetAddress, whose cache keeps answers for
// networkaddress.cache.ttl whatever the DNS record's TTL says.
//
// The resolver's schedule follows grpc-go's own DNS resolver
// (internal/resolver/dns/dns_resolver.go, v1.85): it resolves once when
// built and again only when the channel calls ResolveNow (on a connection
// loss or a failed connection attempt), at most once per
// MinResolutionInterval: a ResolveNow that comes earlier is held until the
// interval has passed since the last successful resolution. One request at
// most is remembered: requests made while one is pending fold into it, so a
// burst during the wait leads to one resolution when the wait ends and at
// most one more an interval later. Nothing re-resolves on a timer. A failed
// lookup, or an update the channel rejects (an empty address list), is
// retried with grpc-go's default exponential backoff (1 s base, factor
// 1.6, jitter 0.2, 120 s cap), starting at 1.6 s.
//
// Underneath, each Builder keeps its own cache: a lookup within CacheTTL of
// the last successful one returns the cached, possibly stale, addresses
// without asking DNS. Queries are A queries only (no AAAA, SRV or TXT), sent
// over UDP with EDNS0 (and again over TCP when the answer is truncated) to
// the target's authority, which must be a loopback IP:port, from a
// configurable loopback source address.
package cachedns
