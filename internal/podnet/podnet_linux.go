//go:build linux

package podnet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/pinlab/pinlab/internal/loopback"
	labns "github.com/pinlab/pinlab/internal/netns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// cniVersion is the CNI spec version of the network configurations.
const cniVersion = "1.0.0"

// ifName is the pod's interface, as the kubelet names it.
const ifName = "eth0"

// Network is a node's pod network: a bridge and the namespaces of its pods.
// Its methods are safe for concurrent use.
type Network struct {
	cfg      Config
	cni      *libcni.CNIConfig
	pods, lo *libcni.NetworkConfigList

	mu        sync.Mutex
	routed    bool // Subnet is routed to the bridge in the local table
	replaced  bool // that route replaced a local route for Subnet on lo
	sandboxes map[string]*Sandbox
}

// New checks cfg and the plugins and returns the node's network; the
// bridge appears with the first pod. It changes nothing yet, and refuses
// outside a private namespace package netns made.
func New(cfg Config) (*Network, error) {
	switch {
	case !strings.HasPrefix(cfg.Bridge, loopback.PodBridgePrefix) || len(cfg.Bridge) > 15:
		// The prefix is what tells package loopback that the namespace
		// is still sealed with the bridge in it.
		return nil, fmt.Errorf("podnet: bridge name %q: want %s... of at most 15 bytes", cfg.Bridge, loopback.PodBridgePrefix)
	case !cfg.Subnet.IsValid() || !cfg.Subnet.Addr().Is4() || cfg.Subnet.Bits() > 30:
		return nil, fmt.Errorf("podnet: subnet %v: want an IPv4 range of at least 4 addresses", cfg.Subnet)
	case cfg.StateDir == "" || cfg.BinDir == "":
		return nil, errors.New("podnet: BinDir and StateDir are required")
	}
	if p := missing(cfg.BinDir); p != "" {
		return nil, fmt.Errorf("%w: %s has no executable %s", ErrNotBuilt, cfg.BinDir, p)
	}
	if !labns.Inside() {
		return nil, errors.New("podnet: refusing to make a pod network outside a private namespace pinlab made (package netns)")
	}
	cfg.Subnet = cfg.Subnet.Masked()
	pods, err := libcni.NetworkConfFromBytes(podsConf(cfg))
	if err != nil {
		return nil, fmt.Errorf("podnet: %w", err)
	}
	lo, err := libcni.NetworkConfFromBytes([]byte(`{"cniVersion":"` + cniVersion + `","name":"cni-loopback","plugins":[{"type":"loopback"}]}`))
	if err != nil {
		return nil, fmt.Errorf("podnet: %w", err)
	}
	return &Network{
		cfg: cfg,
		// An explicit exec: libcni makes its default lazily, unguarded,
		// and Add runs concurrently for different pods.
		cni: libcni.NewCNIConfigWithCacheDir([]string{cfg.BinDir}, filepath.Join(cfg.StateDir, "cache"),
			&invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}, PluginDecoder: version.PluginDecoder{}}),
		pods:      pods,
		lo:        lo,
		sandboxes: map[string]*Sandbox{},
	}, nil
}

// podsConf is the pods' network: bridge (the gateway on it and each pod's
// default route through it, so that a pod reaches the node's addresses
// outside Subnet, the Service range's among them, as a pod on a real
// node's CNI does; hairpin on so that a pod reaches itself through a
// Service) with host-local handing out the address the runtime asks for
// (CNI_ARGS IP). The node's namespace has no route out, so neither has a
// pod.
func podsConf(cfg Config) []byte {
	conf := map[string]any{
		"cniVersion": cniVersion,
		"name":       "pinlab-pods",
		"plugins": []any{map[string]any{
			"type":             "bridge",
			"bridge":           cfg.Bridge,
			"isGateway":        true,
			"isDefaultGateway": true,
			"hairpinMode":      true,
			"ipam": map[string]any{
				"type":    "host-local",
				"ranges":  [][]map[string]string{{{"subnet": cfg.Subnet.String()}}},
				"dataDir": filepath.Join(cfg.StateDir, "ipam"),
			},
		}},
	}
	b, _ := json.Marshal(conf)
	return b
}

// Sandbox is one pod's network namespace with its address.
type Sandbox struct {
	// ID names the sandbox to the plugins (the pod's UID).
	ID string
	// IP is the pod's address on eth0.
	IP netip.Addr
	rt *libcni.RuntimeConf

	mu     sync.RWMutex // Do holds it for reading while inside; close for writing
	ns     netns.NsHandle
	closed bool
}

