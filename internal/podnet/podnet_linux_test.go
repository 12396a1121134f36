//go:build linux

package podnet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/pinlab/pinlab/internal/netns"
	"github.com/pinlab/pinlab/internal/netns/netnstest"
)

func TestMain(m *testing.M) {
	netnstest.Main(netnstest.LeakChecked(m), netns.PodPrefix, netns.ServicePrefix)
}

func newNetwork(t *testing.T, subnet string, local ...netip.Prefix) *Network {
	t.Helper()
	bin, err := BinDir()
	if err != nil {
		if os.Getenv(netnstest.RequireEnv) == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	n, err := New(Config{Bridge: "pinlab-test0", Subnet: netip.MustParsePrefix(subnet), Local: local, BinDir: bin, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
	})
	return n
}

// listeners returns the local addresses of the TCP sockets listening in
// the calling thread's namespace, as /proc/thread-self/net/tcp lists them.
func listeners() ([]string, error) {
	f, err := os.Open("/proc/thread-self/net/tcp")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 3 && fields[3] == "0A" { // TCP_LISTEN
			out = append(out, fields[1])
		}
	}
	return out, sc.Err()
}

// hexAddr is addr as /proc/net/tcp writes it (little-endian on amd64 and
// arm64).
func hexAddr(addr netip.AddrPort) string {
	a := addr.Addr().As4()
	return fmt.Sprintf("%02X%02X%02X%02X:%04X", a[3], a[2], a[1], a[0], addr.Port())
}

// TestSandboxes: two pods, each listening in its own namespace, are
// reachable from the node's namespace at their addresses; each sees its
// own listener and not the other's; a removed pod's address refuses or
// times out; Close takes the bridge away and gives the range back to lo.
func TestSandboxes(t *testing.T) {
	node := netip.MustParseAddr("10.244.255.254")
	n := newNetwork(t, "10.244.0.0/16", netip.MustParsePrefix("10.244.254.0/23"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := n.Add(ctx, "pod-a", netip.MustParseAddr("10.244.0.2"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.Add(ctx, "pod-b", netip.MustParseAddr("10.244.0.3"))
	if err != nil {
		t.Fatal(err)
	}
	addrs := map[*Sandbox]netip.AddrPort{}
	for _, sb := range []*Sandbox{a, b} {
		addrs[sb] = netip.AddrPortFrom(sb.IP, 8080)
		ln, err := sb.Listen(ctx, addrs[sb].String())
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Write([]byte(sb.ID))
				c.Close()
			}
		}()
	}
	for _, sb := range []*Sandbox{a, b} {
		c, err := net.DialTimeout("tcp", addrs[sb].String(), 5*time.Second)
		if err != nil {
			t.Fatalf("dial %s from the node: %v", sb.ID, err)
		}
		buf := make([]byte, 16)
		k, _ := c.Read(buf)
		c.Close()
		if string(buf[:k]) != sb.ID {
			t.Errorf("%v answered %q, want %q", addrs[sb], buf[:k], sb.ID)
		}
		var seen []string
		if err := sb.Do(func() (err error) { seen, err = listeners(); return err }); err != nil {
			t.Fatal(err)
		}
		other := addrs[a]
		if sb == a {
			other = addrs[b]
		}
		if !contains(seen, hexAddr(addrs[sb])) || contains(seen, hexAddr(other)) {
			t.Errorf("%s's /proc/net/tcp listens on %v; want %s and not %s", sb.ID, seen, hexAddr(addrs[sb]), hexAddr(other))
		}
	}
	// The node's own address stays local: a pod reaches it.
	nodeLn, err := net.Listen("tcp", netip.AddrPortFrom(node, 9000).String())
	if err != nil {
		t.Fatal(err)
	}
	defer nodeLn.Close()
	if err := a.Do(func() error {
		c, err := net.DialTimeout("tcp", nodeLn.Addr().String(), 5*time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}); err != nil {
		t.Errorf("pod a dialling the node at %v: %v", nodeLn.Addr(), err)
	}
	// So does an address of the node outside the range (a Service's),
	// through the pod's default route.
	svcLn, err := net.Listen("tcp", "10.96.0.5:0")
	if err != nil {
		t.Fatal(err)
	}
	defer svcLn.Close()
	if err := a.Do(func() error {
		c, err := net.DialTimeout("tcp", svcLn.Addr().String(), 5*time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}); err != nil {
		t.Errorf("pod a dialling a Service address of the node at %v: %v", svcLn.Addr(), err)
	}
	if err := n.Remove(ctx, a); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", addrs[a].String(), time.Second); err == nil {
		c.Close()
		t.Errorf("dial %v after its pod was removed: connected", addrs[a])
	}
	if err := a.Do(func() error { return nil }); !errors.Is(err, ErrGone) {
		t.Errorf("Do in a removed sandbox: %v, want ErrGone", err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := netlink.LinkByName("pinlab-test0"); err == nil {
		t.Error("the bridge is still there after Close")
	}
	ln, err := net.Listen("tcp", "10.244.7.7:0")
	if err != nil {
		t.Errorf("after Close the range is not local again: %v", err)
	} else {
		ln.Close()
	}
}

func TestAddRefuses(t *testing.T) {
	n := newNetwork(t, "10.244.16.0/20", netip.MustParsePrefix("10.244.30.0/23"))
	for ip, want := range map[string]string{
		"10.244.0.9":  "outside 10.244.16.0/20",
		"10.244.31.5": "in 10.244.30.0/23, which the node keeps for itself",
	} {
		if _, err := n.Add(context.Background(), "pod", netip.MustParseAddr(ip)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Add(%s): %v, want an error saying %q", ip, err, want)
		}
	}
}

func TestNewRefuses(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"long bridge name", Config{Bridge: "pinlab-too-long-a-name", Subnet: netip.MustParsePrefix("10.244.0.0/16"), BinDir: "/", StateDir: "/"}, "of at most 15 bytes"},
		{"bridge name without the prefix", Config{Bridge: "cni0", Subnet: netip.MustParsePrefix("10.244.0.0/16"), BinDir: "/", StateDir: "/"}, "want pinlab..."},
		{"IPv6", Config{Bridge: "pinlab0", Subnet: netip.MustParsePrefix("fd00::/64"), BinDir: "/", StateDir: "/"}, "want an IPv4 range"},
		{"no plugins", Config{Bridge: "pinlab0", Subnet: netip.MustParsePrefix("10.244.0.0/16"), BinDir: "/", StateDir: "/"}, "has no executable bridge"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := New(c.cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("New: %v, want an error saying %q", err, c.want)
			}
			if c.want == "has no executable bridge" && !errors.Is(err, ErrNotBuilt) {
				t.Errorf("New: %v does not wrap ErrNotBuilt", err)
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestConcurrentAdds: pods are added and removed concurrently, as the
// kubelet's workers do (run with -race: libcni's lazy default exec raced).
func TestConcurrentAdds(t *testing.T) {
	n := newNetwork(t, "10.244.0.0/16", netip.MustParsePrefix("10.244.254.0/23"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			sb, err := n.Add(ctx, fmt.Sprintf("pod-%d", i), netip.AddrFrom4([4]byte{10, 244, 1, byte(2 + i)}))
			if err != nil {
				t.Error(err)
				return
			}
			if err := n.Remove(ctx, sb); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}
