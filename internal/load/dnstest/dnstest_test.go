package dnstest_test

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
	"github.com/pinlab/pinlab/internal/load/dnstest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRotate: with Rotate, each A query turns the answer list by one more;
// without it, answers keep the order Set gave.
func TestRotate(t *testing.T) {
	ips := []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3")}
	tests := []struct {
		name   string
		rotate bool
		want   []string // the first address of each of three answers
	}{
		{name: "fixed order", want: []string{"10.0.0.1", "10.0.0.1", "10.0.0.1"}},
		{name: "rotate", rotate: true, want: []string{"10.0.0.2", "10.0.0.3", "10.0.0.1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := dnstest.StartWith(t, dnstest.Options{IP: netip.MustParseAddr("127.206.9.53"), Rotate: tt.rotate})
			s.Set("pricing.shop", ips...)
			var got []string
			for range 3 {
				r, _, err := new(dns.Client).Exchange(new(dns.Msg).SetQuestion("pricing.shop.", dns.TypeA), s.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				if len(r.Answer) != len(ips) {
					t.Fatalf("answer %v, want %d records", r.Answer, len(ips))
				}
				got = append(got, r.Answer[0].(*dns.A).A.String())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("first addresses (-want +got):\n%s", diff)
			}
			if n := s.Queries("pricing.shop"); n != 3 {
				t.Errorf("Queries = %d, want 3", n)
			}
		})
	}
}
