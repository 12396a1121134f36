package kubelet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pricingv1 "github.com/pinlab/pinlab/api/pricing/v1"
	"github.com/pinlab/pinlab/internal/cluster"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/podtest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
)

// timeline records, per pod, lifecycle events from Config.Events and what
// a pod watch saw: "deletionTimestamp" when it first appeared, "ready" and
// "unready" when the Ready condition flipped.
type timeline struct {
	mu     sync.Mutex
	events map[string][]stamp
}

type stamp struct {
	name string
	at   time.Time
}

func (l *timeline) add(pod, name string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.events == nil {
		l.events = map[string][]stamp{}
	}
	l.events[pod] = append(l.events[pod], stamp{name, at})
}

func (l *timeline) record(p *corev1.Pod, event string, at time.Time) { l.add(p.Name, event, at) }

func (l *timeline) of(pod string) []stamp {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]stamp(nil), l.events[pod]...)
}

// first returns when name first happened to pod.
func (l *timeline) first(pod, name string) (time.Time, bool) {
	for _, s := range l.of(pod) {
		if s.name == name {
			return s.at, true
		}
	}
	return time.Time{}, false
}

// names lists pod's events in order, without the watch's ready/unready.
func (l *timeline) names(pod string) []string {
	var out []string
	for _, s := range l.of(pod) {
		if s.name != "ready" && s.name != "unready" {
			out = append(out, s.name)
		}
	}
	return out
}

func (l *timeline) waitFor(t *testing.T, pod, name string) time.Time {
	t.Helper()
	var at time.Time
	happened := func() (ok bool) {
		at, ok = l.first(pod, name)
		return ok
	}
	if labtest.Poll(labtest.Context(t, 20*time.Second), 5*time.Millisecond, happened) != nil {
		t.Fatalf("pod %s: no %q event; saw %v", pod, name, l.names(pod))
	}
	return at
}

// watchPods feeds l from a watch on the namespace's pods until the test ends.
func watchPods(t *testing.T, c *cluster.Cluster, l *timeline) {
	t.Helper()
	wi, err := c.Client().CoreV1().Pods("default").Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		deleting, ready := map[string]bool{}, map[string]bool{}
		for ev := range wi.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			now := time.Now()
			if p.DeletionTimestamp != nil && !deleting[p.Name] {
				deleting[p.Name] = true
				l.add(p.Name, "deletionTimestamp", now)
			}
			if r := cluster.IsPodReady(p); r != ready[p.Name] {
				ready[p.Name] = r
				l.add(p.Name, map[bool]string{true: "ready", false: "unready"}[r], now)
			}
		}
	}()
	t.Cleanup(func() {
		wi.Stop()
		<-done
	})
}

// clientSource is a source address outside every test's pod range.
func clientSource(c *cluster.Cluster) netip.Addr {
	a := c.PodIPs().Prefix().Addr().As4()
	a[1]++
	a[3] = 9
	return netip.AddrFrom4(a)
}

func readyPod(t *testing.T, c *cluster.Cluster, name string, mod func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	createPod(t, c, name, mod)
	return waitPod(t, c, name, "Ready", func(p *corev1.Pod, err error) bool { return err == nil && cluster.IsPodReady(p) })
}

func deletePod(t *testing.T, c *cluster.Cluster, name string) {
	t.Helper()
	if err := c.Client().CoreV1().Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

func waitGone(t *testing.T, c *cluster.Cluster, name string) {
	t.Helper()
	waitPod(t, c, name, "removal", func(_ *corev1.Pod, err error) bool { return apierrors.IsNotFound(err) })
}

func withGrace(s int64) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = &s }
}

func withPreStopSleep(s int64) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: s}}}
	}
}

func withArgs(args ...string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.Containers[0].Args = append([]string{"pod", "pricing"}, args...) }
}

func all(mods ...func(*corev1.Pod)) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		for _, m := range mods {
			m(p)
		}
	}
}

func watchPrices(t *testing.T, cc *grpc.ClientConn, count int64) pricingv1.Pricing_WatchPricesClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := pricingv1.NewPricingClient(cc).WatchPrices(ctx, &pricingv1.WatchPricesRequest{Sku: "a", IntervalMs: 100, Count: count})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	return s
}

