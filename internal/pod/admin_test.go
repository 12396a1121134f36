package pod_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	pricingv1 "github.com/pinlab/pinlab/api/pricing/v1"
	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/podtest"
)

// TestAdminHandler drives a container's process (ContainerNetns, on a
// loopback address) through its admin endpoint: readiness, health, a
// hang and a kill, each seen from outside as a kubelet or client sees it.
func TestAdminHandler(t *testing.T) {
	addr := netip.MustParseAddrPort("127.207.3.1:8471")
	p := pod.NewProcess(pod.ProcessConfig{GRPC: pod.Config{Name: "pricing-0", Addr: addr, Netns: pod.ContainerNetns{}}})
	if err := p.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	killed := false
	h := pod.AdminHandler(p, "tok", func() { killed = true })
	post := func(path string) int {
		t.Helper()
		req := httptest.NewRequest(http.MethodPost, path, nil)
		req.Header.Set("Authorization", "Bearer tok")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code
	}
	cc := podtest.Dial(t, addr.String(), netip.Addr{})
	health := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatalf("health %q: %v", service, err)
		}
		return resp.GetStatus()
	}
	call := func() codes.Code {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err := pricingv1.NewPricingClient(cc).GetPrice(ctx, &pricingv1.GetPriceRequest{Sku: "a"})
		return status.Code(err)
	}
	serving := healthpb.HealthCheckResponse_SERVING
	if got := health(pod.ReadinessService); got != serving {
		t.Fatalf("readiness at start %v, want SERVING", got)
	}
	if c := post("/ready?to=false"); c != http.StatusNoContent {
		t.Fatalf("POST /ready?to=false: %d", c)
	}
	if got, all := health(pod.ReadinessService), health(""); got == serving || all != serving || call() != codes.OK {
		t.Errorf("not ready: readiness %v, overall %v; want NOT_SERVING, SERVING and calls served", got, all)
	}
	post("/ready?to=true")
	if got := health(pod.ReadinessService); got != serving {
		t.Errorf("ready again: readiness %v", got)
	}
	post("/healthy?to=false")
	if c := call(); c != codes.Unavailable {
		t.Errorf("unhealthy: call %v, want UNAVAILABLE", c)
	}
	post("/healthy?to=true")
	if c := post("/hang?to=true"); c != http.StatusNoContent {
		t.Fatalf("POST /hang?to=true: %d", c)
	}
	if got := podtest.Connect(addr.String()); got != "timeout" {
		t.Errorf("a connect while hung: %s, want timeout", got)
	}
	post("/hang?to=false")
	if got := podtest.Connect(addr.String()); got != "connected" {
		t.Errorf("a connect after the hang: %s, want connected", got)
	}
	if c := post("/kill"); c != http.StatusNoContent || !killed {
		t.Errorf("POST /kill: %d, killed %v", c, killed)
	}
}

// TestAdminHandlerRefuses: no token, a wrong one, another method, a bad
// value, another path; an empty token refuses everyone.
func TestAdminHandlerRefuses(t *testing.T) {
	p := pod.NewProcess(pod.ProcessConfig{GRPC: pod.Config{Name: "p", Addr: netip.MustParseAddrPort("127.207.3.2:8471")}})
	tests := []struct {
		name, method, path, auth, token string
		want                            int
	}{
		{name: "no token", method: "POST", path: "/ready?to=false", want: http.StatusUnauthorized},
		{name: "wrong token", method: "POST", path: "/kill", auth: "Bearer nope", want: http.StatusUnauthorized},
		{name: "empty token configured", method: "POST", path: "/kill", auth: "Bearer ", token: "-", want: http.StatusUnauthorized},
		{name: "GET", method: "GET", path: "/ready?to=false", auth: "Bearer tok", want: http.StatusMethodNotAllowed},
		{name: "bad value", method: "POST", path: "/hang?to=maybe", auth: "Bearer tok", want: http.StatusBadRequest},
		{name: "no value", method: "POST", path: "/healthy", auth: "Bearer tok", want: http.StatusBadRequest},
		{name: "0 for false", method: "POST", path: "/ready?to=0", auth: "Bearer tok", want: http.StatusBadRequest},
		{name: "hang before it listens", method: "POST", path: "/hang?to=true", auth: "Bearer tok", want: http.StatusConflict},
		{name: "other path", method: "POST", path: "/exec", auth: "Bearer tok", want: http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok := "tok"
			if tt.token == "-" {
				tok = ""
			}
			h := pod.AdminHandler(p, tok, func() { t.Error("killed") })
			req := httptest.NewRequest(tt.method, tt.path, nil)
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != tt.want {
				t.Errorf("%s %s: %d, want %d", tt.method, tt.path, w.Code, tt.want)
			}
		})
	}
}
