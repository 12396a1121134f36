package clusterdns_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
	"go.uber.org/goleak"

	"github.com/pinlab/pinlab/internal/clusterdns"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// dnsCase is one question and the reply expected, sections compared as
// sets. Nil ns means "the negative SOA" when answer is empty, else none.
type dnsCase struct {
	name   string
	qname  string
	qtype  uint16
	rcode  int
	answer []string
	ns     []string
	extra  []string
}

// referenceCases are the numbered conformance cases (from the Kubernetes DNS
// specification and CoreDNS's plugin/kubernetes handler tests) over
// referenceObjects with "pods insecure". #35 is in TestEndpointsFollowAPI, #40
// with its upstream answer has no upstream here, #48's other modes are in
// TestPodModes and #51-#52 in TestTruncation.
var referenceCases = []dnsCase{
	{name: "1 ClusterIP A", qname: tn("svc1"), qtype: dns.TypeA,
		answer: []string{tn("svc1") + " 5 IN A 10.0.0.1"}},
	{name: "2 IPv4-only AAAA is NODATA", qname: tn("svc1"), qtype: dns.TypeAAAA},
	{name: "3 ClusterIP without endpoints", qname: tn("svc2"), qtype: dns.TypeA,
		answer: []string{tn("svc2") + " 5 IN A 10.0.0.2"}},
	{name: "4 IPv6 ClusterIP AAAA", qname: tn("svc6"), qtype: dns.TypeAAAA,
		answer: []string{tn("svc6") + " 5 IN AAAA 1234:abcd::1"}},
	{name: "5 IPv6-only A is NODATA", qname: tn("svc6"), qtype: dns.TypeA},
	{name: "6 dual-stack A", qname: tn("dual"), qtype: dns.TypeA,
		answer: []string{tn("dual") + " 5 IN A 10.0.0.3"}},
	{name: "6 dual-stack AAAA", qname: tn("dual"), qtype: dns.TypeAAAA,
		answer: []string{tn("dual") + " 5 IN AAAA 10::3"}},
	{name: "8 unknown Service", qname: tn("svc0"), qtype: dns.TypeA, rcode: dns.RcodeNameError},
	{name: "9 unknown namespace", qname: "svc1.nons.svc.cluster.local.", qtype: dns.TypeA, rcode: dns.RcodeNameError},
	{name: "12 second label not svc or pod", qname: "foo.cluster.local.", qtype: dns.TypeA, rcode: dns.RcodeNameError},
	{name: "13 apex SOA", qname: "cluster.local.", qtype: dns.TypeSOA, answer: []string{soaRR}, ns: []string{}},
	{name: "14 apex NS", qname: "cluster.local.", qtype: dns.TypeNS,
		answer: []string{"cluster.local. 5 IN NS kube-dns.kube-system.svc.cluster.local."},
		extra:  []string{"kube-dns.kube-system.svc.cluster.local. 5 IN A 10.96.0.10"}},
	{name: "15 schema version", qname: "dns-version.cluster.local.", qtype: dns.TypeTXT,
		answer: []string{`dns-version.cluster.local. 28800 IN TXT "1.1.0"`}},
	{name: "18 SRV named port", qname: "_http._tcp." + tn("svc1"), qtype: dns.TypeSRV,
		answer: []string{"_http._tcp." + tn("svc1") + " 5 IN SRV 0 100 80 " + tn("svc1")},
		extra:  []string{tn("svc1") + " 5 IN A 10.0.0.1"}},
	{name: "19 SRV on the Service lists every port", qname: tn("svc2"), qtype: dns.TypeSRV,
		answer: []string{
			tn("svc2") + " 5 IN SRV 0 50 80 " + tn("svc2"),
			tn("svc2") + " 5 IN SRV 0 50 53 " + tn("svc2"),
		},
		extra: []string{tn("svc2") + " 5 IN A 10.0.0.2"}},
	{name: "20 SRV udp port", qname: "_dns._udp." + tn("svc2"), qtype: dns.TypeSRV,
		answer: []string{"_dns._udp." + tn("svc2") + " 5 IN SRV 0 100 53 " + tn("svc2")},
		extra:  []string{tn("svc2") + " 5 IN A 10.0.0.2"}},
	{name: "22 SRV unknown port", qname: "_bogus._tcp." + tn("svc1"), qtype: dns.TypeSRV, rcode: dns.RcodeNameError},
	{name: "24 headless A: ready IPv4 only", qname: tn("hdls"), qtype: dns.TypeA,
		answer: []string{
			tn("hdls") + " 5 IN A 172.0.0.2",
			tn("hdls") + " 5 IN A 172.0.0.3",
			tn("hdls") + " 5 IN A 172.0.0.4",
		}},
	{name: "25 headless AAAA", qname: tn("hdls"), qtype: dns.TypeAAAA,
		answer: []string{tn("hdls") + " 5 IN AAAA 5678:abcd::1"}},
	{name: "26 endpoint by hostname", qname: "web-0." + tn("hdls"), qtype: dns.TypeA,
		answer: []string{"web-0." + tn("hdls") + " 5 IN A 172.0.0.4"}},
	{name: "27 endpoint by dashed IPv4", qname: "172-0-0-2." + tn("hdls"), qtype: dns.TypeA,
		answer: []string{"172-0-0-2." + tn("hdls") + " 5 IN A 172.0.0.2"}},
	{name: "28 endpoint by dashed IPv6", qname: "5678-abcd--1." + tn("hdls"), qtype: dns.TypeAAAA,
		answer: []string{"5678-abcd--1." + tn("hdls") + " 5 IN AAAA 5678:abcd::1"}},
	{name: "31 headless SRV", qname: "_http._tcp." + tn("hdls"), qtype: dns.TypeSRV,
		answer: []string{
			"_http._tcp." + tn("hdls") + " 5 IN SRV 0 25 80 172-0-0-2." + tn("hdls"),
			"_http._tcp." + tn("hdls") + " 5 IN SRV 0 25 80 172-0-0-3." + tn("hdls"),
			"_http._tcp." + tn("hdls") + " 5 IN SRV 0 25 80 web-0." + tn("hdls"),
			"_http._tcp." + tn("hdls") + " 5 IN SRV 0 25 80 5678-abcd--1." + tn("hdls"),
		},
		extra: []string{
			"172-0-0-2." + tn("hdls") + " 5 IN A 172.0.0.2",
			"172-0-0-3." + tn("hdls") + " 5 IN A 172.0.0.3",
			"web-0." + tn("hdls") + " 5 IN A 172.0.0.4",
			"5678-abcd--1." + tn("hdls") + " 5 IN AAAA 5678:abcd::1",
		}},
	{name: "32 headless without ready endpoints", qname: tn("hdlsempty"), qtype: dns.TypeA, rcode: dns.RcodeNameError},
	{name: "33 SRV without ready endpoints", qname: "_http._tcp." + tn("hdlsempty"), qtype: dns.TypeSRV, rcode: dns.RcodeNameError},
	{name: "34 publishNotReadyAddresses Service", qname: tn("hdlspnr"), qtype: dns.TypeA,
		answer: []string{tn("hdlspnr") + " 5 IN A 172.0.0.11"}},
	{name: "34 publishNotReadyAddresses endpoint", qname: "db-0." + tn("hdlspnr"), qtype: dns.TypeA,
		answer: []string{"db-0." + tn("hdlspnr") + " 5 IN A 172.0.0.11"}},
	{name: "39 ExternalName CNAME", qname: tn("ext"), qtype: dns.TypeCNAME,
		answer: []string{tn("ext") + " 5 IN CNAME ext.example.com."}},
	{name: "40 ExternalName A without upstream", qname: tn("ext"), qtype: dns.TypeA,
		answer: []string{tn("ext") + " 5 IN CNAME ext.example.com."}},
	{name: "41 ExternalName to an in-zone name", qname: tn("ext2svc"), qtype: dns.TypeA,
		answer: []string{
			tn("ext2svc") + " 5 IN CNAME svc1.testns.svc.cluster.local.",
			tn("svc1") + " 5 IN A 10.0.0.1",
		}},
	{name: "43 PTR of a ClusterIP", qname: "1.0.0.10.in-addr.arpa.", qtype: dns.TypePTR,
		answer: []string{"1.0.0.10.in-addr.arpa. 5 IN PTR svc1.testns.svc.cluster.local."}},
	{name: "44 PTR of a headless endpoint with hostname", qname: "4.0.0.172.in-addr.arpa.", qtype: dns.TypePTR,
		answer: []string{"4.0.0.172.in-addr.arpa. 5 IN PTR web-0." + tn("hdls")}},
	{name: "48 pods insecure", qname: "10-240-0-1.testns.pod.cluster.local.", qtype: dns.TypeA,
		answer: []string{"10-240-0-1.testns.pod.cluster.local. 5 IN A 10.240.0.1"}},
	{name: "53 big over TCP is complete", qname: tn("big"), qtype: dns.TypeA,
		answer: bigAnswer(tn("big"), 100)},
}