// finish reads a stream to its end and returns its status (OK for a clean
// end) and how many messages it got after the first.
func finish(s pricingv1.Pricing_WatchPricesClient) (error, int) {
	n := 0
	for {
		if _, err := s.Recv(); err != nil {
			if err.Error() == "EOF" {
				return nil, n
			}
			return err, n
		}
		n++
	}
}

// TestTerminationOrder: deletion runs the preStop hook, then SIGTERM (the
// graceful stop), as the kubelet's killContainer; a stream in flight
// during the hook and past SIGTERM completes, as does a call made during
// the hook.
func TestTerminationOrder(t *testing.T) {
	t.Parallel()
	events := &timeline{}
	c, _, _ := node(t, Config{Events: events.record})
	watchPods(t, c, events)
	p := readyPod(t, c, "order", all(withGrace(3), withPreStopSleep(1)))
	cc := podtest.Dial(t, p.Status.PodIP+":8471", clientSource(c))
	stream := watchPrices(t, cc, 15) // 1.5 s: through the hook and past SIGTERM
	events.add("order", "delete", time.Now())
	deletePod(t, c, "order")
	events.waitFor(t, "order", "prestop-start")
	if _, err := pricingv1.NewPricingClient(cc).GetPrice(context.Background(), &pricingv1.GetPriceRequest{Sku: "b"}); err != nil {
		t.Errorf("call during the preStop hook: %v", err)
	}
	if err, n := finish(stream); err != nil || n != 14 {
		t.Errorf("stream in flight through termination: %d more messages, then %v; want 14, then OK", n, err)
	}
	waitGone(t, c, "order")
	// The deletionTimestamp is what this test's own watch saw; the kubelet
	// watches apart, so the two may see the update in either order. The
	// delete request itself comes before everything the kubelet does.
	if _, ok := events.first("order", "deletionTimestamp"); !ok {
		t.Errorf("no update with a deletionTimestamp was seen")
	}
	want := []string{"delete", "prestop-start", "prestop-done", "sigterm", "graceful-stop-done"}
	got := slices.DeleteFunc(events.names("order"), func(n string) bool { return n == "deletionTimestamp" })
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("events %v, want %v", got, want)
	}
	var prev time.Time
	for _, name := range want {
		at, _ := events.first("order", name)
		if at.Before(prev) {
			t.Errorf("%s at %v, before the event preceding it", name, at)
		}
		prev = at
	}
	start, _ := events.first("order", "prestop-start")
	done, _ := events.first("order", "prestop-done")
	if d := done.Sub(start); d < time.Second {
		t.Errorf("preStop sleep of 1s took %v", d)
	}
}

// TestHardStopAtGraceEnd: a stream longer than the grace period is cut at
// the grace period's end, counted from the start of termination, preStop
// hook included (4s: a 2s hook, then 2s from SIGTERM; counting from SIGTERM
// would give 6s).
func TestHardStopAtGraceEnd(t *testing.T) {
	t.Parallel()
	events := &timeline{}
	c, _, _ := node(t, Config{Events: events.record})
	p := readyPod(t, c, "long", all(withGrace(4), withPreStopSleep(2)))
	stream := watchPrices(t, podtest.Dial(t, p.Status.PodIP+":8471", clientSource(c)), 0)
	deletePod(t, c, "long")
	err, _ := finish(stream)
	cut := time.Now()
	if status.Code(err) != codes.Unavailable {
		t.Errorf("endless stream ended with %v, want UNAVAILABLE", err)
	}
	waitGone(t, c, "long")
	want := []string{"prestop-start", "prestop-done", "sigterm", "hard-stop"}
	if got := events.names("long"); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("events %v, want %v", got, want)
	}
	start, _ := events.first("long", "prestop-start")
	hard, _ := events.first("long", "hard-stop")
	if d := hard.Sub(start); d < 3900*time.Millisecond || d > 5*time.Second {
		t.Errorf("hard stop %v after termination began, want the 4s grace period", d)
	}
	if d := cut.Sub(start); d < 3900*time.Millisecond {
		t.Errorf("stream cut %v after termination began, before the grace period ended", d)
	}
}

