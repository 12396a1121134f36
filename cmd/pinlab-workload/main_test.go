package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pricingv1 "github.com/pinlab/pinlab/api/pricing/v1"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/loadfeed"
	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/podtest"
)

// killEnv makes the test binary run killSelf, for TestKillSelf.
const killEnv = "PINLAB_WORKLOAD_TEST_KILL"

func TestMain(m *testing.M) {
	if os.Getenv(killEnv) == "1" {
		killSelf()
	}
	goleak.VerifyTestMain(m)
}

// TestKillSelf: /kill ends the process, also as PID 1 of a PID namespace
// (a container's entrypoint), which cannot SIGKILL itself.
func TestKillSelf(t *testing.T) {
	tests := []struct {
		name  string
		flags uintptr
	}{
		{name: "a process"},
		{name: "PID 1 of its namespace", flags: syscall.CLONE_NEWPID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.flags != 0 && os.Geteuid() != 0 {
				t.Skip("a PID namespace needs root")
			}
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), killEnv+"=1")
			cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: tt.flags}
			done := make(chan error, 1)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				var ee *exec.ExitError
				if !errors.As(err, &ee) {
					t.Fatalf("exit: %v, want killed", err)
				}
				ws := ee.Sys().(syscall.WaitStatus)
				if !(ws.Signaled() && ws.Signal() == syscall.SIGKILL) && ee.ExitCode() != 137 {
					t.Errorf("exit %v, want SIGKILL or 137", err)
				}
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				<-done
				t.Fatal("still running 10 s after killSelf")
			}
		})
	}
}

// testToken is a token long enough for the endpoints.
const testToken = "a-test-token-0123456789"

// env is a fake environment.
func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// TestPod runs the pod command on a loopback address, calls it over
// gRPC and HTTP, reads its metrics, and stops it with SIGTERM.
func TestPod(t *testing.T) {
	const ip = "127.207.1.1"
	args := []string{"pod", "pricing", "--port", "8471", "--http-port", "8080", "--metrics-port", "9090", "--drain-delay", "50ms"}
	sig := make(chan os.Signal, 1)
	var stdout, stderr labtest.Buffer
	code := make(chan int, 1)
	go func() {
		code <- run(args, env(map[string]string{"PINLAB_LISTEN_IP": ip, "POD_NAME": "pricing-7d9f", "POD_NAMESPACE": "shop", "PINLAB_ADMIN_PORT": "9099", "PINLAB_TOKEN": testToken}), sig, &stdout, &stderr)
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
	// The admin endpoint: readiness follows it, and /kill kills.
	killed := make(chan struct{}, 1)
	kill = func() { killed <- struct{}{} }
	defer func() { kill = killSelf }()
	if c := post(t, "http://"+ip+":9099/ready?to=false", testToken); c != http.StatusNoContent {
		t.Errorf("POST /ready?to=false: %d", c)
	}
	hc, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: pod.ReadinessService})
	if err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("readiness after /ready?to=false: %v %v, want NOT_SERVING", hc.GetStatus(), err)
	}
	if c := post(t, "http://"+ip+":9099/kill", "wrong"); c != http.StatusUnauthorized {
		t.Errorf("POST /kill with a wrong token: %d, want 401", c)
	}
	if c := post(t, "http://"+ip+":9099/kill", testToken); c != http.StatusNoContent {
		t.Errorf("POST /kill: %d", c)
	}
	select {
	case <-killed:
	case <-time.After(5 * time.Second):
		t.Error("/kill did not kill")
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
	for _, want := range []string{"pinlab pod shop/pricing-7d9f: serving gRPC (health, channelz) on 127.207.1.1:8471, HTTP on port 8080, metrics on port 9090", "admin endpoint on 127.207.1.1:9099", "draining", "drained"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
		}
	}
}