// ErrGone is returned by Do once the sandbox was removed.
var ErrGone = errors.New("podnet: the pod's network namespace is gone")

// close closes the namespace's descriptor once no Do is inside it.
func (s *Sandbox) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		s.ns.Close()
	}
}

// Add makes pod id's namespace and sets it up: lo up, eth0 with ip (inside
// Subnet, outside Config.Local) on the bridge, the default route through
// the gateway. On error the pod's namespace and veth are gone (the bridge and the
// node's routes stay, for the next pod). ctx bounds the plugins' runs.
func (n *Network) Add(ctx context.Context, id string, ip netip.Addr) (*Sandbox, error) {
	if !n.cfg.Subnet.Contains(ip) {
		return nil, fmt.Errorf("podnet: pod address %v is outside %v", ip, n.cfg.Subnet)
	}
	for _, p := range n.cfg.Local {
		if p.Contains(ip) {
			return nil, fmt.Errorf("podnet: pod address %v is in %v, which the node keeps for itself", ip, p)
		}
	}
	ns, err := newNS()
	if err != nil {
		return nil, err
	}
	sb := &Sandbox{ID: id, IP: ip, ns: ns, rt: &libcni.RuntimeConf{
		ContainerID: id,
		NetNS:       fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), int(ns)),
		IfName:      ifName,
		Args:        [][2]string{{"IgnoreUnknown", "1"}, {"IP", ip.String()}},
	}}
	if _, err := n.cni.AddNetworkList(ctx, n.lo, sb.rt); err != nil {
		ns.Close()
		return nil, fmt.Errorf("podnet: pod %s: loopback: %w", id, err)
	}
	if _, err := n.cni.AddNetworkList(ctx, n.pods, sb.rt); err != nil {
		n.cni.DelNetworkList(context.WithoutCancel(ctx), n.pods, sb.rt)
		ns.Close()
		return nil, fmt.Errorf("podnet: pod %s: bridge: %w", id, err)
	}
	if err := n.route(); err != nil {
		n.cni.DelNetworkList(context.WithoutCancel(ctx), n.pods, sb.rt)
		ns.Close()
		return nil, err
	}
	n.mu.Lock()
	n.sandboxes[id] = sb
	n.mu.Unlock()
	return sb, nil
}

// Remove tears pod sb's network down (CNI DEL: its veth and address go)
// and closes its namespace; its sockets then have no network left.
func (n *Network) Remove(ctx context.Context, sb *Sandbox) error {
	n.mu.Lock()
	_, ok := n.sandboxes[sb.ID]
	delete(n.sandboxes, sb.ID)
	n.mu.Unlock()
	if !ok {
		return nil
	}
	err := n.cni.DelNetworkList(ctx, n.pods, sb.rt)
	sb.close()
	if err != nil {
		return fmt.Errorf("podnet: pod %s: %w", sb.ID, err)
	}
	return nil
}

// Close removes every sandbox left, then the bridge, and gives Subnet
// back to lo if the bridge took it from there.
func (n *Network) Close() error {
	n.mu.Lock()
	left := make([]*Sandbox, 0, len(n.sandboxes))
	for _, sb := range n.sandboxes {
		left = append(left, sb)
	}
	n.mu.Unlock()
	var errs []error
	for _, sb := range left {
		errs = append(errs, n.Remove(context.Background(), sb))
	}
	if link, err := netlink.LinkByName(n.cfg.Bridge); err == nil {
		errs = append(errs, netlink.LinkDel(link))
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.replaced {
		lo, err := netlink.LinkByName("lo")
		if err == nil {
			err = netlink.RouteReplace(&netlink.Route{LinkIndex: lo.Attrs().Index, Dst: ipNet(n.cfg.Subnet),
				Table: unix.RT_TABLE_LOCAL, Type: unix.RTN_LOCAL, Scope: netlink.SCOPE_HOST})
		}
		errs = append(errs, err)
	}
	n.routed, n.replaced = false, false
	return errors.Join(errs...)
}

// route sends Subnet to the bridge once it exists: the addresses of
// Config.Local become local on lo (/32), then Subnet is routed to the
// bridge in the local table too, where a local route for it on lo (the
// lab's namespace makes the pod range local) would otherwise win over the
// bridge's route in the main table.
func (n *Network) route() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.routed {
		return nil
	}
	br, err := netlink.LinkByName(n.cfg.Bridge)
	if err != nil {
		return fmt.Errorf("podnet: bridge %s: %w", n.cfg.Bridge, err)
	}
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("podnet: lo: %w", err)
	}
	for _, p := range n.cfg.Local {
		if err := makeLocal(lo, p); err != nil {
			return err
		}
	}
	existing, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_LOCAL, Dst: ipNet(n.cfg.Subnet)},
		netlink.RT_FILTER_TABLE|netlink.RT_FILTER_DST)
	if err != nil {
		return fmt.Errorf("podnet: routes: %w", err)
	}
	for _, r := range existing {
		if r.Type == unix.RTN_LOCAL && r.LinkIndex == lo.Attrs().Index {
			n.replaced = true
		}
	}
	if err := netlink.RouteReplace(&netlink.Route{LinkIndex: br.Attrs().Index, Dst: ipNet(n.cfg.Subnet),
		Table: unix.RT_TABLE_LOCAL, Type: unix.RTN_UNICAST, Scope: netlink.SCOPE_LINK}); err != nil {
		return fmt.Errorf("podnet: routing %v to %s: %w", n.cfg.Subnet, n.cfg.Bridge, err)
	}
	n.routed = true
	return nil
}