// TestReadinessDuringTermination: readiness probing goes on while the pod
// terminates; with a drain delay the server answers NOT_SERVING after
// SIGTERM, so Ready turns false before the object goes.
func TestReadinessDuringTermination(t *testing.T) {
	t.Parallel()
	events := &timeline{}
	c, _, _ := node(t, Config{Events: events.record})
	watchPods(t, c, events)
	readyPod(t, c, "drain", all(withGrace(10), withArgs("--drain-delay=3s"), func(p *corev1.Pod) {
		p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{PeriodSeconds: 1, FailureThreshold: 1, SuccessThreshold: 1, TimeoutSeconds: 1,
			ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 8471}}}
	}))
	deletePod(t, c, "drain")
	sigterm := events.waitFor(t, "drain", "sigterm")
	unready := events.waitFor(t, "drain", "unready")
	graceful := events.waitFor(t, "drain", "graceful-stop-done")
	if !unready.After(sigterm) || !unready.Before(graceful) {
		t.Errorf("Ready turned false at %v; want after SIGTERM (%v) and before the graceful stop ended (%v)", unready, sigterm, graceful)
	}
	waitGone(t, c, "drain")
}

// TestMaxConnectionAgeDrainWithoutErrors: with MaxConnectionAge 150ms and a
// 2s grace, unary calls much shorter than the grace see no failure over at
// least 20 GOAWAY cycles of a real grpc-go channel (pick_first).
func TestMaxConnectionAgeDrainWithoutErrors(t *testing.T) {
	t.Parallel()
	obs := &podtest.Recorder{}
	c, _, _ := node(t, Config{Observe: func(*corev1.Pod) pod.Observer { return obs }})
	source := clientSource(c)
	// connections opened from the client, not the kubelet's probes
	opened := func() int { n, _ := obs.ConnsFrom(source); return n }
	p := readyPod(t, c, "aged", withArgs("--max-connection-age=150ms", "--max-connection-age-grace=2s"))
	client := pricingv1.NewPricingClient(podtest.Dial(t, p.Status.PodIP+":8471", source))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	calls, failed := 0, []error{}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && opened() < 21 {
				_, err := client.GetPrice(ctx, &pricingv1.GetPriceRequest{Sku: "a"})
				mu.Lock()
				calls++
				if err != nil && ctx.Err() == nil {
					failed = append(failed, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if n := opened(); n < 21 {
		t.Fatalf("only %d connections in 30s: fewer than 20 connection-age cycles", n)
	}
	t.Logf("%d calls over %d connections", calls, opened())
	if len(failed) > 0 {
		t.Errorf("%d of %d calls failed across GOAWAY drains, first: %v", len(failed), calls, failed[0])
	}
}

// TestKillRestarts: Kill resets connections; the container restarts on the
// same IP with restartCount and lastState, at once the first time and after
// the back-off the second.
func TestKillRestarts(t *testing.T) {
	t.Parallel()
	events := &timeline{}
	backoff := 600 * time.Millisecond
	c, k, _ := node(t, Config{Events: events.record, RestartBackoff: backoff})
	watchPods(t, c, events)
	p := readyPod(t, c, "crash", nil)
	stream := watchPrices(t, podtest.Dial(t, p.Status.PodIP+":8471", clientSource(c)), 0)
	if err := k.Kill("default", "crash"); err != nil {
		t.Fatal(err)
	}
	err, _ := finish(stream)
	if status.Code(err) != codes.Unavailable || strings.Contains(strings.ToLower(err.Error()), "goaway") {
		t.Errorf("stream on a killed pod: %v, want UNAVAILABLE without GOAWAY", err)
	}
	restarted := func(n int32) func(*corev1.Pod, error) bool {
		return func(p *corev1.Pod, err error) bool {
			return err == nil && cluster.IsPodReady(p) && p.Status.ContainerStatuses[0].RestartCount == n
		}
	}
	again := waitPod(t, c, "crash", "Ready after one restart", restarted(1))
	if again.Status.PodIP != p.Status.PodIP {
		t.Errorf("restarted on %s, want the same IP %s", again.Status.PodIP, p.Status.PodIP)
	}
	last := again.Status.ContainerStatuses[0].LastTerminationState.Terminated
	if last == nil || last.ExitCode != 137 {
		t.Errorf("lastState.terminated = %+v, want exit code 137", last)
	}
	if _, ok := events.first("crash", "unready"); !ok {
		t.Error("Ready never turned false after the kill")
	}
	// The second crash waits out the back-off, counted from the exit.
	if err := k.Kill("default", "crash"); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	waitPod(t, c, "crash", "CrashLoopBackOff", func(p *corev1.Pod, err error) bool {
		w := p.Status.ContainerStatuses[0].State.Waiting
		return err == nil && w != nil && w.Reason == "CrashLoopBackOff"
	})
	waitPod(t, c, "crash", "Ready after two restarts", restarted(2))
	ats := events.of("crash")
	var second time.Time
	for _, s := range ats {
		if s.name == "restarted" {
			second = s.at
		}
	}
	if d := second.Sub(killed); d < backoff-50*time.Millisecond {
		t.Errorf("second restart %v after the second kill, want at least the %v back-off", d, backoff)
	}
	want := []string{"killed", "restarted", "killed", "restarted"}
	if got := events.names("crash"); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("events %v, want %v", got, want)
	}
}

func TestKillAndHangErrors(t *testing.T) {
	t.Parallel()
	c, k, _ := node(t, Config{})
	createPod(t, c, "never-listens", withArgs("--startup-delay=1h"))
	waitPod(t, c, "never-listens", "running", func(p *corev1.Pod, err error) bool {
		return err == nil && p.Status.ContainerStatuses != nil && p.Status.ContainerStatuses[0].State.Running != nil
	})
	if err := k.Kill("default", "nope"); !errors.Is(err, ErrNoPod) {
		t.Errorf("Kill of a missing pod: %v, want ErrNoPod", err)
	}
	if err := k.Hang("default", "never-listens", true); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Hang before the server listens: %v, want ErrNotRunning", err)
	}
	c2, k2, _ := node(t, Config{RestartBackoff: time.Hour})
	createPod(t, c2, "once", func(p *corev1.Pod) { p.Spec.RestartPolicy = corev1.RestartPolicyNever })
	waitPod(t, c2, "once", "Ready", func(p *corev1.Pod, err error) bool { return err == nil && cluster.IsPodReady(p) })
	if err := k2.Kill("default", "once"); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, c2, "once", "Failed", func(p *corev1.Pod, err error) bool { return err == nil && p.Status.Phase == corev1.PodFailed })
	if term := p.Status.ContainerStatuses[0].State.Terminated; term == nil || term.ExitCode != 137 || p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("restartPolicy Never after a kill: %+v, want terminated with 137 and no restart", p.Status.ContainerStatuses[0])
	}
	if err := k2.Kill("default", "once"); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Kill of an exited container: %v, want ErrNotRunning", err)
	}
}