// ruleCases cover rules of the specification and CoreDNS that have no numbered case.
var ruleCases = []dnsCase{
	// Grammar and NODATA/NXDOMAIN.
	{name: "apex A is NODATA", qname: "cluster.local.", qtype: dns.TypeA},
	{name: "apex TXT is NODATA", qname: "cluster.local.", qtype: dns.TypeTXT},
	{name: "svc subtree is NODATA", qname: "svc.cluster.local.", qtype: dns.TypeA},
	{name: "pod subtree is NODATA", qname: "pod.cluster.local.", qtype: dns.TypeA},
	{name: "existing namespace is NODATA", qname: "testns.svc.cluster.local.", qtype: dns.TypeA},
	{name: "existing namespace SRV is NODATA", qname: "testns.svc.cluster.local.", qtype: dns.TypeSRV},
	{name: "unknown namespace alone", qname: "nons.svc.cluster.local.", qtype: dns.TypeA, rcode: dns.RcodeNameError},
	{name: "namespace in pod subtree", qname: "testns.pod.cluster.local.", qtype: dns.TypeA, rcode: dns.RcodeNameError},
	{name: "three labels left of the Service", qname: "a._http._tcp." + tn("svc1"), qtype: dns.TypeA, rcode: dns.RcodeNameError},
	{name: "dns-version A is NXDOMAIN", qname: "dns-version.cluster.local.", qtype: dns.TypeA, rcode: dns.RcodeNameError},
	{name: "wildcard Service is NXDOMAIN", qname: "*.testns.svc.cluster.local.", qtype: dns.TypeA, rcode: dns.RcodeNameError},
	{name: "name under the zone's subtree label", qname: "x.svc1.testns.foo.cluster.local.", qtype: dns.TypeA, rcode: dns.RcodeNameError},

	// Types without data of their own: a fake A lookup decides.
	{name: "TXT on a Service is NODATA", qname: tn("svc1"), qtype: dns.TypeTXT},
	{name: "gRPC service config TXT is NXDOMAIN", qname: "_grpc_config." + tn("svc1"), qtype: dns.TypeTXT, rcode: dns.RcodeNameError},
	{name: "TXT on unknown Service", qname: tn("svc0"), qtype: dns.TypeTXT, rcode: dns.RcodeNameError},
	{name: "MX on a Service is NODATA", qname: tn("svc1"), qtype: dns.TypeMX},
	{name: "ANY on a Service is NODATA", qname: tn("hdls"), qtype: dns.TypeANY},
	{name: "PTR on a forward name is NODATA", qname: tn("svc1"), qtype: dns.TypePTR},
	{name: "CNAME on a ClusterIP Service is NODATA", qname: tn("svc1"), qtype: dns.TypeCNAME},
	{name: "SOA below the apex is NODATA", qname: tn("svc1"), qtype: dns.TypeSOA},
	{name: "SOA on unknown Service", qname: tn("svc0"), qtype: dns.TypeSOA, rcode: dns.RcodeNameError},
	{name: "NS below the apex is NODATA", qname: tn("svc1"), qtype: dns.TypeNS},
	{name: "TXT on headless without ready endpoints", qname: tn("hdlsempty"), qtype: dns.TypeTXT, rcode: dns.RcodeNameError},
	{name: "HTTPS on ExternalName is NODATA", qname: tn("ext"), qtype: dns.TypeHTTPS},

	// Endpoints.
	{name: "endpoint of a ClusterIP Service", qname: "ep1a." + tn("svc1"), qtype: dns.TypeA,
		answer: []string{"ep1a." + tn("svc1") + " 5 IN A 172.0.0.1"}},
	{name: "dashed IP of an endpoint with a hostname", qname: "172-0-0-1." + tn("svc1"), qtype: dns.TypeA, rcode: dns.RcodeNameError},
	{name: "endpoint without endpoints", qname: "x." + tn("svc2"), qtype: dns.TypeA, rcode: dns.RcodeNameError},
	{name: "not-ready endpoint", qname: "web-9." + tn("hdls"), qtype: dns.TypeA, rcode: dns.RcodeNameError},
	{name: "unknown endpoint", qname: "nope." + tn("hdls"), qtype: dns.TypeA, rcode: dns.RcodeNameError},
	{name: "IPv4 endpoint AAAA is NODATA", qname: "web-0." + tn("hdls"), qtype: dns.TypeAAAA},
	{name: "endpoint SRV on the bare name", qname: "web-0." + tn("hdls"), qtype: dns.TypeSRV,
		answer: []string{"web-0." + tn("hdls") + " 5 IN SRV 0 100 80 web-0." + tn("hdls")},
		extra:  []string{"web-0." + tn("hdls") + " 5 IN A 172.0.0.4"}},

	// SRV.
	{name: "SRV labels without underscores", qname: "http.tcp." + tn("svc1"), qtype: dns.TypeSRV,
		answer: []string{"http.tcp." + tn("svc1") + " 5 IN SRV 0 100 80 " + tn("svc1")},
		extra:  []string{tn("svc1") + " 5 IN A 10.0.0.1"}},
	{name: "SRV wrong protocol", qname: "_http._udp." + tn("svc1"), qtype: dns.TypeSRV, rcode: dns.RcodeNameError},
	{name: "A on a port name", qname: "_dns._udp." + tn("svc2"), qtype: dns.TypeA,
		answer: []string{"_dns._udp." + tn("svc2") + " 5 IN A 10.0.0.2"}},
	{name: "SRV includes unnamed ports on the bare name", qname: tn("unnamed"), qtype: dns.TypeSRV,
		answer: []string{tn("unnamed") + " 5 IN SRV 0 100 8080 " + tn("unnamed")},
		extra:  []string{tn("unnamed") + " 5 IN A 10.0.0.5"}},
	{name: "unnamed port has no port name", qname: "_8080._tcp." + tn("unnamed"), qtype: dns.TypeSRV, rcode: dns.RcodeNameError},
	{name: "dual-stack SRV glues both families", qname: "_http._tcp." + tn("dual"), qtype: dns.TypeSRV,
		answer: []string{"_http._tcp." + tn("dual") + " 5 IN SRV 0 50 80 " + tn("dual")},
		extra:  []string{tn("dual") + " 5 IN A 10.0.0.3", tn("dual") + " 5 IN AAAA 10::3"}},
	{name: "SRV on ExternalName is NODATA", qname: tn("ext"), qtype: dns.TypeSRV},

	{name: "SRV weight counts entries before de-duplication", qname: tn("dupname"), qtype: dns.TypeSRV,
		answer: []string{
			tn("dupname") + " 5 IN SRV 0 33 80 dup." + tn("dupname"),
			tn("dupname") + " 5 IN SRV 0 33 80 172-0-0-22." + tn("dupname"),
		},
		extra: []string{
			"dup." + tn("dupname") + " 5 IN A 172.0.0.20",
			"dup." + tn("dupname") + " 5 IN A 172.0.0.21",
			"172-0-0-22." + tn("dupname") + " 5 IN A 172.0.0.22",
		}},
	{name: "shared hostname has every address", qname: "dup." + tn("dupname"), qtype: dns.TypeA,
		answer: []string{"dup." + tn("dupname") + " 5 IN A 172.0.0.20", "dup." + tn("dupname") + " 5 IN A 172.0.0.21"}},
	{name: "SRV weight is at least 1", qname: "_http._tcp." + tn("big"), qtype: dns.TypeSRV,
		answer: bigSRV(100), extra: bigGlue(100)},
	{name: "port-less slice answers A", qname: tn("noports"), qtype: dns.TypeA,
		answer: []string{tn("noports") + " 5 IN A 172.0.0.30"}},
	{name: "port-less slice has no SRV", qname: tn("noports"), qtype: dns.TypeSRV},
	{name: "port-less slice has no named port", qname: "_http._tcp." + tn("noports"), qtype: dns.TypeSRV, rcode: dns.RcodeNameError},
	{name: "ClusterIP Service without ports answers A", qname: tn("portless"), qtype: dns.TypeA,
		answer: []string{tn("portless") + " 5 IN A 10.0.0.6"}},
	{name: "ClusterIP Service without ports has no SRV", qname: tn("portless"), qtype: dns.TypeSRV},
	{name: "FQDN slice is not served", qname: tn("fqdn"), qtype: dns.TypeA, rcode: dns.RcodeNameError},

	// ExternalName.
	{name: "ExternalName loop ends", qname: tn("loop1"), qtype: dns.TypeA},
	// An externalName that is an IP: Kubernetes takes it as a name of
	// digits, and CoreDNS's findServices keeps an ExternalName Service only
	// if msg.Service.HostType is CNAME, so every type is NXDOMAIN.
	{name: "ExternalName with an IP is not an alias", qname: tn("extip"), qtype: dns.TypeA, rcode: dns.RcodeNameError},
	{name: "ExternalName with an IP: AAAA", qname: tn("extip"), qtype: dns.TypeAAAA, rcode: dns.RcodeNameError},
	{name: "ExternalName with an IP: CNAME", qname: tn("extip"), qtype: dns.TypeCNAME, rcode: dns.RcodeNameError},
	{name: "ExternalName with an IP: SRV", qname: tn("extip"), qtype: dns.TypeSRV, rcode: dns.RcodeNameError},
	{name: "ExternalName to a headless Service", qname: tn("ext2hdls"), qtype: dns.TypeA,
		answer: []string{
			tn("ext2hdls") + " 5 IN CNAME hdls.testns.svc.cluster.local.",
			tn("hdls") + " 5 IN A 172.0.0.2",
			tn("hdls") + " 5 IN A 172.0.0.3",
			tn("hdls") + " 5 IN A 172.0.0.4",
		}},
	{name: "name under an ExternalName", qname: "x." + tn("ext"), qtype: dns.TypeA, rcode: dns.RcodeNameError},
	// CoreDNS's findServices skips an ExternalName Service when the query
	// has port or protocol labels: every type is NXDOMAIN, never the CNAME.
	{name: "port and protocol under an ExternalName: SRV", qname: "_http._tcp." + tn("ext"), qtype: dns.TypeSRV, rcode: dns.RcodeNameError},
	{name: "port and protocol under an ExternalName: A", qname: "_http._tcp." + tn("ext"), qtype: dns.TypeA, rcode: dns.RcodeNameError},
	{name: "port and protocol under an ExternalName: CNAME", qname: "_http._tcp." + tn("ext"), qtype: dns.TypeCNAME, rcode: dns.RcodeNameError},
	{name: "port and protocol under an in-zone ExternalName", qname: "_http._tcp." + tn("ext2svc"), qtype: dns.TypeA, rcode: dns.RcodeNameError},
	{name: "port and protocol without underscores under an ExternalName", qname: "http.tcp." + tn("ext"), qtype: dns.TypeTXT, rcode: dns.RcodeNameError},
	{name: "ExternalName AAAA without upstream", qname: tn("ext"), qtype: dns.TypeAAAA,
		answer: []string{tn("ext") + " 5 IN CNAME ext.example.com."}},
	{name: "in-zone ExternalName with no target data", qname: tn("ext2svc"), qtype: dns.TypeAAAA},
	{name: "in-zone ExternalName CNAME", qname: tn("ext2svc"), qtype: dns.TypeCNAME,
		answer: []string{tn("ext2svc") + " 5 IN CNAME svc1.testns.svc.cluster.local."}},

	// Name server.
	{name: "ns.dns A is the DNS Service", qname: "ns.dns.cluster.local.", qtype: dns.TypeA,
		answer: []string{"ns.dns.cluster.local. 5 IN A 10.96.0.10"}},
	{name: "ns.dns AAAA is NODATA", qname: "ns.dns.cluster.local.", qtype: dns.TypeAAAA},

	// Case: owners echo the query, SRV targets take the zone's spelling.
	{name: "mixed-case A", qname: "SvC1.TeStNs.SvC.cLuStEr.LoCaL.", qtype: dns.TypeA,
		answer: []string{"SvC1.TeStNs.SvC.cLuStEr.LoCaL. 5 IN A 10.0.0.1"}},
	{name: "mixed-case SRV", qname: "_HtTp._TcP.sVc1.TeStNs.SvC.cLuStEr.LoCaL.", qtype: dns.TypeSRV,
		answer: []string{"_HtTp._TcP.sVc1.TeStNs.SvC.cLuStEr.LoCaL. 5 IN SRV 0 100 80 svc1.testns.svc.cLuStEr.LoCaL."},
		extra:  []string{"svc1.testns.svc.cLuStEr.LoCaL. 5 IN A 10.0.0.1"}},
	{name: "mixed-case NXDOMAIN keeps the zone's spelling", qname: "not-a-service.testns.svc.ClUsTeR.lOcAl.", qtype: dns.TypeA,
		rcode: dns.RcodeNameError,
		ns:    []string{"ClUsTeR.lOcAl. 5 IN SOA ns.dns.ClUsTeR.lOcAl. hostmaster.ClUsTeR.lOcAl. 0 7200 1800 86400 5"}},
	{name: "mixed-case NS names the DNS Service in the zone as asked", qname: "ClUsTeR.lOcAl.", qtype: dns.TypeNS,
		answer: []string{"ClUsTeR.lOcAl. 5 IN NS kube-dns.kube-system.svc.ClUsTeR.lOcAl."},
		extra:  []string{"kube-dns.kube-system.svc.ClUsTeR.lOcAl. 5 IN A 10.96.0.10"}},
	{name: "mixed-case endpoint", qname: "WEB-0.HDLS.testns.svc.cluster.local.", qtype: dns.TypeA,
		answer: []string{"WEB-0.HDLS.testns.svc.cluster.local. 5 IN A 172.0.0.4"}},

	// Outside the zone and unsupported operations.
	{name: "other zone is REFUSED", qname: "example.com.", qtype: dns.TypeA, rcode: dns.RcodeRefused, ns: []string{}},
	{name: "suffix that is not a label boundary", qname: "xcluster.local.", qtype: dns.TypeA, rcode: dns.RcodeRefused, ns: []string{}},
	{name: "root", qname: ".", qtype: dns.TypeNS, rcode: dns.RcodeRefused, ns: []string{}},
	{name: "AXFR is REFUSED", qname: "cluster.local.", qtype: dns.TypeAXFR, rcode: dns.RcodeRefused, ns: []string{}},
	{name: "IXFR is REFUSED", qname: "cluster.local.", qtype: dns.TypeIXFR, rcode: dns.RcodeRefused, ns: []string{}},
}

