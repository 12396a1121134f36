package loadpod

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"

	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/load"
	"github.com/pinlab/pinlab/internal/load/dnstest"
	"github.com/pinlab/pinlab/internal/loadfeed"
	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/podtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testToken is a token long enough for the events endpoint.
const testToken = "a-test-token-0123456789"

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// TestParse: what the flags and the environment give.
func TestParse(t *testing.T) {
	base := []string{"load", "--target", "dns:///pricing.shop.svc.cluster.local:8471", "--rate", "50", "--duration", "60s"}
	want := func(mod func(*Options)) Options {
		o := Options{
			Client: load.Config{Name: "order-0", Target: "dns:///pricing.shop.svc.cluster.local:8471", Policy: "pick_first", Rate: 50,
				Timeout: time.Second, Resolver: load.ResolverGRPC, StreamLength: 10 * time.Second, InCluster: true},
			Duration: time.Minute, EventsPort: DefaultEventsPort, Token: testToken,
		}
		if mod != nil {
			mod(&o)
		}
		return o
	}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want Options
	}{
		{name: "defaults", args: base, env: map[string]string{"POD_NAME": "order-0", "HOSTNAME": "host", "PINLAB_TOKEN": testToken}, want: want(nil)},
		{name: "the host name without POD_NAME", args: base, env: map[string]string{"HOSTNAME": "order-0", "PINLAB_TOKEN": testToken}, want: want(nil)},
		{name: "no events, no token", args: append(slices.Clone(base), "--events-port", "0", "--name", "order-0"),
			want: want(func(o *Options) { o.EventsPort, o.Token = 0, "" })},
		{name: "listen IP", args: append(slices.Clone(base), "--events-port", "9999"), env: map[string]string{"POD_NAME": "order-0", "PINLAB_TOKEN": testToken, "PINLAB_LISTEN_IP": "10.1.2.3"},
			want: want(func(o *Options) { o.EventsPort, o.ListenIP = 9999, netip.MustParseAddr("10.1.2.3") })},
		{name: "retries and the rest", args: append(slices.Clone(base), "--name", "order-0", "--policy", "round_robin", "--resolver", "kubernetes", "--retry-max-attempts", "3",
			"--retry-codes", "14,4", "--stream", "--stream-length", "2s", "--min-resolution-interval", "5s", "--health-check", "--wait-for-ready"),
			env: map[string]string{"PINLAB_TOKEN": testToken},
			want: want(func(o *Options) {
				c := &o.Client
				c.Policy, c.Resolver, c.Stream, c.StreamLength, c.HealthCheck, c.WaitForReady = "round_robin", load.ResolverKubernetes, true, 2*time.Second, true, true
				c.Retry = &load.RetryPolicy{MaxAttempts: 3, RetryableStatusCodes: []codes.Code{codes.Unavailable, codes.DeadlineExceeded}}
				o.MinResolutionInterval = 5 * time.Second
			})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.args, env(tt.env))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
				t.Errorf("Parse (-want +got):\n%s", diff)
			}
		})
	}
}

