package proxy

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/labtest"
)

func TestMinSyncPeriodDefaults(t *testing.T) {
	tests := []struct {
		name string
		mode Mode
		cfg  time.Duration
		want time.Duration
	}{
		{"iptables default", ModeIPTables, 0, DefaultMinSyncPeriod},
		{"nftables default", ModeNFTables, 0, DefaultMinSyncPeriod},
		{"ipvs default: no wait", ModeIPVS, 0, 0},
		{"set", ModeIPVS, 300 * time.Millisecond, 300 * time.Millisecond},
		{"negative: no wait", ModeIPTables, -1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := minSyncPeriod(tt.mode, tt.cfg); got != tt.want {
				t.Errorf("minSyncPeriod(%q, %v) = %v, want %v", tt.mode, tt.cfg, got, tt.want)
			}
		})
	}
}

// syncLog records the time and the rules of every sync a Proxier makes.
type syncLog struct {
	mu    sync.Mutex
	p     *Proxier
	syncs []syncRecord
}

type syncRecord struct {
	at    time.Time
	rules []Rule
}

func (s *syncLog) record() {
	r := syncRecord{time.Now(), s.p.Rules()}
	s.mu.Lock()
	s.syncs = append(s.syncs, r)
	s.mu.Unlock()
}

func (s *syncLog) all() []syncRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]syncRecord(nil), s.syncs...)
}

// waitFor waits for the first sync from index from on whose rules for vip
// have exactly the endpoint ep, and returns its index. (The sync is recorded
// just after its rules are published.)
func (s *syncLog) waitFor(t *testing.T, from int, vip string, ep netip.AddrPort) int {
	t.Helper()
	ap := netip.MustParseAddrPort(vip)
	found := -1
	labtest.WaitFor(t, deadline, "sync with endpoint "+ep.String(), func() bool {
		syncs := s.all()
		for i := from; i < len(syncs); i++ {
			if r, ok := findRule(syncs[i].rules, ap); ok && len(r.Endpoints) == 1 && r.Endpoints[0].Addr == ep {
				found = i
				return true
			}
		}
		return false
	})
	return found
}

// TestMinSyncPeriod: after a sync, changes wait MinSyncPeriod and are then
// applied together in one sync, as kube-proxy's BoundedFrequencyRunner does;
// a negative MinSyncPeriod applies them without waiting. Only lower bounds
// on time are asserted.
func TestMinSyncPeriod(t *testing.T) {
	tests := []struct {
		name     string
		minSync  time.Duration
		wantWait time.Duration // least time from the last sync to the change's
		coalesce bool          // two changes in the cooldown make one sync
	}{
		{name: "300ms", minSync: 300 * time.Millisecond, wantWait: 300 * time.Millisecond, coalesce: true},
		{name: "negative", minSync: -1},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log := &syncLog{}
			l := newLab(t, Config{MinSyncPeriod: tt.minSync}, func(p *Proxier) { log.p, p.synced = p, log.record })
			ip := fmt.Sprintf("127.202.20.%d", i+1)
			bs := startBackends(t, ip, fmt.Sprintf("127.202.21.%d", i+1))
			vip := fmt.Sprintf("127.201.77.%d:18201", 30+i)
			l.service("pricing", netip.MustParseAddrPort(vip).Addr().String(), labtest.ServicePort("grpc", 18201))
			l.slice("pricing-a", "pricing", grpcPorts(bs), endpoint(bs[0], labtest.Ready))
			l.waitEndpoints(vip, bs[0])
			first := log.waitFor(t, 0, vip, bs[0].addr)

			l.slice("pricing-a", "pricing", grpcPorts(bs), endpoint(bs[0], labtest.Ready), endpoint(bs[1], labtest.Ready))
			l.slice("pricing-a", "pricing", grpcPorts(bs), endpoint(bs[1], labtest.Ready))
			changed := time.Now() // both changes are in the API
			l.waitEndpoints(vip, bs[1])
			applied := log.waitFor(t, first+1, vip, bs[1].addr)

			syncs := log.all()
			if wait := syncs[applied].at.Sub(syncs[first].at); wait < tt.wantWait {
				t.Errorf("change applied %v after the previous sync, want at least %v", wait, tt.wantWait)
			}
			if !tt.coalesce {
				return
			}
			if late := changed.Sub(syncs[first].at); late >= tt.minSync {
				t.Logf("changes reached the API %v after the sync, past the cooldown: coalescing not checked", late)
				return
			}
			if n := applied - first; n != 1 {
				var eps [][]Endpoint
				for _, s := range syncs[first+1 : applied+1] {
					r, _ := findRule(s.rules, netip.MustParseAddrPort(vip))
					eps = append(eps, r.Endpoints)
				}
				t.Errorf("the two changes took %d syncs, want 1; their endpoints: %v", n, eps)
			}
		})
	}
}