func TestReferenceCases(t *testing.T) {
	fx := newFixture(t, clusterdns.Config{Pods: clusterdns.PodsInsecure}, referenceObjects()...)
	runCases(t, fx, referenceCases)
}

func TestRuleCases(t *testing.T) {
	fx := newFixture(t, clusterdns.Config{}, append(referenceObjects(), extraObjects()...)...)
	runCases(t, fx, ruleCases)
}

func runCases(t *testing.T, fx *fixture, cases []dnsCase) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := fx.ask(t, tc.qname, tc.qtype, true, 0)
			checkReply(t, got, tc)
		})
	}
}

func checkReply(t *testing.T, got *dns.Msg, tc dnsCase) {
	t.Helper()
	if got.Rcode != tc.rcode {
		t.Errorf("rcode = %s, want %s", dns.RcodeToString[got.Rcode], dns.RcodeToString[tc.rcode])
	}
	wantAA := tc.rcode != dns.RcodeRefused
	if got.Authoritative != wantAA || got.RecursionAvailable || got.Truncated {
		t.Errorf("flags aa=%v ra=%v tc=%v, want aa=%v ra=false tc=false",
			got.Authoritative, got.RecursionAvailable, got.Truncated, wantAA)
	}
	wantNS := tc.ns
	if wantNS == nil && len(tc.answer) == 0 {
		wantNS = []string{soaRR}
	}
	for _, sec := range []struct {
		name      string
		want, got []string
	}{
		{"answer", parseRRs(t, tc.answer), rrStrings(got.Answer)},
		{"authority", parseRRs(t, wantNS), rrStrings(got.Ns)},
		{"additional", parseRRs(t, tc.extra), rrStrings(got.Extra)},
	} {
		if diff := cmp.Diff(sec.want, sec.got); diff != "" {
			t.Errorf("%s section mismatch (-want +got):\n%s", sec.name, diff)
		}
	}
}

