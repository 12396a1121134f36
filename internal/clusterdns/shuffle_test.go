package clusterdns_test

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"

	"github.com/pinlab/pinlab/internal/clusterdns"
)

// TestShuffle: over many queries each of hdls's three addresses comes first
// a fair share of the time. With a uniform shuffle each is first 100 times
// in 300 on average; fewer than 40 has a probability below 1e-10.
func TestShuffle(t *testing.T) {
	tests := []struct {
		name string
		rand *rand.Rand
	}{
		{"global source", nil},
		{"seeded source", rand.New(rand.NewPCG(1, 2))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fx := newFixture(t, clusterdns.Config{Rand: tt.rand}, referenceObjects()...)
			first := map[string]int{}
			for range 300 {
				m := fx.ask(t, tn("hdls"), dns.TypeA, false, 0)
				first[m.Answer[0].(*dns.A).A.String()]++
				if got := addrsOf(m); !slices.Equal(got, []string{"172.0.0.2", "172.0.0.3", "172.0.0.4"}) {
					t.Fatalf("answer set changed: %v", got)
				}
			}
			for _, ip := range []string{"172.0.0.2", "172.0.0.3", "172.0.0.4"} {
				if first[ip] < 40 {
					t.Errorf("%s first %d times in 300: %v", ip, first[ip], first)
				}
			}
		})
	}
}

// TestShuffleKeepsCNAMEFirst: with aliases the CNAME still leads.
func TestShuffleKeepsCNAMEFirst(t *testing.T) {
	fx := newFixture(t, clusterdns.Config{}, append(referenceObjects(), extraObjects()...)...)
	for range 50 {
		m := fx.ask(t, tn("ext2hdls"), dns.TypeA, false, 0)
		if len(m.Answer) != 4 || m.Answer[0].Header().Rrtype != dns.TypeCNAME {
			t.Fatalf("want CNAME then 3 A, got %v", m.Answer)
		}
	}
}

// TestFixedOrder: with FixedOrder every answer has the same order.
func TestFixedOrder(t *testing.T) {
	fx := newFixture(t, clusterdns.Config{FixedOrder: true}, referenceObjects()...)
	want := fx.ask(t, tn("big"), dns.TypeA, true, 0).Answer
	for range 50 {
		got := fx.ask(t, tn("big"), dns.TypeA, true, 0).Answer
		if diff := cmp.Diff(rrText(want), rrText(got)); diff != "" {
			t.Fatalf("order changed (-first +now):\n%s", diff)
		}
	}
}

func rrText(rrs []dns.RR) []string {
	out := make([]string, len(rrs))
	for i, rr := range rrs {
		out[i] = rr.String()
	}
	return out
}
