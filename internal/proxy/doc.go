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
// # Modes
//
// Config.Mode picks how a new connection's endpoint is chosen, for every
// Service (kube-proxy has one mode per node):
//
//   - "iptables" (the default) and "nftables": uniformly at random among the
//     eligible endpoints, as the iptables `statistic --mode random
//     --probability 1/(n-i)` rules and the nftables `numgen random mod n vmap`
//     rule do. The two modes behave the same in the lab.
//   - "ipvs": IPVS with kube-proxy's default scheduler rr, round robin per
//     Service port (IPVS virtual service). The rotation order and how it
//     follows endpoint changes are the kernel's: see Config.Mode and
//     roundrobin.go.

package proxy
