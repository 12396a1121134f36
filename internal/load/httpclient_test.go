package load

import (
	"context"
	"math"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/load/dnstest"
	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/podtest"
	"github.com/pinlab/pinlab/internal/webapi"
	"google.golang.org/grpc/codes"
)

func TestClientConfigErrors(t *testing.T) {
	src := netip.MustParseAddr("127.206.1.1")
	tests := []struct {
		name string
		cfg  HTTPConfig
	}{
		{name: "zero rate", cfg: HTTPConfig{Source: src, URL: "http://127.0.0.1:1"}},
		{name: "NaN rate", cfg: HTTPConfig{Source: src, URL: "http://127.0.0.1:1", Rate: math.NaN()}},
		{name: "infinite rate", cfg: HTTPConfig{Source: src, URL: "http://127.0.0.1:1", Rate: math.Inf(1)}},
		{name: "rate above MaxWebRate", cfg: HTTPConfig{Source: src, URL: "http://127.0.0.1:1", Rate: MaxWebRate + 1}},
		{name: "no source", cfg: HTTPConfig{URL: "http://127.0.0.1:1", Rate: 1}},
		{name: "source outside loopback", cfg: HTTPConfig{Source: netip.MustParseAddr("10.0.0.1"), URL: "http://127.0.0.1:1", Rate: 1}},
		{name: "target outside loopback", cfg: HTTPConfig{Source: src, URL: "http://192.0.2.1:80", Rate: 1}},
		{name: "https", cfg: HTTPConfig{Source: src, URL: "https://127.0.0.1:1", Rate: 1}},
		{name: "no port", cfg: HTTPConfig{Source: src, URL: "http://127.0.0.1", Rate: 1}},
		{name: "path in url", cfg: HTTPConfig{Source: src, URL: "http://127.0.0.1:1/v1", Rate: 1}},
		{name: "not a url", cfg: HTTPConfig{Source: src, URL: "http://[::1", Rate: 1}},
		{name: "name without dns", cfg: HTTPConfig{Source: src, URL: "http://pricing.shop:80", Rate: 1}},
		{name: "dns outside loopback", cfg: HTTPConfig{Source: src, URL: "http://pricing.shop:80", DNS: "192.0.2.53:53", Rate: 1}},
		{name: "dns without port", cfg: HTTPConfig{Source: src, URL: "http://pricing.shop:80", DNS: "127.0.0.1", Rate: 1}},
		{name: "negative idle conns", cfg: HTTPConfig{Source: src, URL: "http://127.0.0.1:1", Rate: 1, MaxIdleConnsPerHost: -1}},
		{name: "negative max conns", cfg: HTTPConfig{Source: src, URL: "http://127.0.0.1:1", Rate: 1, MaxConnsPerHost: -1}},
		{name: "relative path", cfg: HTTPConfig{Source: src, URL: "http://127.0.0.1:1", Rate: 1, Path: "v1/price"}},
	}
	for _, tt := range tests {
		t.Run("http/"+tt.name, func(t *testing.T) {
			if c, err := NewHTTPClient(tt.cfg); err == nil {
				c.Close()
				t.Fatal("NewHTTPClient succeeded, want an error")
			}
		})
		if tt.cfg.Path != "" || tt.cfg.MaxIdleConnsPerHost != 0 || tt.cfg.MaxConnsPerHost != 0 {
			continue
		}
		t.Run("ws/"+tt.name, func(t *testing.T) {
			cfg := WSConfig{Name: tt.cfg.Name, Source: tt.cfg.Source, URL: tt.cfg.URL, DNS: tt.cfg.DNS, Rate: tt.cfg.Rate}
			if c, err := NewWSClient(cfg); err == nil {
				c.Close()
				t.Fatal("NewWSClient succeeded, want an error")
			}
		})
	}
}

// TestHTTPClientCodes: statuses reach the client's Observer as codes, the
// server's too, and failures without a status get a code as well.
func TestHTTPClientCodes(t *testing.T) {
	rec := &podtest.Recorder{}
	s := podtest.StartWeb(t, "127.244.0.31", 0, pod.WebConfig{Observer: rec})
	tests := []struct {
		name      string
		url       string
		path      string
		want      codes.Code
		wantRoute string // on the server; "" when it sees nothing
		wantPod   string
	}{
		{name: "ok", path: "/v1/price?sku=a", want: codes.OK, wantRoute: webapi.RoutePrice, wantPod: "pod-127.244.0.31"},
		{name: "400 missing sku", path: "/v1/price", want: codes.InvalidArgument, wantRoute: webapi.RoutePrice},
		{name: "404 unknown path", path: "/nope", want: codes.NotFound, wantRoute: webapi.RouteUnmatched},
		{name: "426 watch without upgrade", path: "/v1/watch", want: codes.FailedPrecondition, wantRoute: webapi.RouteWatch},
		{name: "nothing listening", url: "http://127.244.0.32:1", path: "/v1/price?sku=a", want: codes.Unavailable},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.url == "" {
				tt.url = "http://" + s.Addr().String()
			}
			var obs collector
			c, err := NewHTTPClient(HTTPConfig{Name: tt.name, Source: netip.AddrFrom4([4]byte{127, 206, 2, byte(i + 1)}), URL: tt.url, Path: tt.path, Rate: 100, Observer: &obs})
			if err != nil {
				t.Fatal(err)
			}
			before := rec.Count(tt.wantRoute, tt.want)
			labtest.RunFor(c.Run, 200*time.Millisecond)
			tl := count(obs.snapshot())
			got, pods := tl.codes, tl.pods
			n := got[tt.want]
			if n == 0 || len(got) != 1 {
				t.Fatalf("codes %v, want only %v", got, tt.want)
			}
			if tt.wantPod != "" && pods[tt.wantPod] != n {
				t.Errorf("replies by pod %v, want all %d from %s", pods, n, tt.wantPod)
			}
			if tt.wantRoute != "" {
				if served := rec.Count(tt.wantRoute, tt.want) - before; served != n {
					t.Errorf("server observer counted %d %v on %q, client %d", served, tt.want, tt.wantRoute, n)
				}
			}
			if o, cl := obs.conns(); o != cl {
				t.Errorf("client observer: %d connections opened, %d closed after Run; want all closed", o, cl)
			}
		})
	}
}