// Local makes ip, an address of Subnet that no pod has (a load client's,
// a proxy's), local to the node as Config.Local's are. It stays so until
// the namespace goes: do not give ip to a pod later.
func (n *Network) Local(ip netip.Addr) error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("podnet: lo: %w", err)
	}
	return makeLocal(lo, netip.PrefixFrom(ip, ip.BitLen()))
}

// makeLocal routes p to lo in the local table, as `ip route replace local
// P dev lo` does.
func makeLocal(lo netlink.Link, p netip.Prefix) error {
	if err := netlink.RouteReplace(&netlink.Route{LinkIndex: lo.Attrs().Index, Dst: ipNet(p.Masked()),
		Table: unix.RT_TABLE_LOCAL, Type: unix.RTN_LOCAL, Scope: netlink.SCOPE_HOST}); err != nil {
		return fmt.Errorf("podnet: making %v local: %w", p, err)
	}
	return nil
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// newNS makes a network namespace and returns a descriptor holding it. It
// works on a goroutine of its own, whose OS thread is unlocked only once
// it is back in the node's namespace: on any failure after the unshare the
// thread ends with the goroutine, so no other goroutine runs in the new
// namespace.
func newNS() (netns.NsHandle, error) {
	type result struct {
		ns  netns.NsHandle
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread() // nothing changed yet
			done <- result{err: fmt.Errorf("podnet: %w", err)}
			return
		}
		defer orig.Close()
		ns, err := netns.New()
		if err != nil {
			done <- result{err: fmt.Errorf("podnet: new network namespace: %w", err)} // locked: the thread may be in it
			return
		}
		if err := netns.Set(orig); err != nil {
			ns.Close()
			done <- result{err: fmt.Errorf("podnet: back to the node's namespace: %w", err)} // locked
			return
		}
		runtime.UnlockOSThread()
		done <- result{ns: ns}
	}()
	r := <-done
	return r.ns, r.err
}

// Do runs f on an OS thread inside the pod's namespace: sockets it opens
// and /proc/thread-self/net it reads are the pod's. f must not start
// goroutines that expect the namespace (they run on other threads). Once
// the sandbox was removed it returns ErrGone; removal waits for a Do
// inside.
func (s *Sandbox) Do(f func() error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return fmt.Errorf("%w (pod %s)", ErrGone, s.ID)
	}
	errc := make(chan error, 1)
	go func() {
		// A fresh goroutine whose thread dies with it if it cannot get
		// back: another goroutine never inherits the pod's namespace.
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- fmt.Errorf("podnet: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(s.ns); err != nil {
			errc <- fmt.Errorf("podnet: entering pod %s's namespace: %w", s.ID, err)
			return
		}
		ferr := f()
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("podnet: leaving pod %s's namespace: %w", s.ID, err))
			return // still locked: the thread ends with the goroutine
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Listen opens a TCP listener on addr inside the pod's namespace.
func (s *Sandbox) Listen(ctx context.Context, addr string) (net.Listener, error) {
	var ln net.Listener
	err := s.Do(func() error {
		var err error
		ln, err = (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
		return err
	})
	return ln, err
}