func TestHang(t *testing.T) {
	t.Parallel()
	events := &timeline{}
	c, k, _ := node(t, Config{Events: events.record})
	p := readyPod(t, c, "stuck", nil)
	addr := p.Status.PodIP + ":8471"
	client := pricingv1.NewPricingClient(podtest.Dial(t, addr, clientSource(c)))
	call := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := client.GetPrice(ctx, &pricingv1.GetPriceRequest{Sku: "a"})
		return err
	}
	if err := call(); err != nil {
		t.Fatal(err)
	}
	if err := k.Hang("default", "stuck", true); err != nil {
		t.Fatal(err)
	}
	if err := call(); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("call to a hung pod: %v, want DEADLINE_EXCEEDED", err)
	}
	if got := podtest.Connect(addr); got != "timeout" {
		t.Errorf("connect to a hung pod: %s, want timeout", got)
	}
	if err := k.Hang("default", "stuck", false); err != nil {
		t.Fatal(err)
	}
	if err := call(); err != nil {
		t.Errorf("call after the hang: %v", err)
	}
	if got := strings.Join(events.names("stuck"), " "); got != "hung unhung" {
		t.Errorf("events %q, want hung unhung", got)
	}
}

// TestLivenessRestartsHungPod: a hung container fails its liveness probe
// and is restarted: SIGTERM (ignored by the hung process), the hard stop
// after the probe's own grace period (raised to the kubelet's 2s minimum),
// a new container that is not hung.
func TestLivenessRestartsHungPod(t *testing.T) {
	t.Parallel()
	events := &timeline{}
	c, k, _ := node(t, Config{Events: events.record})
	one := int64(1)
	p := readyPod(t, c, "live", all(withGrace(30), func(p *corev1.Pod) {
		p.Spec.Containers[0].LivenessProbe = &corev1.Probe{PeriodSeconds: 1, FailureThreshold: 2, SuccessThreshold: 1, TimeoutSeconds: 1,
			TerminationGracePeriodSeconds: &one,
			ProbeHandler:                  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8471)}}}
	}))
	if err := k.Hang("default", "live", true); err != nil {
		t.Fatal(err)
	}
	after := waitPod(t, c, "live", "a restart", func(p *corev1.Pod, err error) bool {
		return err == nil && cluster.IsPodReady(p) && p.Status.ContainerStatuses[0].RestartCount == 1
	})
	if last := after.Status.ContainerStatuses[0].LastTerminationState.Terminated; last == nil || last.ExitCode != 137 {
		t.Errorf("lastState.terminated = %+v, want 137 (stopped hard)", last)
	}
	if after.Status.PodIP != p.Status.PodIP {
		t.Errorf("IP changed from %s to %s", p.Status.PodIP, after.Status.PodIP)
	}
	want := []string{"hung", "sigterm", "hard-stop", "restarted"}
	if got := events.names("live"); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("events %v, want %v", got, want)
	}
	sigterm, _ := events.first("live", "sigterm")
	hard, _ := events.first("live", "hard-stop")
	if d := hard.Sub(sigterm); d < 1900*time.Millisecond || d > 5*time.Second {
		t.Errorf("hard stop %v after SIGTERM, want the 2s minimum grace", d)
	}
	if got := podtest.Connect(p.Status.PodIP + ":8471"); got != "connected" {
		t.Errorf("restarted container: connect %s", got)
	}
}

