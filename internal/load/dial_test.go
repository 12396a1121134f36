package load

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/load/dnstest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
)

func TestServiceConfigJSON(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{name: "policy only", cfg: Config{Policy: "pick_first"},
			want: `{"loadBalancingConfig":[{"pick_first":{}}]}`},
		{name: "health check", cfg: Config{Policy: "round_robin", HealthCheck: true},
			want: `{"loadBalancingConfig":[{"round_robin":{}}],"healthCheckConfig":{"serviceName":"pricing.v1.Pricing"}}`},
		{name: "retry", cfg: Config{Policy: "round_robin", Retry: &RetryPolicy{MaxAttempts: 3, InitialBackoff: 50 * time.Millisecond, MaxBackoff: 1500 * time.Millisecond, BackoffMultiplier: 1.5, RetryableStatusCodes: []codes.Code{codes.Unavailable, codes.ResourceExhausted}}},
			want: `{"loadBalancingConfig":[{"round_robin":{}}],"methodConfig":[{"name":[{"service":"pricing.v1.Pricing"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.050000000s","maxBackoff":"1.500000000s","backoffMultiplier":1.5,"retryableStatusCodes":[14,8]}}]}`},
		{name: "least_request with settings", cfg: Config{Policy: "least_request", PolicySettings: `{"choiceCount": 3}`},
			want: `{"loadBalancingConfig":[{"least_request_experimental":{"choiceCount":3}}]}`},
		{name: "weighted_round_robin", cfg: Config{Policy: "weighted_round_robin", PolicySettings: `{"blackoutPeriod": "2s"}`},
			want: `{"loadBalancingConfig":[{"weighted_round_robin":{"blackoutPeriod":"2s"}}]}`},
		{name: "retry defaults", cfg: Config{Policy: "pick_first", Retry: &RetryPolicy{}},
			want: `{"loadBalancingConfig":[{"pick_first":{}}],"methodConfig":[{"name":[{"service":"pricing.v1.Pricing"}],"retryPolicy":{"maxAttempts":4,"initialBackoff":"0.100000000s","maxBackoff":"1.000000000s","backoffMultiplier":2,"retryableStatusCodes":[14]}}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.Source, cfg.Rate, cfg.Target = netip.MustParseAddr("127.203.1.1"), 1, "passthrough:///127.203.1.2:8471"
			cfg, err := cfg.withDefaults()
			if err != nil {
				t.Fatal(err)
			}
			got, err := serviceConfigJSON(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("service config (-want +got):\n%s", diff)
			}
			// grpc-go rejects an invalid default service config.
			conn, err := grpc.NewClient("passthrough:///127.0.0.1:1", grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultServiceConfig(got))
			if err != nil {
				t.Fatalf("grpc-go rejects %s: %v", got, err)
			}
			conn.Close()
		})
	}
}

// twoBackends starts backends "a" and "b" on one port, a DNS that lists
// them in that order, and returns the target.
func twoBackends(t *testing.T, net byte) (a, b *backend, target string) {
	t.Helper()
	a = startBackend(t, "a", fmt.Sprintf("127.203.%d.1:0", net))
	b = startBackend(t, "b", fmt.Sprintf("127.203.%d.2:%d", net, a.addr.Port()))
	d := dnstest.Start(t)
	d.Set("pricing.test", a.addr.Addr(), b.addr.Addr())
	return a, b, fmt.Sprintf("dns://%s/pricing.test:%d", d.Addr(), a.addr.Port())
}

// lastAnswers returns the pods that answered the last n calls (by due
// time), or nil if fewer than n calls have finished.
func lastAnswers(obs *collector, n int) []string {
	rs := obs.snapshot()
	slices.SortFunc(rs, func(x, y Result) int { return x.Due.Compare(y.Due) })
	if len(rs) < n {
		return nil
	}
	var pods []string
	for _, r := range rs[len(rs)-n:] {
		pods = append(pods, r.Pod)
	}
	return pods
}

// TestHealthCheck: backend a (first in DNS) turns NOT_SERVING while DNS
// still lists it and its server keeps answering. Only round_robin with
// health checking stops sending to it.
func TestHealthCheck(t *testing.T) {
	tests := []struct {
		name        string
		policy      string
		healthCheck bool
		wantAvoided bool
	}{
		{name: "round_robin with health checks", policy: "round_robin", healthCheck: true, wantAvoided: true},
		{name: "round_robin without", policy: "round_robin"},
		// grpc-go v1.85: a top-level pick_first never watches health.
		{name: "pick_first with health checks", policy: "pick_first", healthCheck: true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			net := byte(40 + i)
			a, _, target := twoBackends(t, net)
			var obs collector
			start(t, Config{
				Source: netip.AddrFrom4([4]byte{127, 203, net, 9}), Target: target, Resolver: ResolverOnce,
				Policy: tt.policy, HealthCheck: tt.healthCheck, Rate: 200, Observer: &obs,
			})
			labtest.WaitFor(t, 10*time.Second, "a call answered by a", func() bool { return count(obs.snapshot()).pods["a"] > 0 })
			a.setServing(false)
			avoided := func() bool {
				last := lastAnswers(&obs, 100)
				return last != nil && !slices.Contains(last, "a")
			}
			// Give the change 2 s to show (it shows in milliseconds when
			// it does).
			deadline := time.Now().Add(2 * time.Second)
			for !avoided() && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if got := avoided(); got != tt.wantAvoided {
				t.Errorf("a avoided: %v, want %v (last answers by %v)", got, tt.wantAvoided, lastAnswers(&obs, 100))
			}
			// The pod that stopped serving still answers, so no call may
			// fail for it; a busy machine may make calls miss their
			// deadline, which says nothing about the policy.
			got := count(obs.snapshot())
			if late := got.codes[codes.DeadlineExceeded]; late > 0 {
				t.Logf("%d calls missed their deadline (a busy machine)", late)
			}
			if got.codes[codes.OK]+got.codes[codes.DeadlineExceeded] != got.total {
				t.Errorf("codes %v; want all OK (or late)", got.codes)
			}
		})
	}
}

// TestRetryPolicy: the backend fails every first attempt with UNAVAILABLE;
// with a retry policy every call succeeds on its second attempt.
func TestRetryPolicy(t *testing.T) {
	tests := []struct {
		name      string
		retry     *RetryPolicy
		wantCodes codes.Code
	}{
		{name: "no retries", wantCodes: codes.Unavailable},
		{name: "retry UNAVAILABLE", retry: &RetryPolicy{MaxAttempts: 2, InitialBackoff: 10 * time.Millisecond}, wantCodes: codes.OK},
		{name: "retry other codes only", retry: &RetryPolicy{RetryableStatusCodes: []codes.Code{codes.ResourceExhausted}}, wantCodes: codes.Unavailable},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			net := byte(50 + i)
			b := startBackend(t, "b", fmt.Sprintf("127.203.%d.1:0", net))
			b.failFirst.Store(true)
			var obs collector
			_, stop := start(t, Config{
				Source: netip.AddrFrom4([4]byte{127, 203, net, 9}), Target: "passthrough:///" + b.addr.String(),
				Retry: tt.retry, Rate: 100, Observer: &obs,
			})
			labtest.WaitFor(t, 10*time.Second, "20 calls", func() bool { return len(obs.snapshot()) >= 20 })
			stop()
			got := count(obs.snapshot())
			if got.codes[tt.wantCodes] != got.total {
				t.Errorf("codes %v; want all %v", got.codes, tt.wantCodes)
			}
			wantAttempts := int64(got.total)
			if tt.wantCodes == codes.OK {
				wantAttempts *= 2
			}
			if n := b.attempts.Load(); n != wantAttempts {
				t.Errorf("backend saw %d attempts for %d calls; want %d", n, got.total, wantAttempts)
			}
		})
	}
}