func bigAnswer(owner string, n int) []string {
	out := make([]string, n)
	for i, ip := range bigAddrs(n) {
		out[i] = owner + " 5 IN A " + ip
	}
	return out
}

func bigSRV(n int) []string {
	out := make([]string, n)
	for i, ip := range bigAddrs(n) {
		out[i] = "_http._tcp." + tn("big") + " 5 IN SRV 0 1 80 " + strings.ReplaceAll(ip, ".", "-") + "." + tn("big")
	}
	return out
}

func bigGlue(n int) []string {
	out := make([]string, n)
	for i, ip := range bigAddrs(n) {
		out[i] = strings.ReplaceAll(ip, ".", "-") + "." + tn("big") + " 5 IN A " + ip
	}
	return out
}

// TestNameServerFallback checks NS without the DNS Service: ns.dns.<zone>
// at the listen IP.
func TestNameServerFallback(t *testing.T) {
	fx := newFixture(t, clusterdns.Config{Addr: "127.53.0.1:5353"}, namespace("testns"))
	runCases(t, fx, []dnsCase{
		{name: "NS", qname: "cluster.local.", qtype: dns.TypeNS,
			answer: []string{"cluster.local. 5 IN NS ns.dns.cluster.local."},
			extra:  []string{"ns.dns.cluster.local. 5 IN A 127.53.0.1"}},
		{name: "ns.dns A", qname: "ns.dns.cluster.local.", qtype: dns.TypeA,
			answer: []string{"ns.dns.cluster.local. 5 IN A 127.53.0.1"}},
	})
}

