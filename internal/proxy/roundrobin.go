package proxy

import (
	"net/netip"
	"slices"
	"strings"
)

// roundRobin is the IPVS rr scheduler of one virtual service
// (net/netfilter/ipvs/ip_vs_rr.c) fed by kube-proxy's ipvs syncEndpoint.
//
// ring is the kernel's svc->destinations list in list order and pos the
// index of the real server that took the last connection (svc->sched_data),
// -1 for the list head where ip_vs_rr_init_svc starts. A pick takes the
// entry after pos, wrapping at the end.
//
// The list follows the eligible endpoints lazily, at the next pick, as of
// the endpoints that pick sees:
//   - a removed endpoint leaves the list; if it held the position, the
//     position moves to the entry before it (ip_vs_rr_del_dest), so the
//     rotation goes on with its successor. kube-proxy first only sets such a
//     real server's weight to 0 while it has connections
//     (GracefulTerminationManager), which rr skips: the same order.
//   - new endpoints are added as kube-proxy does, in ascending "IP:port"
//     string order (sets.List in syncEndpoint), each at the head of the list
//     (list_add_rcu in __ip_vs_update_dest); so one batch rotates in
//     descending string order, and newcomers are reached when the rotation
//     next passes the head. A returning endpoint is new too: kube-proxy
//     deletes a weight-0 real server and adds it again
//     (MoveRSOutofGracefulDeleteList).
//
// An endpoint removed and back between two picks keeps its place, where
// kube-proxy (if it synced in between) would move it to the head.
type roundRobin struct {
	ring []Endpoint
	pos  int
	seen []Endpoint // the eps ring was last brought up to date with
}

func newRoundRobin() *roundRobin { return &roundRobin{pos: -1} }

func (r *roundRobin) pick(eps []Endpoint) Endpoint {
	if !sameSlice(eps, r.seen) {
		r.update(eps)
	}
	r.pos = (r.pos + 1) % len(r.ring)
	return r.ring[r.pos]
}

// reset empties the list: the VIP has no endpoint left, so kube-proxy has
// deleted (or zero-weighted, then deleted on return) every real server and
// the rotation starts again at the head.
func (r *roundRobin) reset() {
	r.ring, r.pos, r.seen = nil, -1, nil
}

// update makes ring hold exactly eps: removals first, then additions.
func (r *roundRobin) update(eps []Endpoint) {
	want := make(map[netip.AddrPort]Endpoint, len(eps))
	for _, e := range eps {
		want[e.Addr] = e
	}
	kept := make([]Endpoint, 0, len(eps))
	pos := r.pos
	for i, e := range r.ring {
		cur, ok := want[e.Addr]
		if !ok {
			if i <= r.pos {
				pos-- // the position moves to the previous entry
			}
			continue
		}
		kept = append(kept, cur) // the pod behind an address may change
		delete(want, e.Addr)
	}
	added := make([]Endpoint, 0, len(want))
	for _, e := range want {
		added = append(added, e)
	}
	// Added one by one in ascending string order, each at the head: the
	// batch ends up in descending order in front of the kept ones.
	slices.SortFunc(added, func(a, b Endpoint) int { return strings.Compare(b.Addr.String(), a.Addr.String()) })
	if pos >= 0 {
		pos += len(added)
	}
	r.ring, r.pos, r.seen = append(added, kept...), pos, eps
}
