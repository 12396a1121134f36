// Package coredns runs the real CoreDNS (v1.15.0, built by
// build/coredns/build.sh) for a lab on a real control plane: as the
// cluster DNS of the real dataplane (package lab, under a kube-proxy
// API.Dataplane), and beside pinlab's own cluster DNS
// (internal/clusterdns), so that the two can be asked the same questions
// about the same API objects (internal/kubetier).
//
// Start writes the Corefile a kubeadm cluster ships (kubeadm v1.37.2,
// cmd/kubeadm/app/phases/addons/dns/manifests.go) with these changes:
//
//   - no forward: nothing outside the cluster zone is resolved, and no
//     query ever leaves the private network namespace. A name outside the
//     zones (or a PTR for an address the cluster does not know, which the
//     kubernetes plugin lets fall through) gets SERVFAIL, where a kubeadm
//     cluster would ask its node's resolver.
//   - no loop: it detects forwarding loops, and without forward there is
//     none to detect (it would also send a query to itself at start).
//   - no reload: the Corefile never changes while CoreDNS runs.
//   - bind: CoreDNS listens on Config.Addr only, not on every address; its
//     health, ready and prometheus endpoints listen on 127.0.0.1 ports.
//     Behind bind the kubernetes plugin does not learn its own IP
//     (boundIPs in plugin/kubernetes/local.go parses bind's plain IPs as
//     CIDRs), so the zone's NS query gets NODATA; in a kubeadm cluster it
//     names kube-dns, the Service whose endpoint CoreDNS is.
//   - health's lameduck is Config.Lameduck (kubeadm: 5s), zero by default.
//   - the kubernetes plugin reads the API through a kubeconfig holding a
//     token of the ServiceAccount kube-system/coredns, bound to kubeadm's
//     ClusterRole system:coredns (list and watch of endpoints, services,
//     pods, namespaces and endpointslices): CoreDNS runs with the RBAC a
//     kubeadm cluster gives it, not as an administrator.
//
// Everything else is kubeadm's by default: errors; ready; kubernetes ZONE
// in-addr.arpa ip6.arpa { pods insecure; fallthrough in-addr.arpa
// ip6.arpa; ttl 30 }; prometheus; cache 30 { disable success ZONE; disable
// denial ZONE } (answers in the cluster zone are never cached, though
// their TTLs are capped at 30 s; reverse ones are cached); loadbalance.
// Config changes what a lab's DNS settings change: the ttl (TTL), pods
// (Pods), the cache block (Cache, or none with NoCache), loadbalance (left
// out for FixedOrder); Log adds the log plugin.
//
// Config.QueryLog adds the dnstap plugin ("dnstap unix://DIR/dnstap.sock
// full"): Start listens on that socket before CoreDNS starts, and a
// goroutine owned by the Server reads it with golang-dnstap's Frame
// Streams reader, turning each CLIENT_RESPONSE (the reply as written to
// the client) into the clusterdns.QueryEvent pinlab's DNS reports for the
// same answer; Close stops it after CoreDNS has exited.
//
// The caller chooses the address and points clients at it.
package coredns