// TestParseErrors: bad flags and environment name what is wrong (the
// image's tests, cmd/pinlab-workload, check the rest through its run).
func TestParseErrors(t *testing.T) {
	ok := []string{"load", "--target", "dns:///pricing:8471", "--rate", "10", "--duration", "1s"}
	tok := map[string]string{"PINLAB_TOKEN": testToken}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{name: "another command", args: []string{"pod", "pricing"}, want: `load: args must start with "load"`},
		{name: "cached resolver", args: append(slices.Clone(ok), "--resolver", "cached"), env: tok, want: `load: --resolver "cached": want "grpc" or "kubernetes"`},
		{name: "once resolver", args: append(slices.Clone(ok), "--resolver", "once"), env: tok, want: `load: --resolver "once"`},
		{name: "events port", args: append(slices.Clone(ok), "--events-port", "70000"), env: tok, want: "load: --events-port 70000 is not a TCP port"},
		{name: "negative interval", args: append(slices.Clone(ok), "--min-resolution-interval", "-1s"), env: tok, want: "load: --min-resolution-interval must not be negative"},
		{name: "an argument", args: append(slices.Clone(ok), "extra"), env: tok, want: `load: unexpected arguments ["extra"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.args, env(tt.env))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse: %v, want %q", err, tt.want)
			}
		})
	}
}

// TestHostTarget: on the lab's node, the targets a pod resolves through
// its resolv.conf go to the node's DNS server; others stay.
func TestHostTarget(t *testing.T) {
	tests := []struct {
		name, dns, target, want string
	}{
		{name: "dns:///", dns: "127.96.0.10:53", target: "dns:///pricing.shop.svc.cluster.local:8471", want: "dns://127.96.0.10:53/pricing.shop.svc.cluster.local:8471"},
		{name: "no scheme", dns: "127.96.0.10:5353", target: "pricing.shop.svc.cluster.local:8471", want: "dns://127.96.0.10:5353/pricing.shop.svc.cluster.local:8471"},
		{name: "a DNS server named", dns: "127.96.0.10:53", target: "dns://127.1.1.1:53/pricing:8471", want: "dns://127.1.1.1:53/pricing:8471"},
		{name: "passthrough", dns: "127.96.0.10:53", target: "passthrough:///127.244.0.5:8471", want: "passthrough:///127.244.0.5:8471"},
		{name: "kubernetes", dns: "127.96.0.10:53", target: "kubernetes:///pricing.shop:grpc", want: "kubernetes:///pricing.shop:grpc"},
		{name: "no DNS", target: "dns:///pricing:8471", want: "dns:///pricing:8471"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := (Host{DNS: tt.dns}).target(tt.target); got != tt.want {
				t.Errorf("target(%q) with DNS %q = %q, want %q", tt.target, tt.dns, got, tt.want)
			}
		})
	}
}

// TestRunOnTheLab runs the client as the lab's node does: from a lab
// address, through a DNS server of the lab's, its events on its own
// address; it reads them back, then stops it. With Host.Dial (a pod with
// its own network namespace), its connections and DNS queries go through
// that.
func TestRunOnTheLab(t *testing.T) {
	for _, hooked := range []bool{false, true} {
		t.Run(map[bool]string{false: "the node's namespace", true: "Dial"}[hooked], func(t *testing.T) {
			runOnTheLab(t, hooked)
		})
	}
}

func runOnTheLab(t *testing.T, hooked bool) {
	const serverIP, clientIP = "127.212.0.2", "127.212.0.3"
	podtest.Start(t, pod.Config{Name: "pricing-0", Namespace: "shop", Addr: netip.MustParseAddrPort(serverIP + ":8471")})
	dns := dnstest.StartWith(t, dnstest.Options{IP: netip.MustParseAddr("127.212.0.1")})
	dns.Set("pricing.shop.svc.cluster.local", netip.MustParseAddr(serverIP))
	o, err := Parse([]string{"load", "--target", "dns:///pricing.shop.svc.cluster.local:8471", "--rate", "50", "--duration", "500ms", "--name", "order-0", "--events-port", "9480"},
		env(map[string]string{"PINLAB_TOKEN": testToken}))
	if err != nil {
		t.Fatal(err)
	}
	var out, errs labtest.Buffer
	h := Host{Source: netip.MustParseAddr(clientIP), DNS: dns.Addr().String(), EventsIP: netip.MustParseAddr(clientIP),
		Listen: loopback.Listen, Stdout: &out, Stderr: &errs}
	var mu sync.Mutex
	var dials []string
	if hooked {
		h.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			mu.Lock()
			dials = append(dials, network+" "+addr)
			mu.Unlock()
			return loopback.Dialer{Source: h.Source}.Dial(ctx, network, addr)
		}
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	code := make(chan int, 1)
	go func() { code <- Run(ctx, o, h) }()
	r := &loadfeed.Reader{URL: "http://" + clientIP + ":9480", Token: testToken}
	var calls []loadfeed.Event
	read := func() bool {
		evs, _ := r.Poll(t.Context())
		for _, e := range evs {
			if e.Kind == loadfeed.KindCall {
				calls = append(calls, e)
			}
		}
		return len(calls) > 0 && strings.Contains(out.String(), ": done; "+strconv.Itoa(len(calls))+" calls")
	}
	if err := labtest.Poll(labtest.Context(t, 10*time.Second), 20*time.Millisecond, read); err != nil {
		cancel(errors.New("test over"))
		<-code
		t.Fatalf("%d calls read (%v); output:\n%s%s", len(calls), err, out.String(), errs.String())
	}
	for _, c := range calls {
		if c.Code != codes.OK || c.Pod != "pricing-0" {
			t.Fatalf("call %+v, want OK from pricing-0", c)
		}
	}
	if dns.Queries("pricing.shop.svc.cluster.local") == 0 {
		t.Error("the node's DNS server was not asked")
	}
	if !strings.Contains(out.String(), "dns://"+dns.Addr().String()+"/pricing.shop.svc.cluster.local:8471 at 50 calls/s") {
		t.Errorf("the first line names another target:\n%s", out.String())
	}
	cancel(errors.New("terminated"))
	select {
	case c := <-code:
		if c != 0 {
			t.Errorf("exit %d after the stop, want 0; stderr:\n%s", c, errs.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10 s of its context's end")
	}
	if _, err := net.DialTimeout("tcp", clientIP+":9480", time.Second); err == nil {
		t.Error("the events endpoint still listens after Run returned")
	}
	if !hooked {
		return
	}
	mu.Lock()
	defer mu.Unlock()
	for _, want := range []string{"tcp " + serverIP + ":8471", "udp " + dns.Addr().String()} {
		if !slices.Contains(dials, want) {
			t.Errorf("Host.Dial opened %v, want %q among them", dials, want)
		}
	}
}

// TestRunRefuses: what the lab's node cannot run ends Run with the image's
// exit codes and a reason.
func TestRunRefuses(t *testing.T) {
	const clientIP = "127.212.0.4"
	lab := Host{Source: netip.MustParseAddr(clientIP), EventsIP: netip.MustParseAddr(clientIP), Listen: loopback.Listen}
	tests := []struct {
		name string
		args []string
		host Host
		code int
		want string
	}{
		{name: "dns:/// without the node's DNS", args: []string{"--target", "dns:///pricing:8471"}, host: lab, code: 2, want: "dns:/// resolves through the host's DNS"},
		{name: "a target off the lab", args: []string{"--target", "passthrough:///10.0.0.1:8471"}, host: lab, code: 2, want: "10.0.0.1"},
		{name: "a process-wide setting", args: []string{"--target", "passthrough:///" + clientIP + ":1", "--min-resolution-interval", "1s"},
			host: func() Host {
				h := lab
				h.SetMinResolutionInterval = func(time.Duration) error { return errors.New("shared by every pod of the node") }
				return h
			}(), code: 1, want: "--min-resolution-interval: shared by every pod of the node"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := Parse(append([]string{"load", "--rate", "10", "--duration", "1s"}, tt.args...), env(map[string]string{"PINLAB_TOKEN": testToken}))
			if err != nil {
				t.Fatal(err)
			}
			var errs labtest.Buffer
			tt.host.Stderr = &errs
			if got := Run(t.Context(), o, tt.host); got != tt.code || !strings.Contains(errs.String(), tt.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", got, errs.String(), tt.code, tt.want)
			}
		})
	}
}

// TestMainBadArgs: Main, a container's process, exits 2 on bad args with
// the parse error on its stderr.
func TestMainBadArgs(t *testing.T) {
	var errs labtest.Buffer
	code := Main(t.Context(), []string{"load", "--rate", "fast"}, env(nil), Host{Stderr: &errs})
	if want := `pinlab load: --rate "fast": want a number`; code != 2 || !strings.Contains(errs.String(), want) {
		t.Errorf("exit %d, stderr %q; want 2 and %q", code, errs.String(), want)
	}
}
