package proxy

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/pinlab/pinlab/internal/labtest"
	discovery "k8s.io/api/discovery/v1"
)

// The VIPs of the socket tests in this file live in 127.201.78.1 to .19,
// their backends and clients in 127.202.20.0 to 127.202.29.255 and
// 127.202.40.0/24.

func TestParseMode(t *testing.T) {
	tests := []struct {
		in      string
		want    Mode
		wantErr bool
	}{
		{"", ModeIPTables, false},
		{"iptables", ModeIPTables, false},
		{"nftables", ModeNFTables, false},
		{"ipvs", ModeIPVS, false},
		{"IPVS", "", true},
		{"userspace", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseMode(tt.in)
			if got != tt.want || (err != nil) != tt.wantErr {
				t.Errorf("ParseMode(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestRunRejectsUnknownMode(t *testing.T) {
	p := New(labtest.NewAPI(t).Factory, Config{Mode: "userspace"})
	if err := p.Run(labtest.Context(t, deadline)); err == nil || !strings.Contains(err.Error(), `unknown mode "userspace"`) {
		t.Errorf("Run() = %v, want an unknown mode error", err)
	}
}

// lbEndpoints returns endpoints 127.0.0.<n>:80 named "ep-<n>", sorted by
// address as tables hold them.
func lbEndpoints(ns ...int) []Endpoint {
	eps := make([]Endpoint, len(ns))
	for i, n := range ns {
		eps[i] = Endpoint{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, byte(n)}), 80), Pod: "ep-" + strconv.Itoa(n)}
	}
	return eps
}

// TestRoundRobinUpdate follows the rr rotation through endpoint changes
// without sockets. Each step installs eps (a new slice) and picks n times.
func TestRoundRobinUpdate(t *testing.T) {
	type step struct {
		eps  []Endpoint
		want []string
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"batch rotates in descending string order", []step{
			{lbEndpoints(1, 2, 3), []string{"ep-3", "ep-2", "ep-1", "ep-3"}},
		}},
		{"string order, not numeric", []step{
			{lbEndpoints(2, 10), []string{"ep-2", "ep-10", "ep-2"}},
		}},
		{"position and its predecessor removed at once", []step{
			{lbEndpoints(1, 2, 3, 4, 5), []string{"ep-5", "ep-4", "ep-3"}},
			{lbEndpoints(1, 2, 5), []string{"ep-2", "ep-1", "ep-5", "ep-2"}},
		}},
		{"first entry at the position removed: back to the head", []step{
			{lbEndpoints(1, 2, 3), []string{"ep-3"}},
			{lbEndpoints(1, 2, 4), []string{"ep-4", "ep-2", "ep-1", "ep-4"}},
		}},
		{"unchanged content keeps the position", []step{
			{lbEndpoints(1, 2, 3), []string{"ep-3", "ep-2"}},
			{lbEndpoints(1, 2, 3), []string{"ep-1", "ep-3"}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRoundRobin()
			for i, st := range tt.steps {
				var got []string
				for range st.want {
					got = append(got, r.pick(st.eps).Pod)
				}
				if diff := cmp.Diff(st.want, got); diff != "" {
					t.Fatalf("step %d (-want +got):\n%s", i, diff)
				}
			}
		})
	}
}

func TestRoundRobinPodRenamed(t *testing.T) {
	r := newRoundRobin()
	eps := lbEndpoints(1)
	r.pick(eps)
	renamed := []Endpoint{{Addr: eps[0].Addr, Pod: "replacement"}}
	if got := r.pick(renamed).Pod; got != "replacement" {
		t.Errorf("pick after the pod behind the address changed = %q, want replacement", got)
	}
}

type rrStep struct {
	ready []int // backends that are the ready endpoints from this step on
	want  []int // backends expected for the next connections, in order
}

// TestRoundRobin: ipvs mode takes the real servers in turn per new
// connection, in the kernel's list order (a batch of new endpoints joins at
// the head, highest "IP:port" string first), and keeps its place when the
// endpoints change. Backend k is pod-(k+1) at 127.202.2x.(k+1).
func TestRoundRobin(t *testing.T) {
	tests := []struct {
		name  string
		steps []rrStep
	}{
		{"30 connections over 3 pods", []rrStep{
			{[]int{0, 1, 2}, []int{2, 1, 0, 2, 1, 0, 2, 1, 0, 2, 1, 0, 2, 1, 0, 2, 1, 0, 2, 1, 0, 2, 1, 0, 2, 1, 0, 2, 1, 0}},
		}},
		{"pod added mid-way is reached when the rotation passes the head", []rrStep{
			{[]int{0, 1, 2}, []int{2, 1, 0, 2}},
			{[]int{0, 1, 2, 3}, []int{1, 0, 3, 2, 1, 0, 3, 2}},
		}},
		{"two pods added at once", []rrStep{
			{[]int{0}, []int{0, 0}},
			{[]int{0, 1, 2}, []int{2, 1, 0, 2, 1}},
		}},
		{"pod at the position removed: its successor is next", []rrStep{
			{[]int{0, 1, 2}, []int{2, 1}},
			{[]int{0, 2}, []int{0, 2, 0}},
		}},
		{"pod after the position removed", []rrStep{
			{[]int{0, 1, 2}, []int{2, 1}},
			{[]int{1, 2}, []int{2, 1, 2}},
		}},
		{"rotation restarts at the head after no endpoints", []rrStep{
			{[]int{0, 1, 2}, []int{2, 1}},
			{nil, nil},
			{[]int{0, 1, 2}, []int{2, 1, 0}},
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLab(t, Config{Mode: ModeIPVS})
			prefix := fmt.Sprintf("127.202.2%d.", i)
			bs := startBackends(t, prefix+"1", prefix+"2", prefix+"3", prefix+"4")
			ip := fmt.Sprintf("127.201.78.%d", i+1)
			vip := ip + ":18201"
			l.service("pricing", ip, labtest.ServicePort("grpc", 18201))
			for j, st := range tt.steps {
				var eps []discovery.Endpoint
				var ready []*backend
				for _, k := range st.ready {
					eps = append(eps, endpoint(bs[k], labtest.Ready))
					ready = append(ready, bs[k])
				}
				l.slice("pricing-a", "pricing", grpcPorts(bs), eps...)
				l.waitEndpoints(vip, ready...)
				if len(ready) == 0 {
					if _, err := dial(vip, ""); !errors.Is(err, syscall.ECONNREFUSED) {
						t.Fatalf("step %d: dial without endpoints: %v, want ECONNREFUSED", j, err)
					}
					continue
				}
				var want, got []string
				for _, k := range st.want {
					want = append(want, bs[k].name)
					name, err := onceFrom(vip, prefix+"100")
					if err != nil {
						t.Fatalf("step %d: connection %d: %v", j, len(got), err)
					}
					got = append(got, name)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Fatalf("step %d: pods of consecutive connections (-want +got):\n%s", j, diff)
				}
			}
		})
	}
}

// TestRoundRobinEvenUnderConcurrency: 30 connections from 3 concurrent
// clients over 3 pods give exactly 10 to each pod.
func TestRoundRobinEvenUnderConcurrency(t *testing.T) {
	l := newLab(t, Config{Mode: ModeIPVS})
	bs := startBackends(t, "127.202.40.1", "127.202.40.2", "127.202.40.3")
	const vip = "127.201.78.10:18202"
	l.service("pricing", "127.201.78.10", labtest.ServicePort("grpc", 18202))
	l.slice("pricing-a", "pricing", grpcPorts(bs), endpoint(bs[0], labtest.Ready), endpoint(bs[1], labtest.Ready), endpoint(bs[2], labtest.Ready))
	l.waitEndpoints(vip, bs...)

	counts := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for w := range 3 {
		wg.Go(func() {
			for range 10 {
				name, err := onceFrom(vip, fmt.Sprintf("127.202.40.%d", 101+w))
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				counts[name]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	want := map[string]int{"pod-1": 10, "pod-2": 10, "pod-3": 10}
	if diff := cmp.Diff(want, counts); diff != "" {
		t.Errorf("connections per pod (-want +got):\n%s", diff)
	}
}