// TestBadInput: bad args and environment are usage errors (exit 2) that
// name what is wrong; a port taken is exit 1.
func TestBadInput(t *testing.T) {
	const ip = "127.207.1.2"
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
		{name: "admin without a token", args: []string{"pod", "pricing"}, env: map[string]string{"PINLAB_ADMIN_PORT": "9099"}, code: 2, want: "$PINLAB_TOKEN is empty"},
		{name: "admin port", args: []string{"pod", "pricing"}, env: map[string]string{"PINLAB_ADMIN_PORT": "http", "PINLAB_TOKEN": testToken}, code: 2, want: `$PINLAB_ADMIN_PORT "http"`},
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

// post POSTs to url with token and returns the status code.
func post(t *testing.T, url, token string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
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

// TestLoad runs a pod and a load client against it for a second, reads
// the client's events through its endpoint, and stops both.
func TestLoad(t *testing.T) {
	const podIP, loadIP = "127.207.1.3", "127.207.1.4"
	podSig, loadSig := make(chan os.Signal, 1), make(chan os.Signal, 1)
	var podOut, loadOut, errs labtest.Buffer
	podCode, loadCode := make(chan int, 1), make(chan int, 1)
	go func() {
		podCode <- run([]string{"pod", "pricing"}, env(map[string]string{"PINLAB_LISTEN_IP": podIP, "POD_NAME": "pricing-0"}), podSig, &podOut, &errs)
	}()
	defer func() { podSig <- syscall.SIGTERM; <-podCode }()
	serving := func() bool { return strings.Contains(podOut.String(), "serving gRPC") }
	if err := labtest.Poll(labtest.Context(t, 10*time.Second), 10*time.Millisecond, serving); err != nil {
		t.Fatalf("the pod is not serving: %v\n%s", err, errs.String())
	}
	go func() {
		loadCode <- run([]string{"load", "--target", "passthrough:///" + podIP + ":8471", "--rate", "50", "--duration", "1s", "--wait-for-ready"},
			env(map[string]string{"PINLAB_LISTEN_IP": loadIP, "POD_NAME": "order-0", "PINLAB_TOKEN": testToken}), loadSig, &loadOut, &errs)
	}()
	stopped := false
	defer func() {
		if !stopped {
			loadSig <- syscall.SIGTERM
			<-loadCode
		}
	}()
	r := &loadfeed.Reader{URL: "http://" + loadIP + ":9480", Token: testToken}
	var calls []loadfeed.Event
	var pollErr error
	read := func() bool {
		listening := strings.Contains(loadOut.String(), "events on")
		evs, err := r.Poll(t.Context())
		if err != nil && listening {
			pollErr = err
			return true
		}
		for _, e := range evs {
			if e.Kind == loadfeed.KindCall {
				calls = append(calls, e)
			}
		}
		m := doneLine.FindStringSubmatch(loadOut.String())
		return m != nil && strconv.Itoa(len(calls)) == m[1]
	}
	if err := labtest.Poll(labtest.Context(t, 15*time.Second), 50*time.Millisecond, read); err != nil || pollErr != nil {
		t.Fatalf("%d calls read (%v, %v); output:\n%s%s", len(calls), err, pollErr, loadOut.String(), errs.String())
	}
	for _, c := range calls {
		if c.Code != codes.OK || c.Pod != "pricing-0" {
			t.Fatalf("call %+v, want OK from pricing-0", c)
		}
	}
	if len(calls) < 45 || len(calls) > 51 {
		t.Errorf("%d calls in 1 s at 50/s", len(calls))
	}
	if !strings.Contains(loadOut.String(), "by pod: pricing-0 ") {
		t.Errorf("the closing line names no pod:\n%s", loadOut.String())
	}
	loadSig <- syscall.SIGTERM
	stopped = true
	if c := <-loadCode; c != 0 {
		t.Errorf("load exit %d, want 0; stderr:\n%s", c, errs.String())
	}
}

// doneLine is the load command's closing line, with its count of calls.
var doneLine = regexp.MustCompile(`: done; (\d+) calls`)

// TestLoadBadInput: bad load flags are usage errors naming the flag.
func TestLoadBadInput(t *testing.T) {
	ok := []string{"load", "--target", "dns:///pricing:8471", "--rate", "10", "--duration", "1s"}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{name: "no target", args: []string{"load", "--rate", "1", "--duration", "1s"}, want: "--target is required"},
		{name: "no rate", args: []string{"load", "--target", "x:1", "--duration", "1s"}, want: "--rate must be above 0"},
		{name: "no duration", args: []string{"load", "--target", "x:1", "--rate", "1"}, want: "--duration 0s"},
		{name: "a day and more", args: append(slices.Clone(ok), "--duration", "25h"), want: "--duration 25h0m0s"},
		{name: "no token", args: ok, want: "$PINLAB_TOKEN is empty"},
		{name: "bad retry code", args: append(slices.Clone(ok), "--retry-max-attempts", "3", "--retry-codes", "14,99"), env: map[string]string{"PINLAB_TOKEN": testToken}, want: `"99" is not a status code`},
		{name: "cached resolver", args: append(slices.Clone(ok), "--resolver", "cached"), env: map[string]string{"PINLAB_TOKEN": testToken}, want: `resolver "cached"`},
		{name: "unknown flag", args: append(slices.Clone(ok), "--qps", "3"), want: "unknown flag: --qps"},
		{name: "a short token", args: ok, env: map[string]string{"PINLAB_TOKEN": "short"}, want: "$PINLAB_TOKEN has 5 characters, fewer than 16"},
		{name: "retry codes alone", args: append(slices.Clone(ok), "--retry-codes", "14"), env: map[string]string{"PINLAB_TOKEN": testToken}, want: "--retry-codes needs --retry-max-attempts"},
		{name: "stream length alone", args: append(slices.Clone(ok), "--stream-length", "5s"), env: map[string]string{"PINLAB_TOKEN": testToken}, want: "--stream-length needs --stream"},
		{name: "bad listen IP", args: ok, env: map[string]string{"PINLAB_TOKEN": testToken, "PINLAB_LISTEN_IP": "pod"}, want: `$PINLAB_LISTEN_IP "pod"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr labtest.Buffer
			got := run(tt.args, env(tt.env), make(chan os.Signal), &stdout, &stderr)
			if got != 2 || !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("exit %d, stderr %q; want exit 2 and %q", got, stderr.String(), tt.want)
			}
		})
	}
}