func TestTTL(t *testing.T) {
	objs := referenceObjects()
	tests := []struct {
		name    string
		ttl     time.Duration
		a, soa  string
		version string
	}{
		{name: "default", ttl: 0,
			a:   tn("svc1") + " 5 IN A 10.0.0.1",
			soa: soaRR},
		{name: "kubeadm 30s", ttl: 30 * time.Second,
			a:   tn("svc1") + " 30 IN A 10.0.0.1",
			soa: "cluster.local. 30 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 0 7200 1800 86400 30"},
		{name: "SOA TTL capped at 300", ttl: time.Hour,
			a:   tn("svc1") + " 3600 IN A 10.0.0.1",
			soa: "cluster.local. 300 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 0 7200 1800 86400 3600"},
		{name: "negative means 0", ttl: -1,
			a:   tn("svc1") + " 0 IN A 10.0.0.1",
			soa: "cluster.local. 0 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 0 7200 1800 86400 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fx := newFixture(t, clusterdns.Config{TTL: tt.ttl}, objs...)
			runCases(t, fx, []dnsCase{
				{name: "A", qname: tn("svc1"), qtype: dns.TypeA, answer: []string{tt.a}},
				{name: "NXDOMAIN", qname: tn("svc0"), qtype: dns.TypeA, rcode: dns.RcodeNameError, ns: []string{tt.soa}},
				{name: "version keeps 28800", qname: "dns-version.cluster.local.", qtype: dns.TypeTXT,
					answer: []string{`dns-version.cluster.local. 28800 IN TXT "1.1.0"`}},
			})
		})
	}
}

