package report

import (
	"bytes"
	"strings"
	"testing"
)

// TestDNSCacheInHeader: a run behind CoreDNS's cache plugin says so next
// to the DNS TTL; one without says nothing more.
func TestDNSCacheInHeader(t *testing.T) {
	for _, tt := range []struct{ cache, want string }{
		{"", "DNS TTL 30s\n"},
		{"cache 30", "DNS TTL 30s behind cache 30\n"},
		{"cache 30 { disable success cluster.local; disable denial cluster.local }",
			"DNS TTL 30s behind cache 30 { disable success cluster.local; disable denial cluster.local }\n"},
	} {
		r := &Result{Scenario: "coredns-cache", Source: "builtin:coredns-cache", Duration: 45, DNSTTL: 30, DNSCache: tt.cache}
		var buf bytes.Buffer
		if err := Text(&buf, r); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(buf.String(), tt.want) {
			t.Errorf("header of a run with cache %q lacks %q:\n%s", tt.cache, tt.want, buf.String())
		}
	}
}
