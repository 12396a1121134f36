package proxy

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/pinlab/pinlab/internal/endpoints"
	"github.com/pinlab/pinlab/internal/loopback"
)

// table is the immutable rule set of one Service port, the emulated KUBE-SVC
// chain. The accept path reads it with one atomic load; syncs replace it.
type table struct {
	svc      types.NamespacedName
	port     string
	eps      []Endpoint    // eligible endpoints, sorted; empty means reject
	affinity time.Duration // ClientIP affinity timeout; 0: sessionAffinity None
}

// servicePort is the dataplane of one VIP (ClusterIP:port).
type servicePort struct {
	vip    netip.AddrPort
	table  atomic.Pointer[table]
	picker picker // used by the running accept loop, else by the Run goroutine
	sticky sticky // ClientIP affinity state; safe for concurrent use

	// Owned by the Run goroutine.
	ln   net.Listener  // nil while refusing
	done chan struct{} // closed when ln's accept loop returns
}

// serviceKey returns the Service that obj (a Service, an EndpointSlice, or a
// deletion tombstone of either) belongs to.
func serviceKey(obj any) (types.NamespacedName, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	switch o := obj.(type) {
	case *v1.Service:
		return types.NamespacedName{Namespace: o.Namespace, Name: o.Name}, true
	case *discovery.EndpointSlice:
		if name := o.Labels[discovery.LabelServiceName]; name != "" {
			return types.NamespacedName{Namespace: o.Namespace, Name: name}, true
		}
	}
	return types.NamespacedName{}, false
}

// sync applies every pending Service change, then publishes the new rules.
func (p *Proxier) sync(ctx context.Context) {
	for key := range p.queue.take() {
		p.syncService(ctx, key)
	}
	p.rules.publish(p.snapshotRules())
}

// syncService makes key's VIPs match its Service and EndpointSlices: it
// removes VIPs that are gone, creates new ones, and swaps in each port's new
// endpoint table, opening or closing the listener as endpoints come and go.
func (p *Proxier) syncService(ctx context.Context, key types.NamespacedName) {
	want := p.desired(key)
	have := p.ports[key]
	for vip, sp := range have {
		if _, ok := want[vip]; !ok {
			p.release(key, sp)
			delete(have, vip)
		}
	}
	delete(p.conflicted, key)
	for vip, tab := range want {
		sp := have[vip]
		if sp == nil {
			if sp = p.claim(key, vip); sp == nil {
				continue
			}
			if have == nil {
				have = map[netip.AddrPort]*servicePort{}
			}
			have[vip] = sp
		}
		p.apply(ctx, sp, tab)
	}
	if len(have) == 0 {
		delete(p.ports, key)
	} else {
		p.ports[key] = have
	}
}

// desired computes the table of each of key's VIPs from the listers: none if
// the Service is gone, headless, ExternalName or outside the lab's network.
func (p *Proxier) desired(key types.NamespacedName) map[netip.AddrPort]*table {
	svc, err := p.services.Services(key.Namespace).Get(key.Name)
	if err != nil {
		return nil // deleted
	}
	ip, ok := clusterIPv4(svc)
	if !ok {
		return nil
	}
	if err := loopback.CheckIP(ip); err != nil {
		p.warnOnce(key.String()+"/"+ip.String(), "Service skipped: ClusterIP outside the lab network; no traffic is proxied",
			"service", key, "clusterIP", ip)
		return nil
	}
	sel := labels.SelectorFromSet(labels.Set{discovery.LabelServiceName: key.Name})
	slices, _ := p.slices.EndpointSlices(key.Namespace).List(sel)
	affinity := p.affinityTimeout(key, svc)
	want := map[netip.AddrPort]*table{}
	for _, port := range svc.Spec.Ports {
		if !endpoints.IsTCP(port.Protocol) || port.Port <= 0 || port.Port > 65535 {
			continue
		}
		vip := netip.AddrPortFrom(ip, uint16(port.Port))
		// kube-proxy does not watch slices labelled headless (Filter's default).
		eps, outside := endpoints.Filter{Port: port.Name}.Endpoints(slices)
		for _, ep := range outside {
			p.warnOnce(key.String()+"/"+ep.String(), "endpoint skipped: outside the lab network", "service", key, "endpoint", ep)
		}
		want[vip] = &table{svc: key, port: port.Name, eps: backends(endpoints.Eligible(eps)), affinity: affinity}
	}
	return want
}

// claim creates the servicePort for vip on behalf of key, or returns nil if
// another Service holds vip; key is then retried when a VIP is released.
func (p *Proxier) claim(key types.NamespacedName, vip netip.AddrPort) *servicePort {
	if other, taken := p.owner[vip]; taken && other != key {
		p.warnOnce("conflict/"+key.String()+"/"+vip.String(), "VIP already used by another Service; skipped",
			"service", key, "vip", vip, "owner", other)
		p.conflicted[key] = true
		return nil
	}
	p.owner[vip] = key
	return &servicePort{vip: vip, picker: newPicker(p.mode, p.seed, vip), sticky: newSticky(p.mode)}
}

// release removes sp and lets Services that wanted a VIP in use retry.
func (p *Proxier) release(key types.NamespacedName, sp *servicePort) {
	sp.table.Store(&table{svc: key})
	sp.closeListener()
	delete(p.owner, sp.vip)
	for k := range p.conflicted {
		p.queue.add(k)
	}
}

// apply installs tab on sp. The table is stored before a listener opens and
// before one closes, so a connection accepted in between sees the new rules
// (and is reset if there are no endpoints). Affinity entries the new rules
// would lose are forgotten; without endpoints an IPVS rotation restarts.
func (p *Proxier) apply(ctx context.Context, sp *servicePort, tab *table) {
	sp.table.Store(tab)
	sp.sticky.update(tab)
	switch {
	case len(tab.eps) > 0 && sp.ln == nil:
		p.openListener(ctx, sp)
	case len(tab.eps) == 0 && sp.ln != nil:
		sp.closeListener()
	}
	if r, ok := sp.picker.(rotationResetter); ok && len(tab.eps) == 0 {
		r.reset() // no accept loop runs: the listener is closed
	}
}

// openListener starts accepting on sp's VIP. A failure is logged and retried
// at the Service's next sync.
func (p *Proxier) openListener(ctx context.Context, sp *servicePort) {
	ln, err := loopback.Listen(ctx, sp.vip.String())
	if err != nil {
		p.log.Warn("cannot listen on VIP", "vip", sp.vip, "err", err)
		return
	}
	done := make(chan struct{})
	sp.ln, sp.done = ln, done
	p.wg.Go(func() {
		defer close(done)
		p.serve(ctx, sp, ln)
	})
}

// closeListener stops accepting on sp's VIP, so the kernel refuses new
// connects, and waits for the accept loop. Established relays continue.
func (sp *servicePort) closeListener() {
	if sp.ln == nil {
		return
	}
	sp.ln.Close()
	<-sp.done
	sp.ln, sp.done = nil, nil
}

func (p *Proxier) warnOnce(id, msg string, args ...any) {
	if !p.warned[id] {
		p.warned[id] = true
		p.log.Warn(msg, args...)
	}
}
