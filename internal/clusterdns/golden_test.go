package clusterdns_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"

	"github.com/pinlab/pinlab/internal/clusterdns"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// goldenSerial is the SOA serial in golden replies, through the clock seam.
var goldenSerial = time.Unix(1700000000, 0)

// TestGolden compares whole replies, in dig's presentation format, with
// testdata/<name>.golden. Addresses keep a fixed order and the SOA serial
// a fixed time. Run with -update to rewrite the files after a deliberate
// change, and review the diff.
func TestGolden(t *testing.T) {
	clusterdns.SetNow(t, func() time.Time { return goldenSerial })
	fx := newFixture(t, clusterdns.Config{FixedOrder: true, Pods: clusterdns.PodsInsecure},
		append(append(referenceObjects(), reverseObjects()...),
			externalService("testns", "extip", "192.0.2.1"))...)
	tests := []struct {
		name  string
		qname string
		qtype uint16
		tcp   bool
		edns  uint16
	}{
		{"headless-a", tn("hdls"), dns.TypeA, false, 0},
		{"headless-srv-glue", "_http._tcp." + tn("hdls"), dns.TypeSRV, false, 1232},
		{"clusterip-srv-all-ports", tn("svc2"), dns.TypeSRV, false, 0},
		{"externalname-chase", tn("ext2svc"), dns.TypeA, false, 0},
		{"externalname-outside", tn("ext"), dns.TypeA, false, 0},
		{"externalname-ip", tn("extip"), dns.TypeA, false, 0},
		{"externalname-port-srv", "_http._tcp." + tn("ext"), dns.TypeSRV, false, 0},
		{"mixed-case-srv", "_HTTP._TCP.SVC1.TESTNS.SVC.CLUSTER.LOCAL.", dns.TypeSRV, false, 0},
		{"nxdomain-soa", tn("svc0"), dns.TypeA, false, 0},
		{"nodata-soa", tn("svc1"), dns.TypeAAAA, false, 0},
		{"truncated-udp", tn("big"), dns.TypeA, false, 0},
		{"truncated-udp-edns", tn("big"), dns.TypeA, false, 1232},
		{"big-tcp", tn("big"), dns.TypeA, true, 0},
		{"ptr-clusterip", "1.0.0.10.in-addr.arpa.", dns.TypePTR, false, 0},
		{"ptr-two-services", "99.0.0.10.in-addr.arpa.", dns.TypePTR, false, 0},
		{"ptr-ipv6-endpoint", nibbles("5678:abcd::1"), dns.TypePTR, false, 0},
		{"dual-stack-aaaa", tn("dual"), dns.TypeAAAA, false, 0},
		{"dual-stack-srv-glue", "_http._tcp." + tn("dual"), dns.TypeSRV, false, 0},
		{"headless-aaaa", tn("hdls"), dns.TypeAAAA, false, 0},
		{"ptr-dual-stack-ipv6", nibbles("10::3"), dns.TypePTR, false, 0},
		{"ptr-nxdomain", "9.9.9.10.in-addr.arpa.", dns.TypePTR, false, 0},
		{"apex-ns", "cluster.local.", dns.TypeNS, false, 0},
		{"pod-insecure", "10-240-0-1.testns.pod.cluster.local.", dns.TypeA, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := new(dns.Msg)
			m.SetQuestion(tt.qname, tt.qtype)
			m.Id = 4242
			if tt.edns != 0 {
				m.SetEdns0(tt.edns, false)
			}
			w := newRecorder(tt.tcp)
			fx.srv.ServeDNS(w, m)
			if w.err != nil {
				t.Fatal(w.err)
			}
			network := map[bool]string{false: "udp", true: "tcp"}[tt.tcp]
			got := fmt.Sprintf(";; %s %s %s edns=%d\n%s\n;; MSG SIZE  rcvd: %d\n",
				network, tt.qname, dns.TypeToString[tt.qtype], tt.edns, w.msg, w.size)
			checkGolden(t, filepath.Join("testdata", tt.name+".golden"), got)
		})
	}
}

// checkGolden compares got with the file at path, or rewrites the file
// with -update.
func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", path, diff)
	}
}
