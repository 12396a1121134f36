package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Rule is the programmed state of one VIP, the lab's equivalent of a
// KUBE-SVC chain in iptables-save output.
type Rule struct {
	VIP      netip.AddrPort
	Service  types.NamespacedName
	PortName string
	// Endpoints are the eligible endpoints a new connection picks from,
	// sorted by address: the ready ones, else the serving-and-terminating
	// ones. Empty means new connections are refused.
	Endpoints []Endpoint
	// Listening reports whether a listener is open on VIP. It is false while
	// Endpoints is empty, or if listening failed (logged).
	Listening bool
	// Affinity is the Service's ClientIP affinity timeout
	// (sessionAffinityConfig.clientIP.timeoutSeconds, default 10800 s);
	// zero means sessionAffinity None.
	Affinity time.Duration
}

// ErrStopped is returned by Wait and WaitListening once Run has returned.
var ErrStopped = errors.New("proxy: stopped")

// Rules returns the rules as of the last sync, sorted by VIP. Before Run has
// synced, and after it returns, there are none.
func (p *Proxier) Rules() []Rule {
	rules, _, _ := p.rules.current()
	return cloneRules(rules)
}

// Wait blocks until cond, called with the current rules after each sync,
// returns true, or until ctx ends or Run returns. cond may keep its argument.
func (p *Proxier) Wait(ctx context.Context, cond func([]Rule) bool) error {
	for {
		rules, changed, stopped := p.rules.current()
		if cond(cloneRules(rules)) {
			return nil
		}
		if stopped {
			return ErrStopped
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("proxy: waiting for rules: %w", context.Cause(ctx))
		case <-changed:
		}
	}
}

// WaitListening blocks until a listener is open on vip ("IP:port"), or until
// ctx ends or Run returns.
func (p *Proxier) WaitListening(ctx context.Context, vip string) error {
	ap, err := netip.ParseAddrPort(vip)
	if err != nil {
		return fmt.Errorf("proxy: bad VIP: %w", err)
	}
	return p.Wait(ctx, func(rules []Rule) bool {
		r, ok := findRule(rules, ap)
		return ok && r.Listening
	})
}

func findRule(rules []Rule, vip netip.AddrPort) (Rule, bool) {
	for _, r := range rules {
		if r.VIP == vip {
			return r, true
		}
	}
	return Rule{}, false
}

// snapshotRules builds the published rules from the Run goroutine's state.
func (p *Proxier) snapshotRules() []Rule {
	var rules []Rule
	for _, ports := range p.ports {
		for _, sp := range ports {
			t := sp.table.Load()
			rules = append(rules, Rule{VIP: sp.vip, Service: t.svc, PortName: t.port, Endpoints: t.eps, Listening: sp.ln != nil, Affinity: t.affinity})
		}
	}
	slices.SortFunc(rules, func(a, b Rule) int { return a.VIP.Compare(b.VIP) })
	return rules
}

func cloneRules(rules []Rule) []Rule {
	out := slices.Clone(rules)
	for i := range out {
		out[i].Endpoints = slices.Clone(out[i].Endpoints)
	}
	return out
}

// rulesBoard holds the published rules and a channel closed at the next
// publish, so waiters wake on change instead of polling.
type rulesBoard struct {
	mu      sync.Mutex
	rules   []Rule
	changed chan struct{}
	stopped bool
}

func newRulesBoard() rulesBoard { return rulesBoard{changed: make(chan struct{})} }

func (b *rulesBoard) current() ([]Rule, <-chan struct{}, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rules, b.changed, b.stopped
}

func (b *rulesBoard) publish(rules []Rule) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rules = rules
	close(b.changed)
	b.changed = make(chan struct{})
}

// stop publishes the empty rule set for good.
func (b *rulesBoard) stop() {
	b.publish(nil)
	b.mu.Lock()
	b.stopped = true
	b.mu.Unlock()
}