// TestProbeFailureRestarts: a failing liveness or startup probe on a
// healthy process stops it gracefully (exit 0) and restarts it: at once the
// first time, after the back-off the next.
func TestProbeFailureRestarts(t *testing.T) {
	t.Parallel()
	bogus := "no.such.Service"
	once := func(h corev1.ProbeHandler) *corev1.Probe {
		return &corev1.Probe{PeriodSeconds: 1, FailureThreshold: 1, SuccessThreshold: 1, TimeoutSeconds: 1, ProbeHandler: h}
	}
	tests := []struct {
		name string
		mod  func(*corev1.Container)
	}{
		{name: "liveness", mod: func(c *corev1.Container) {
			c.LivenessProbe = once(corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 8471, Service: &bogus}})
		}},
		{name: "startup", mod: func(c *corev1.Container) {
			c.StartupProbe = once(corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(9)}})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			events := &timeline{}
			c, _, _ := node(t, Config{Events: events.record, RestartBackoff: time.Hour})
			createPod(t, c, "sick", func(p *corev1.Pod) { tt.mod(&p.Spec.Containers[0]) })
			p := waitPod(t, c, "sick", "second exit in back-off", func(p *corev1.Pod, err error) bool {
				if err != nil || len(p.Status.ContainerStatuses) == 0 {
					return false
				}
				w := p.Status.ContainerStatuses[0].State.Waiting
				return w != nil && w.Reason == "CrashLoopBackOff"
			})
			cs := p.Status.ContainerStatuses[0]
			if cs.RestartCount != 1 || cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 0 {
				t.Errorf("status %+v, want one restart and a graceful exit (0)", cs)
			}
			if !strings.Contains(cs.State.Waiting.Message, "back-off 1h0m0s") {
				t.Errorf("message %q, want the back-off", cs.State.Waiting.Message)
			}
			if p.Status.Phase != corev1.PodRunning || cluster.IsPodReady(p) {
				t.Errorf("phase %s, ready %v; want Running and not Ready", p.Status.Phase, cluster.IsPodReady(p))
			}
			want := "sigterm graceful-stop-done restarted sigterm graceful-stop-done"
			if got := strings.Join(events.names("sick"), " "); got != want {
				t.Errorf("events %q, want %q", got, want)
			}
		})
	}
}

