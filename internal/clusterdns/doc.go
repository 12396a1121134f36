// Package clusterdns is the lab's cluster DNS: an authoritative server for
// the cluster zone (cluster.local. by default) and, unless turned off, the
// reverse zones in-addr.arpa. and ip6.arpa., built on github.com/miekg/dns.
// It answers as CoreDNS's kubernetes plugin does with the settings of
// kubeadm's Corefile ("kubernetes cluster.local in-addr.arpa ip6.arpa",
// the loadbalance shuffle) and the plugin's defaults ("pods disabled",
// TTL 5s), each of which Config can change.
//
// All data comes from Kubernetes API objects read through client-go
// informers: core/v1 Services and Namespaces, discovery.k8s.io/v1
// EndpointSlices, and core/v1 Pods in "pods verified" mode. It therefore
// runs unchanged against a real API server, the lab's embedded one, or a
// fake clientset in tests.
//
// What is served (Kubernetes DNS specification 1.1.0 and CoreDNS):
//
//   - <svc>.<ns>.svc.<zone> A/AAAA: the ClusterIPs, or for a headless
//     Service one record per ready endpoint address (none ready: NXDOMAIN).
//   - <label>.<svc>.<ns>.svc.<zone> A/AAAA: an endpoint by hostname or
//     dashed IP, for headless and ClusterIP Services.
//   - _<port>._<proto>.<svc>.<ns>.svc.<zone> SRV, and SRV on the bare
//     Service name for all its ports, with address glue.
//   - ExternalName Services as CNAME, chased inside the zone.
//   - <ip>.<ns>.pod.<zone> A/AAAA in the "insecure" and "verified" pod
//     modes.
//   - PTR records under in-addr.arpa. and ip6.arpa. for ClusterIPs and
//     ready endpoints.
//   - dns-version.<zone> TXT, and SOA and NS at each zone's apex.
//
// Names outside those zones are REFUSED: there is no upstream to forward
// to.
//
// Config.Cache adds CoreDNS's cache plugin in front (kubeadm's "cache
// 30"): replies then outlive the API objects they were built from until
// their TTL, counting down, runs out, except in the zones it disables
// (kubeadm v1.32 and later disable the cluster zone; see KubeadmCache).
//
// Answers are built from the informer caches once and memoized per name
// and type (an implementation detail for speed, never stale). Index functions on the informers count every change as the store
// takes it, per Service, so a kept answer is dropped before any reader can
// see the object it depends on change; a query then costs a map lookup, a
// shuffle of prebuilt records and the packing.
package clusterdns
