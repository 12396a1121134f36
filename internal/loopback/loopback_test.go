package loopback

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestCheckAddr(t *testing.T) {
	tests := []struct {
		name    string
		addr    string
		wantErr bool
	}{
		{name: "pod address", addr: "127.244.0.3:8471"},
		{name: "vip", addr: "127.96.0.10:53"},
		{name: "localhost", addr: "127.0.0.1:80"},
		{name: "mapped loopback", addr: "[::ffff:127.0.0.1]:80"},
		{name: "private network", addr: "10.0.0.1:80", wantErr: true},
		{name: "public", addr: "192.0.2.53:53", wantErr: true},
		{name: "ipv6 loopback is outside 127/8", addr: "[::1]:80", wantErr: true},
		{name: "host name", addr: "localhost:80", wantErr: true},
		{name: "no port", addr: "127.0.0.1", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckAddr(tt.addr)
			if (err != nil) != tt.wantErr {
				t.Fatalf("CheckAddr(%q) = %v, want error %v", tt.addr, err, tt.wantErr)
			}
		})
	}
}

func TestDialerRefusesOutsideLoopback(t *testing.T) {
	d := Dialer{}
	if _, err := d.DialContext(context.Background(), "192.0.2.1:80"); err == nil {
		t.Fatal("DialContext to 192.0.2.1 succeeded, want refusal before any packet is sent")
	}
	d = Dialer{Source: netip.MustParseAddr("10.1.1.1")}
	if _, err := d.DialContext(context.Background(), "127.0.0.1:1"); err == nil {
		t.Fatal("DialContext from source 10.1.1.1 succeeded, want refusal")
	}
}

func TestListenAndDial(t *testing.T) {
	ln, err := Listen(context.Background(), "127.204.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan netip.AddrPort, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- netip.AddrPort{}
			return
		}
		done <- netip.MustParseAddrPort(c.RemoteAddr().String())
		c.Close()
	}()
	src := netip.MustParseAddr("127.204.0.9")
	c, err := Dialer{Source: src}.DialContext(context.Background(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if got := <-done; got.Addr() != src {
		t.Fatalf("server saw peer %v, want source %v", got, src)
	}
}

// TestDialUDP: a UDP socket from Source reaches a server inside Prefix;
// other networks and addresses outside it are refused.
func TestDialUDP(t *testing.T) {
	pc, err := ListenPacket(context.Background(), "127.204.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	src := netip.MustParseAddr("127.204.0.9")
	d := Dialer{Source: src}
	c, err := d.Dial(context.Background(), "udp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("q")); err != nil {
		t.Fatal(err)
	}
	pc.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 8)
	_, from, err := pc.ReadFrom(buf)
	if err != nil {
		t.Fatal(err)
	}
	if got := AddrPort(from).Addr(); got != src {
		t.Errorf("server saw peer %v, want source %v", got, src)
	}
	for _, tt := range []struct{ network, addr string }{{"udp", "192.0.2.1:53"}, {"ip4:icmp", "127.0.0.1"}, {"unix", "/tmp/x"}} {
		if c, err := d.Dial(context.Background(), tt.network, tt.addr); err == nil {
			c.Close()
			t.Errorf("Dial(%s, %s) succeeded, want refusal", tt.network, tt.addr)
		}
	}
}

func TestAllow(t *testing.T) {
	tests := []struct {
		name       string
		interfaces []string
		prefix     string
		wantErr    bool
	}{
		{name: "pod range in a lo-only namespace", interfaces: []string{"lo"}, prefix: "10.244.0.0/16"},
		{name: "service range", interfaces: []string{"lo"}, prefix: "10.96.0.0/16"},
		{name: "another interface exists", interfaces: []string{"lo", "eth0"}, prefix: "10.244.0.0/16", wantErr: true},
		{name: "pod networks' bridges and veths", interfaces: []string{"lo", "pinlabf400:bridge", "veth1:veth:pinlabf400"}, prefix: "10.244.0.0/16"},
		{name: "a veth on another bridge", interfaces: []string{"lo", "docker0:bridge", "veth1:veth:docker0"}, prefix: "10.244.0.0/16", wantErr: true},
		{name: "a bridge named like ours that is not a bridge", interfaces: []string{"lo", "pinlab0:dummy"}, prefix: "10.244.0.0/16", wantErr: true},
		{name: "a veth on no bridge", interfaces: []string{"lo", "veth1:veth"}, prefix: "10.244.0.0/16", wantErr: true},
		{name: "a veth not yet attached beside a pod bridge", interfaces: []string{"lo", "pinlabf400:bridge", "veth1:veth"}, prefix: "10.244.0.0/16"},
		{name: "public range", interfaces: []string{"lo"}, prefix: "192.0.2.0/24", wantErr: true},
		{name: "wider than a private range", interfaces: []string{"lo"}, prefix: "10.0.0.0/7", wantErr: true},
		{name: "ipv6", interfaces: []string{"lo"}, prefix: "fd00::/64", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			restore := allowed
			t.Cleanup(func() { allowed = restore })
			setInterfaces(t, tt.interfaces)
			p := netip.MustParsePrefix(tt.prefix)
			err := Allow(p)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Allow(%s) = %v, want error %v", p, err, tt.wantErr)
			}
			in := p.Addr().Next()
			if got := CheckIP(in); (got == nil) != (err == nil) {
				t.Fatalf("after Allow(%s) = %v: CheckIP(%s) = %v", p, err, in, got)
			}
		})
	}
}

func TestAllowedAddressesAreUsable(t *testing.T) {
	restore := allowed
	t.Cleanup(func() { allowed = restore })
	setInterfaces(t, []string{"lo"})
	if err := Allow(netip.MustParsePrefix("10.244.0.0/16")); err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{"10.244.0.2:8080", "127.0.0.1:80"} {
		if err := CheckAddr(addr); err != nil {
			t.Errorf("CheckAddr(%s) = %v, want nil", addr, err)
		}
	}
	err := CheckAddr("10.245.0.2:8080")
	if err == nil {
		t.Fatal("CheckAddr(10.245.0.2:8080) = nil, want refusal outside the allowed prefix")
	}
	if want := "pinlab only uses 127.0.0.0/8 and 10.244.0.0/16"; !strings.Contains(err.Error(), want) {
		t.Errorf("CheckAddr error %q does not say %q", err, want)
	}
}

// setInterfaces makes Allow see names as the namespace's interfaces for
// the rest of t.
func setInterfaces(t *testing.T, names []string) {
	t.Helper()
	orig := interfaces
	t.Cleanup(func() { interfaces = orig })
	interfaces = func() ([]iface, error) {
		var out []iface
		for _, n := range names {
			// "name:kind:master"
			f := append(strings.Split(n, ":"), "", "")
			out = append(out, iface{name: f[0], kind: f[1], master: f[2]})
		}
		return out, nil
	}
}
