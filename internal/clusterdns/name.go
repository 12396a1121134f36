package clusterdns

import (
	"errors"
	"strings"

	"github.com/miekg/dns"
)

// errNoName means the queried name does not exist: the reply is NXDOMAIN.
var errNoName = errors.New("clusterdns: no such name")

// The label right above the zone that selects a subtree.
const (
	svcLabel = "svc"
	podLabel = "pod"
)

// zoneKind tells the zones the Server is authoritative for apart.
type zoneKind uint8

const (
	clusterZone zoneKind = iota // Config.Zone
	reverseV4                   // in-addr.arpa.
	reverseV6                   // ip6.arpa.
)

// The reverse zones, served unless Config.NoReverseZones is set.
const (
	reverseV4Zone = "in-addr.arpa."
	reverseV6Zone = "ip6.arpa."
)

// zoneSpec is one zone served: its kind, lower-case name and labels.
type zoneSpec struct {
	kind   zoneKind
	name   string
	labels []string
}

// zoneSpecs lists the zones served, the cluster zone first so that it wins
// should it lie inside a reverse zone.
func zoneSpecs(cluster string, reverse bool) []zoneSpec {
	zs := []zoneSpec{{clusterZone, cluster, labels(cluster)}}
	if reverse {
		zs = append(zs,
			zoneSpec{reverseV4, reverseV4Zone, labels(reverseV4Zone)},
			zoneSpec{reverseV6, reverseV6Zone, labels(reverseV6Zone)})
	}
	return zs
}

// query is one question about a name inside a zone served.
type query struct {
	owner  string   // the name as asked (FQDN, original case): owner of answers
	labels []string // lower-case labels above the zone, leftmost first
	zone   string   // the zone as spelled in owner
	kind   zoneKind
	qtype  uint16
}

// locate finds the zone served that holds name (an FQDN). ok is false if
// there is none: the name is outside every zone.
func (s *Server) locate(name string, qtype uint16) (q query, ok bool) {
	for _, z := range s.cfg.zones {
		if q, ok = split(name, z, qtype); ok {
			return q, true
		}
	}
	return query{}, false
}

// inZone is locate restricted to the cluster zone.
func (s *Server) inZone(name string, qtype uint16) (query, bool) {
	return split(name, s.cfg.zones[0], qtype)
}

// split splits name (an FQDN) at zone z. ok is false if name is not at or
// below z. Labels are compared case-insensitively.
func split(name string, z zoneSpec, qtype uint16) (q query, ok bool) {
	idx := dns.Split(name)
	above := len(idx) - len(z.labels)
	if above < 0 {
		return query{}, false
	}
	all := labels(name)
	for i, want := range z.labels {
		if !strings.EqualFold(all[above+i], want) {
			return query{}, false
		}
	}
	q = query{owner: name, zone: ".", kind: z.kind, qtype: qtype, labels: all[:above]}
	if above < len(idx) {
		q.zone = name[idx[above]:]
	}
	for i, l := range q.labels {
		q.labels[i] = strings.ToLower(l)
	}
	return q, true
}

// withType returns q asking for another type.
func (q query) withType(qtype uint16) query {
	q.qtype = qtype
	return q
}

// Special names of CoreDNS's kubernetes plugin, relative to the zone.
func (q query) isApex() bool        { return len(q.labels) == 0 }
func (q query) isNSName() bool      { return isLabels(q.labels, "ns", "dns") }
func (q query) isVersionName() bool { return isLabels(q.labels, "dns-version") }

func isLabels(got []string, want ...string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range want {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

// request is a name parsed by the cluster DNS grammar (CoreDNS parse.go):
//
//	[<endpoint> | _<port>._<proto>] . <service> . <namespace> . (svc|pod) . <zone>
//
// Empty fields were not given: the apex has none, "svc.<zone>" only
// subtree, "<ns>.svc.<zone>" subtree and namespace.
type request struct {
	subtree   string // svcLabel or podLabel
	namespace string
	service   string
	endpoint  string
	port      string // port name with any leading '_' removed
	protocol  string // protocol with any leading '_' removed
}

// parseRequest reads the lower-case labels above the zone. Anything the
// grammar does not allow is errNoName: a subtree other than svc or pod, or
// three or more labels left of the Service.
func parseRequest(ls []string) (request, error) {
	var r request
	next := func() (string, bool) {
		if len(ls) == 0 {
			return "", false
		}
		l := ls[len(ls)-1]
		ls = ls[:len(ls)-1]
		return l, true
	}
	var ok bool
	if r.subtree, ok = next(); !ok {
		return r, nil
	}
	if r.subtree != svcLabel && r.subtree != podLabel {
		return r, errNoName
	}
	if r.namespace, ok = next(); !ok {
		return r, nil
	}
	if r.service, ok = next(); !ok {
		return r, nil
	}
	switch len(ls) {
	case 0:
	case 1:
		r.endpoint = ls[0]
	case 2:
		r.port = strings.TrimPrefix(ls[0], "_")
		r.protocol = strings.TrimPrefix(ls[1], "_")
	default:
		return r, errNoName
	}
	return r, nil
}

// matches reports whether a requested port name or protocol (empty: any)
// matches an object's value, ignoring case.
func matches(requested, value string) bool {
	return requested == "" || strings.EqualFold(requested, value)
}

// join builds the FQDN of labels under zone.
func join(zone string, ls ...string) string {
	name := strings.Join(ls, ".")
	if zone == "." {
		return name + "."
	}
	return name + "." + zone
}

// lowerASCII returns s with its ASCII letters in lower case, s itself if it
// has none. DNS names match case-insensitively in ASCII only (RFC 4343),
// and the result has the length of s.
func lowerASCII(s string) string {
	i := strings.IndexFunc(s, func(r rune) bool { return 'A' <= r && r <= 'Z' })
	if i < 0 {
		return s
	}
	b := []byte(s)
	for j := i; j < len(b); j++ {
		if 'A' <= b[j] && b[j] <= 'Z' {
			b[j] += 'a' - 'A'
		}
	}
	return string(b)
}