// TestStartupProbeGates: until the startup probe succeeds, the container
// is not started, readiness and liveness are not probed (a liveness probe
// that would fail at once does not restart it), and it is not Ready.
func TestStartupProbeGates(t *testing.T) {
	t.Parallel()
	c, _, _ := node(t, Config{})
	var mu sync.Mutex
	var seen []string // started/ready per status
	createPod(t, c, "slow", all(withArgs("--startup-delay=1500ms"), func(p *corev1.Pod) {
		tcp := corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8471)}}
		ct := &p.Spec.Containers[0]
		ct.StartupProbe = &corev1.Probe{PeriodSeconds: 1, FailureThreshold: 10, SuccessThreshold: 1, TimeoutSeconds: 1, ProbeHandler: tcp}
		ct.LivenessProbe = &corev1.Probe{PeriodSeconds: 1, FailureThreshold: 1, SuccessThreshold: 1, TimeoutSeconds: 1, ProbeHandler: tcp}
		ct.ReadinessProbe = &corev1.Probe{PeriodSeconds: 1, FailureThreshold: 1, SuccessThreshold: 1, TimeoutSeconds: 1,
			ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 8471}}}
	}))
	p := waitPod(t, c, "slow", "Ready", func(p *corev1.Pod, err error) bool {
		if err != nil || len(p.Status.ContainerStatuses) == 0 {
			return false
		}
		cs := p.Status.ContainerStatuses[0]
		mu.Lock()
		seen = append(seen, fmt.Sprintf("started=%v ready=%v", cs.Started != nil && *cs.Started, cluster.IsPodReady(p)))
		mu.Unlock()
		return cluster.IsPodReady(p)
	})
	if n := p.Status.ContainerStatuses[0].RestartCount; n != 0 {
		t.Errorf("restartCount %d: liveness probed before the startup probe succeeded", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if seen[0] != "started=false ready=false" {
		t.Errorf("first status %s, want not started and not ready", seen[0])
	}
	for _, s := range seen {
		if s == "started=false ready=true" {
			t.Errorf("Ready before started: %v", seen)
			break
		}
	}
}

// TestDeadAddresses: a deleted pod's address refuses connects by default
// and times them out when blackholed; a blackholed IP stays allocated
// until the kubelet stops.
func TestDeadAddresses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		mode  string
		want  string
		inUse int
	}{
		{name: "refuse", mode: "", want: "refused", inUse: 0},
		{name: "blackhole", mode: DeadBlackhole, want: "timeout", inUse: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, _, stop := node(t, Config{DeadAddress: tt.mode})
			p := readyPod(t, c, "gone", all(withGrace(1), withArgs("--http-port=8080")))
			deletePod(t, c, "gone")
			waitGone(t, c, "gone")
			addr := p.Status.PodIP + ":8471"
			for _, a := range []string{addr, p.Status.PodIP + ":8080"} {
				if got := podtest.Connect(a); got != tt.want {
					t.Errorf("connect to a deleted pod's address %s: %s, want %s", a, got, tt.want)
				}
			}
			if n := c.PodIPs().InUse(); n != tt.inUse {
				t.Errorf("%d pod IPs in use after deletion, want %d", n, tt.inUse)
			}
			stop()
			if n := c.PodIPs().InUse(); n != 0 {
				t.Errorf("%d pod IPs in use after the kubelet stopped, want 0", n)
			}
			if got := podtest.Connect(addr); got != "refused" {
				t.Errorf("connect after the kubelet stopped: %s, want refused", got)
			}
		})
	}
}

func TestUnknownDeadAddress(t *testing.T) {
	c, err := cluster.New(cluster.Config{Seed: 1, PodCIDR: netip.MustParsePrefix("127.205.250.0/24")})
	if err != nil {
		t.Fatal(err)
	}
	k := New(c.Client(), c.Factory(), Config{PodIPs: c.PodIPs(), DeadAddress: "drop"})
	if err := k.Run(context.Background()); err == nil || !strings.Contains(err.Error(), `"drop"`) {
		t.Errorf("Run with DeadAddress drop: %v, want an error naming it", err)
	}
}
