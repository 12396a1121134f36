// Package proxy emulates kube-proxy's dataplane for ClusterIP Services inside
// the lab: every TCP port of a Service whose ClusterIP is in 127.0.0.0/8 gets
// a listener on ClusterIP:port, and each accepted connection is relayed to
// one endpoint chosen when it opens (conntrack NEW), dialled from the
// client's own IP (DNAT without SNAT). Endpoint changes never touch
// established connections. While a Service port has no eligible endpoint its
// listener is closed, so connects are refused as REJECT makes them.
//
// Semantics follow kubernetes/kubernetes pkg/proxy: topology.go
// (CategorizeEndpoints: ready endpoints, else serving and terminating ones),
// endpointslicecache.go (all slices of a Service merged, ports matched by
// name), iptables/proxier.go, nftables/proxier.go and ipvs/proxier.go (REJECT
// without endpoints, TCP conntrack entries kept).
//
// # Sync pacing
//
// Rules are written as kube-proxy's BoundedFrequencyRunner writes them
// (pkg/proxy/runner/bounded_frequency_runner.go): a change is applied at
// once unless a sync ended less than Config.MinSyncPeriod ago (default 1 s
// in iptables and nftables modes, no wait in ipvs mode); then it waits for
// the end of that cooldown, together with every other change made
// meanwhile. During a rollout a removed endpoint can thus keep receiving new
// connections for up to MinSyncPeriod, which are refused once its pod has
// exited.
//
// # Modes
//
// Config.Mode picks how a new connection's endpoint is chosen, for every
// Service (kube-proxy has one mode per node):
//
//   - "iptables" (the default) and "nftables": uniformly at random among the
//     eligible endpoints, as the iptables `statistic --mode random
//     --probability 1/(n-i)` rules and the nftables `numgen random mod n vmap`
//     rule do. The two modes behave the same in the lab except for the
//     ClientIP affinity cap below.
//   - "ipvs": IPVS with kube-proxy's default scheduler rr, round robin per
//     Service port (IPVS virtual service). The rotation order and how it
//     follows endpoint changes are the kernel's: see Config.Mode and
//     roundrobin.go.
//
// # Session affinity
//
// A Service with spec.sessionAffinity ClientIP keeps each client IP on one
// endpoint per Service port while that endpoint stays eligible and the
// client's affinity entry lives. How long is set by
// spec.sessionAffinityConfig.clientIP.timeoutSeconds (default 10800), read
// from the watched Service like the rest of its spec (Rule.Affinity). Affinity is checked before the mode's pick, and a miss (no entry,
// expired, or endpoint no longer eligible) falls through to that pick, which
// becomes the client's new entry. How long an entry lives follows each mode:
//
//   - iptables (xt_recent `--rcheck --seconds T --reap`, `--set` on every new
//     connection) and nftables (a per-endpoint set with timeout T, `update` on
//     every new connection): an entry lives T after the client's last new
//     connection through the VIP, however long connections stay open. It is
//     forgotten when its endpoint leaves the eligible set, since kube-proxy
//     deletes that endpoint's rules and their list or set. An xt_recent list
//     holds 100 clients (ip_list_tot); the 101st evicts the least recent.
//   - ipvs (persistent virtual service, timeout T): a persistence template
//     lives T after the last new connection, and beyond that while a
//     connection it placed is still open; when its timer fires with
//     connections open it is re-armed for 60 s, and its timeout becomes 60 s.
//     A template whose endpoint is not eligible is ignored and replaced; if
//     the endpoint returns while the template lives, it applies again. The
//     lab counts a connection until its relay ends; IPVS keeps its entry for
//     its TCP state timeout afterwards (TIME_WAIT: 120 s), so real templates
//     can outlive the lab's by that long.
//
// Refreshing on each new connection matches what the kernel sees: only the
// first packet of a connection traverses the nat rules or the IPVS
// scheduler. Turning affinity off forgets all entries.
package proxy
