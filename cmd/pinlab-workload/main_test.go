package main

import (
	"context"
	"io"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"

	pricingv1 "github.com/pinlab/pinlab/api/pricing/v1"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/podtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is a fake environment.
func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// TestPod runs the pod command on a loopback address, calls it over
// gRPC and HTTP, reads its metrics, and stops it with SIGTERM.
func TestPod(t *testing.T) {
	const ip = "127.203.17.1"
	args := []string{"pod", "pricing", "--port", "8471", "--http-port", "8080", "--metrics-port", "9090", "--drain-delay", "50ms"}
	sig := make(chan os.Signal, 1)
	var stdout, stderr labtest.Buffer
	code := make(chan int, 1)
	go func() {
		code <- run(args, env(map[string]string{"PINLAB_LISTEN_IP": ip, "POD_NAME": "pricing-7d9f", "POD_NAMESPACE": "shop"}), sig, &stdout, &stderr)
	}()
	defer func() {
		select {
		case <-code:
		default:
			sig <- syscall.SIGKILL // stops it: any signal drains
			<-code
		}
	}()
	cc := podtest.Dial(t, ip+":8471", netip.Addr{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// WaitForReady: the call waits for the server to listen.
	resp, err := pricingv1.NewPricingClient(cc).GetPrice(ctx, &pricingv1.GetPriceRequest{Sku: "a"}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatalf("GetPrice: %v", err)
	}
	if resp.GetPod() != "pricing-7d9f" {
		t.Errorf("reply from pod %q, want pricing-7d9f ($POD_NAME)", resp.GetPod())
	}
	if body := get(t, "http://"+ip+":8080/healthz"); body == "" {
		t.Error("the HTTP server's /healthz answered nothing")
	}
	if body := get(t, "http://"+ip+":9090/metrics"); !strings.Contains(body, "grpc_server_handled_total") {
		t.Errorf("metrics lack grpc_server_handled_total:\n%.400s", body)
	}
	sig <- syscall.SIGTERM
	select {
	case c := <-code:
		code <- c
		if c != 0 {
			t.Errorf("exit code %d after SIGTERM, want 0; stderr:\n%s", c, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the pod did not stop within 10 s of SIGTERM")
	}
	for _, want := range []string{"pinlab pod shop/pricing-7d9f: serving gRPC (health, channelz) on 127.203.17.1:8471, HTTP on port 8080, metrics on port 9090", "draining", "drained"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
		}
	}
}

// TestBadInput: bad args and environment are usage errors (exit 2) that
// name what is wrong; a port taken is exit 1.
func TestBadInput(t *testing.T) {
	const ip = "127.203.17.2"
	taken, err := loopback.Listen(context.Background(), ip+":8471")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	tests := []struct {
		name string
		args []string
		env  map[string]string
		code int
		want string
	}{
		{name: "no command", code: 2, want: "usage: pinlab pod"},
		{name: "another command", args: []string{"serve"}, code: 2, want: "usage: pinlab pod"},
		{name: "unknown workload", args: []string{"pod", "checkout"}, code: 2, want: `unknown workload "checkout"`},
		{name: "bad flag", args: []string{"pod", "pricing", "--port", "70000"}, code: 2, want: "--port 70000"},
		{name: "bad listen IP", args: []string{"pod", "pricing"}, env: map[string]string{"PINLAB_LISTEN_IP": "pod-ip"}, code: 2, want: `$PINLAB_LISTEN_IP "pod-ip"`},
		{name: "port taken", args: []string{"pod", "pricing"}, env: map[string]string{"PINLAB_LISTEN_IP": ip}, code: 1, want: "cannot start"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr labtest.Buffer
			got := run(tt.args, env(tt.env), make(chan os.Signal), &stdout, &stderr)
			if got != tt.code || !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", got, stderr.String(), tt.code, tt.want)
			}
		})
	}
}

// get returns the body of a GET of url, failing the test on an error or
// a status other than 200.
func get(t *testing.T, url string) string {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v", url, resp.Status, err)
	}
	return string(b)
}