func TestOtherZone(t *testing.T) {
	fx := newFixture(t, clusterdns.Config{Zone: "Lab.Example"}, referenceObjects()...)
	runCases(t, fx, []dnsCase{
		{name: "A", qname: "svc1.testns.svc.lab.example.", qtype: dns.TypeA,
			answer: []string{"svc1.testns.svc.lab.example. 5 IN A 10.0.0.1"}},
		{name: "default zone is REFUSED", qname: tn("svc1"), qtype: dns.TypeA, rcode: dns.RcodeRefused, ns: []string{}},
		{name: "negative SOA", qname: "x.lab.example.", qtype: dns.TypeA, rcode: dns.RcodeNameError,
			ns: []string{"lab.example. 5 IN SOA ns.dns.lab.example. hostmaster.lab.example. 0 7200 1800 86400 5"}},
	})
}

func TestNewRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  clusterdns.Config
	}{
		{"TTL above an hour", clusterdns.Config{TTL: 2 * time.Hour}},
		{"address outside loopback", clusterdns.Config{Addr: "10.0.0.1:53"}},
		{"host name address", clusterdns.Config{Addr: "localhost:53"}},
		{"bad zone", clusterdns.Config{Zone: "a..b"}},
		{"unknown pods mode", clusterdns.Config{Pods: "secure"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := clusterdns.New(newFactory(), tt.cfg)
			if err == nil {
				t.Fatal("New succeeded, want an error")
			}
		})
	}
}