func TestHTTPClientRestart(t *testing.T) {
	s := podtest.StartWeb(t, "127.244.0.33", 0, pod.WebConfig{})
	var obs collector
	c, err := NewHTTPClient(HTTPConfig{Source: netip.MustParseAddr("127.206.3.1"), URL: "http://" + s.Addr().String(), Rate: 200, Observer: &obs})
	if err != nil {
		t.Fatal(err)
	}
	stop := labtest.Run(t, c.Run)
	labtest.WaitFor(t, 10*time.Second, "first connection", func() bool { o, _ := obs.conns(); return o >= 1 })
	opened, _ := obs.conns()
	if err := c.Restart(); err != nil {
		t.Fatal(err)
	}
	labtest.WaitFor(t, 10*time.Second, "a connection from the new pool, and the old one closed", func() bool { o, cl := obs.conns(); return o > opened && cl >= opened })
	stop()
	if got := count(obs.snapshot()).codes; len(got) != 1 || got[codes.OK] == 0 {
		t.Errorf("codes %v across a restart; want only OK", got)
	}
	if err := c.Restart(); err == nil {
		t.Error("Restart after Run returned succeeded, want an error")
	}
}

// TestDNSResolvesEveryNewConnection: with a DNS name whose A records are
// four pods, every new connection resolves again (Go's resolver keeps no
// cache), so a client without keep-alives reaches all four pods, and a
// keep-alive client with one connection resolves once.
func TestDNSResolvesEveryNewConnection(t *testing.T) {
	pods := startPodsOnOnePort(t, "127.244.0.", 41, 4, pod.WebConfig{})
	ips, port := podIPs(pods), strconv.Itoa(int(pods[0].Addr().Port()))
	tests := []struct {
		name          string
		noKeepAlive   bool
		maxConns      int
		wantPods      int
		wantOneLookup bool
	}{
		{name: "no keep-alive", noKeepAlive: true, wantPods: 4},
		{name: "one keep-alive connection", maxConns: 1, wantPods: 1, wantOneLookup: true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := dnstest.StartWith(t, dnstest.Options{IP: netip.MustParseAddr("127.206.4.53"), Rotate: true})
			d.Set("pricing.shop.svc.cluster.local", ips...)
			var obs collector
			c, err := NewHTTPClient(HTTPConfig{
				Source: netip.AddrFrom4([4]byte{127, 206, 4, byte(i + 1)}), DNS: d.Addr().String(),
				URL:  "http://pricing.shop.svc.cluster.local.:" + port,
				Rate: 100, DisableKeepAlives: tt.noKeepAlive, MaxConnsPerHost: tt.maxConns, Observer: &obs,
			})
			if err != nil {
				t.Fatal(err)
			}
			labtest.RunFor(c.Run, 300*time.Millisecond)
			tl := count(obs.snapshot())
			got, pods := tl.codes, tl.pods
			opened, _ := obs.conns()
			t.Logf("%d requests, %d connections, %d DNS queries, per pod %v", got[codes.OK], opened, d.Queries("pricing.shop.svc.cluster.local"), pods)
			if len(got) != 1 || got[codes.OK] == 0 {
				t.Fatalf("codes %v, want only OK", got)
			}
			if len(pods) != tt.wantPods {
				t.Errorf("reached %d pods (%v), want %d", len(pods), pods, tt.wantPods)
			}
			// Go's resolver shares one query among concurrent lookups of
			// a name (singleflight), so two dials at once may make one
			// query; with a cache there would be one query in all.
			if q := d.Queries("pricing.shop.svc.cluster.local"); q > opened || (tt.wantOneLookup && q != 1) || (!tt.wantOneLookup && q <= opened/2) {
				t.Errorf("%d DNS queries for %d connections; want one per connection", q, opened)
			}
		})
	}
}

// startPodsOnOnePort starts n servers on prefix+first... sharing one port,
// as a Deployment's pods do.
func startPodsOnOnePort(t *testing.T, prefix string, first, n int, cfg pod.WebConfig) []*pod.WebServer {
	t.Helper()
	for attempt := 0; attempt < 5; attempt++ {
		var servers []*pod.WebServer
		var port uint16
		for k := range n {
			ip := netip.MustParseAddr(prefix + strconv.Itoa(first+k))
			c := cfg
			c.Name, c.Namespace, c.Addr = "pod-"+ip.String(), "shop", netip.AddrPortFrom(ip, port)
			s := pod.NewWebServer(c)
			if err := s.Start(context.Background()); err != nil {
				break
			}
			servers = append(servers, s)
			port = s.Addr().Port()
		}
		if len(servers) == n {
			for _, s := range servers {
				t.Cleanup(s.Kill)
			}
			return servers
		}
		for _, s := range servers {
			s.Kill()
		}
	}
	t.Fatal("no port free on all pod IPs after 5 attempts")
	return nil
}

func podIPs(servers []*pod.WebServer) (ips []netip.Addr) {
	for _, s := range servers {
		ips = append(ips, s.Addr().Addr())
	}
	return ips
}
