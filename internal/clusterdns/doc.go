// Package clusterdns is the lab's cluster DNS: an authoritative server for
// the cluster zone (cluster.local. by default) built on github.com/miekg/dns
// that answers as CoreDNS's kubernetes plugin does with its defaults
// ("pods disabled", TTL 5s) plus the loadbalance plugin's shuffling.
//
// All data comes from Kubernetes API objects read through client-go
// informers: core/v1 Services and Namespaces and discovery.k8s.io/v1
// EndpointSlices. It therefore runs unchanged against a real API server, the
// lab's embedded one, or a fake clientset in tests.
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
//   - dns-version.<zone> TXT, and SOA and NS at the apex.
//
// Names outside the zone, reverse (PTR) zones included, are REFUSED: the
// server is authoritative only for the cluster zone and has no upstream to
// forward to. Reverse zones are left for later.
package clusterdns
