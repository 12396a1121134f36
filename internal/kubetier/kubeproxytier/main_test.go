package kubeproxytier

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/client-go/kubernetes"

	"github.com/pinlab/pinlab/internal/clusterdns"
	"github.com/pinlab/pinlab/internal/controlplane"
	"github.com/pinlab/pinlab/internal/coredns"
	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/netns"
	"github.com/pinlab/pinlab/internal/netns/netnstest"
	"github.com/pinlab/pinlab/internal/proxy"
)

// requireEnv, set to 1, makes the tests fail instead of skipping when the
// binaries or the kernel tools are missing.
const requireEnv = "PINLAB_REQUIRE_CONTROL_PLANE"

// The tier: the control plane, the current lab on it and the connections
// the lab's conntrack view reported. skip says why the tests skip.
var (
	cp     *controlplane.ControlPlane
	client kubernetes.Interface
	theLab *lab.Lab
	stateD string
	skip   string
	conns  connLog
	dnsLog queryLog
)

func TestMain(m *testing.M) {
	netnstest.Main(tier{m}, netns.PodPrefix, netns.ServicePrefix)
}

type tier struct{ m *testing.M }

// Run starts the control plane and an nftables lab, runs the tests, stops
// both and checks that no goroutine outlived them.
func (t tier) Run() int {
	bin, err := controlplane.BinDir()
	if err == nil {
		err = lab.DataplaneKubeProxyNFTables.Check()
	}
	if err != nil {
		if os.Getenv(requireEnv) == "1" {
			fmt.Fprintf(os.Stderr, "kubeproxytier: %v\n", err)
			return 1
		}
		skip = err.Error()
		return t.m.Run()
	}
	if err := startTier(bin); err != nil {
		fmt.Fprintf(os.Stderr, "kubeproxytier: %v\n", err)
		return 1
	}
	code := t.m.Run()
	if theLab != nil {
		if err := theLab.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "kubeproxytier: stopping the lab: %v\n", err)
			code = 1
		}
	}
	if err := cp.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "kubeproxytier: stopping the control plane: %v\n", err)
		code = 1
	}
	os.RemoveAll(stateD)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			return 1
		}
	}
	return code
}

// startTier starts the control plane from bin and an nftables lab on it.
func startTier(bin string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var err error
	if stateD, err = os.MkdirTemp("", "kubeproxytier-"); err != nil {
		return err
	}
	began := time.Now()
	cp, err = controlplane.Start(ctx, controlplane.Config{BinDir: bin, Dir: filepath.Join(stateD, "cp"), AdvertiseAddress: lab.NodeIP(netns.PodPrefix)})
	if err == nil {
		client, err = kubernetes.NewForConfig(cp.RESTConfig())
	}
	if err == nil {
		theLab, err = startLab(ctx, lab.DataplaneKubeProxyNFTables)
	}
	if err != nil {
		if cp != nil {
			cp.Close()
		}
		os.RemoveAll(stateD)
		return err
	}
	fmt.Printf("kubeproxytier: control plane and lab (real kube-proxy, nftables) up in %.1fs\n", time.Since(began).Seconds())
	return nil
}

// startLab starts a lab on the tier's control plane with dataplane dp.
// Its cluster DNS is the real CoreDNS (the lab's default settings), its
// answers recorded in dnsLog.
func startLab(ctx context.Context, dp lab.Dataplane) (*lab.Lab, error) {
	return lab.Start(ctx, lab.Config{
		Proxy: proxy.Config{OnConn: conns.add},
		DNS:   clusterdns.Config{QueryLog: dnsLog.add},
		API: &lab.API{Client: client, PodCIDR: netns.PodPrefix, ServiceCIDR: netns.ServicePrefix, Dataplane: dp,
			KubeProxy: kubeproxyConfig(dp), CoreDNS: coredns.Config{REST: cp.RESTConfig(), Dir: filepath.Join(stateD, "coredns-"+string(dp))}},
	})
}

// useLab skips t when the tier could not start, and makes the tier's lab
// one with dataplane dp (replacing the current one if it differs).
func useLab(t *testing.T, dp lab.Dataplane) {
	t.Helper()
	if skip != "" {
		t.Skip(skip)
	}
	if err := dp.Check(); err != nil {
		if os.Getenv(requireEnv) == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	if theLab.Dataplane() == dp {
		return
	}
	if err := theLab.Close(); err != nil {
		t.Fatalf("closing the %s lab: %v", theLab.Dataplane(), err)
	}
	theLab = nil
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, err := startLab(ctx, dp)
	if err != nil {
		t.Fatal(err)
	}
	theLab = l
}

// connLog records what the lab's OnConn reported: the kernel's conntrack
// entries of the Service range, as connections opened and closed.
type connLog struct {
	mu     sync.Mutex
	opened []proxy.Conn
	closed []proxy.Conn
}

func (c *connLog) add(conn proxy.Conn, ev proxy.ConnEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ev == proxy.ConnOpened {
		c.opened = append(c.opened, conn)
	} else {
		c.closed = append(c.closed, conn)
	}
}

// from returns the connections opened and closed from source address ip.
func (c *connLog) from(ip netip.Addr) (opened, closed []proxy.Conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, x := range c.opened {
		if x.Client.Addr() == ip {
			opened = append(opened, x)
		}
	}
	for _, x := range c.closed {
		if x.Client.Addr() == ip {
			closed = append(closed, x)
		}
	}
	return opened, closed
}

// queryLog records the query events the lab's cluster DNS reported (the
// report's DNS answers).
type queryLog struct {
	mu  sync.Mutex
	evs []clusterdns.QueryEvent
}

func (q *queryLog) add(ev clusterdns.QueryEvent) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.evs = append(q.evs, ev)
}

// from returns the events of answers sent to source address ip.
func (q *queryLog) from(ip netip.Addr) []clusterdns.QueryEvent {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []clusterdns.QueryEvent
	for _, ev := range q.evs {
		if ev.Client != nil {
			if ap, err := netip.ParseAddrPort(ev.Client.String()); err == nil && ap.Addr() == ip {
				out = append(out, ev)
			}
		}
	}
	return out
}
