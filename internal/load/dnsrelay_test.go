package load

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/load/cachedns"
	"github.com/pinlab/pinlab/internal/load/dnstest"
	"github.com/pinlab/pinlab/internal/loopback"
)

// dialLog is a Config.Dial that dials from source in this namespace and
// records each socket it opened, as "network addr".
type dialLog struct {
	source netip.Addr

	mu    sync.Mutex
	dials []string
}

func (d *dialLog) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.dials = append(d.dials, network+" "+addr)
	d.mu.Unlock()
	return loopback.Dialer{Source: d.source}.Dial(ctx, network, addr)
}

// saw reports whether a socket was opened over network to addr.
func (d *dialLog) saw(network, addr string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Contains(d.dials, network+" "+addr)
}

func (d *dialLog) String() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return fmt.Sprint(d.dials)
}

// TestDialHook: a client given Config.Dial opens every socket through it,
// its connections and, whatever its resolver, its DNS queries (grpc-go's
// through the relay), so the DNS server sees them from the hook's source
// alone.
func TestDialHook(t *testing.T) {
	tests := []struct {
		name     string
		resolver string
		dns      bool // a dns:// target; else passthrough
	}{
		{name: "grpc", resolver: ResolverGRPC, dns: true},
		{name: "cached", resolver: ResolverCached, dns: true},
		{name: "once", resolver: ResolverOnce, dns: true},
		{name: "passthrough", resolver: ResolverGRPC},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			net := byte(90 + i)
			b := startBackend(t, "b", fmt.Sprintf("127.203.%d.1:0", net))
			d := dnstest.Start(t)
			d.Set("pricing.test", b.addr.Addr())
			target := "passthrough:///" + b.addr.String()
			if tt.dns {
				target = fmt.Sprintf("dns://%s/pricing.test:%d", d.Addr(), b.addr.Port())
			}
			hook := &dialLog{source: netip.AddrFrom4([4]byte{127, 203, net, 9})}
			var obs collector
			start(t, Config{Source: hook.source, Target: target, Resolver: tt.resolver, Dial: hook.Dial, Rate: 100, Observer: &obs})
			labtest.WaitFor(t, 10*time.Second, "a call answered by b", func() bool { return count(obs.snapshot()).pods["b"] > 0 })
			if !hook.saw("tcp", b.addr.String()) {
				t.Errorf("the connection to %v was not dialled through Dial; it opened %v", b.addr, hook)
			}
			if !tt.dns {
				return
			}
			if !hook.saw("udp", d.Addr().String()) {
				t.Errorf("no DNS query to %v through Dial; it opened %v", d.Addr(), hook)
			}
			if diff := cmp.Diff([]netip.Addr{hook.source}, d.Sources(), netipEqual); diff != "" {
				t.Errorf("DNS query sources (-want +got):\n%s", diff)
			}
		})
	}
}

// netipEqual compares netip.Addrs by value.
var netipEqual = cmp.Comparer(func(a, b netip.Addr) bool { return a == b })

// TestDNSRelay: the relay carries a query over UDP and, for an answer too
// long for UDP, over TCP, each through its dial; a query it cannot dial
// for goes unanswered; close ends everything it started.
func TestDNSRelay(t *testing.T) {
	d := dnstest.Start(t)
	var many []netip.Addr
	for i := range 100 {
		many = append(many, netip.AddrFrom4([4]byte{127, 203, 95, byte(i)}))
	}
	d.Set("many.test", many...)
	hook := &dialLog{source: netip.MustParseAddr("127.203.94.9")}
	r, err := startRelay(d.Addr().String(), hook.Dial)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	ctx := labtest.Context(t, 10*time.Second)
	got, err := cachedns.Lookup(ctx, r.addr, nil, "many.test")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(many, got, netipEqual); diff != "" {
		t.Errorf("answer through the relay (-want +got):\n%s", diff)
	}
	if !hook.saw("udp", d.Addr().String()) || !hook.saw("tcp", d.Addr().String()) {
		t.Errorf("the relay opened %v, want a UDP and a TCP socket to %v", hook, d.Addr())
	}
	if diff := cmp.Diff([]netip.Addr{hook.source}, d.Sources(), netipEqual); diff != "" {
		t.Errorf("query sources (-want +got):\n%s", diff)
	}

	refused, err := startRelay(d.Addr().String(), func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("no namespace")
	})
	if err != nil {
		t.Fatal(err)
	}
	defer refused.close()
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if got, err := cachedns.Lookup(short, refused.addr, nil, "many.test"); err == nil {
		t.Errorf("a relay that cannot dial answered %v", got)
	}
}
