package evidence_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	pricingv1 "github.com/pinlab/pinlab/api/pricing/v1"
	"github.com/pinlab/pinlab/internal/evidence"
	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/podtest"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeSource lists fixed objects.
type fakeSource struct{ objs evidence.Objects }

func (f fakeSource) Objects(context.Context) (evidence.Objects, error) { return f.objs, nil }
func (f fakeSource) String() string                                    { return "fake" }

func readyPod(name, ip string) corev1.Pod {
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Labels: map[string]string{"app": "pricing"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "pricing", Ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: 8471}}}}},
		Status:     corev1.PodStatus{PodIP: ip, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

func objects(pods ...corev1.Pod) evidence.Objects {
	svc := corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "pricing", Namespace: "shop"},
		Spec:       corev1.ServiceSpec{ClusterIP: "127.96.0.20", Selector: map[string]string{"app": "pricing"}, Ports: []corev1.ServicePort{{Name: "grpc", Port: 8471, TargetPort: intstr.FromString("grpc")}}},
	}
	return evidence.Objects{Services: []corev1.Service{svc}, Pods: pods}
}

// TestCollectPartial: one pod serves channelz, one serves gRPC without
// channelz, one accepts connections and never answers: the first is
// measured with its client's connection, the others carry their errors,
// and Collect returns within the stated bounds.
func TestCollectPartial(t *testing.T) {
	good := podtest.Start(t, pod.Config{Name: "good", Addr: netip.MustParseAddrPort("127.203.210.1:8471")})
	plain := grpc.NewServer()
	pricingv1.RegisterPricingServer(plain, pricingv1.UnimplementedPricingServer{})
	pl, err := net.Listen("tcp", "127.203.210.2:8471")
	if err != nil {
		t.Fatal(err)
	}
	go plain.Serve(pl)
	t.Cleanup(plain.Stop)
	silent, err := net.Listen("tcp", "127.203.210.3:8471")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })

	client := podtest.Dial(t, good.Addr().String(), netip.MustParseAddr("127.203.210.9"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := make(chan struct{})
	go func() {
		defer close(calls)
		for ctx.Err() == nil {
			pricingv1.NewPricingClient(client).GetPrice(ctx, &pricingv1.GetPriceRequest{Sku: "a"})
			time.Sleep(5 * time.Millisecond)
		}
	}()
	defer func() { cancel(); <-calls }()

	src := fakeSource{objects(readyPod("good", "127.203.210.1"), readyPod("plain", "127.203.210.2"), readyPod("silent", "127.203.210.3"))}
	start := time.Now()
	ev, err := evidence.Collect(context.Background(), src, evidence.Request{Namespace: "shop", Service: "pricing", Window: 500 * time.Millisecond})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if limit := 500*time.Millisecond + 2*evidence.SampleTimeout + time.Second; took > limit {
		t.Errorf("Collect took %v, want at most %v", took, limit)
	}
	byName := map[string]evidence.Pod{}
	for _, p := range ev.Pods {
		byName[p.Name] = p
	}
	g := byName["good"]
	if g.Err != "" || g.Calls.Started < 10 || len(g.Conns) != 1 || !strings.HasPrefix(g.Conns[0].Remote, "127.203.210.9:") {
		t.Errorf("good pod: %+v; want >= 10 calls and the one connection from 127.203.210.9", g)
	}
	if e := byName["plain"].Err; !strings.Contains(e, "serves no channelz") {
		t.Errorf("plain pod error %q, want it to say it serves no channelz", e)
	}
	if e := byName["silent"].Err; !strings.Contains(e, "timed out") {
		t.Errorf("silent pod error %q, want a timeout", e)
	}
	if len(ev.Problems) != 2 {
		t.Errorf("problems %q, want the two pods", ev.Problems)
	}
}

// TestCollectErrors: no such Service names the ones there; an interrupt
// during the window returns at once with ctx's error.
func TestCollectErrors(t *testing.T) {
	_, err := evidence.Collect(context.Background(), fakeSource{objects()}, evidence.Request{Namespace: "shop", Service: "prices"})
	if !errors.Is(err, evidence.ErrNoService) || !strings.Contains(err.Error(), "Services there: pricing") {
		t.Errorf("no such Service: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	// A pod where nothing listens: its readings fail, and the window
	// goes on until ctx ends.
	_, err = evidence.Collect(ctx, fakeSource{objects(readyPod("gone", "127.203.212.9"))}, evidence.Request{Namespace: "shop", Service: "pricing", Window: time.Minute})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Errorf("interrupted: %v after %v, want ctx's error within 2s", err, time.Since(start))
	}
}

// TestCollectHealth: a pod whose Pricing service turned NOT_SERVING (its
// overall status stays SERVING, as for the kubelet's probe) reads
// NOT_SERVING; a healthy one SERVING.
func TestCollectHealth(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ip      string
		healthy bool
		want    string
	}{
		{"healthy", "127.203.210.4", true, "SERVING"},
		{"unhealthy", "127.203.210.5", false, "NOT_SERVING"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := podtest.Start(t, pod.Config{Name: tc.name, Addr: netip.MustParseAddrPort(tc.ip + ":8471")})
			srv.SetHealthy(tc.healthy)
			src := fakeSource{objects(readyPod(tc.name, tc.ip))}
			ev, err := evidence.Collect(context.Background(), src, evidence.Request{Namespace: "shop", Service: "pricing", Window: 100 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if len(ev.Pods) != 1 || ev.Pods[0].Health != tc.want {
				t.Errorf("pods %+v; want one with health %s", ev.Pods, tc.want)
			}
		})
	}
}

// fakeAgents reads every pod as one client connection whose bytes grow
// by 1000 a reading; Prepare leaves out the pods in none.
type fakeAgents struct {
	mu       sync.Mutex
	none     map[string]string
	prepared int
	reads    map[netip.AddrPort]int64
}

func (f *fakeAgents) Prepare(_ context.Context, _ string, pods []evidence.Pod) (map[string]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.prepared++
	return f.none, nil
}

func (f *fakeAgents) Sample(_ context.Context, addr netip.AddrPort) (evidence.Sample, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.reads == nil {
		f.reads = map[netip.AddrPort]int64{}
	}
	f.reads[addr]++
	n := f.reads[addr]
	return evidence.Sample{At: time.Now(), Sockets: map[int64]evidence.Socket{7: {Remote: "127.203.211.9:5000", Streams: 1000 * n}}}, nil
}

// fakeExec reads every pod but those in fail as one client connection
// open for 1000 ms more each reading.
type fakeExec struct {
	fakeAgents
	fail map[string]string // by IP
}

func (f *fakeExec) Sample(ctx context.Context, addr netip.AddrPort) (evidence.Sample, error) {
	if why := f.fail[addr.Addr().String()]; why != "" {
		return evidence.Sample{}, errors.New(why)
	}
	return f.fakeAgents.Sample(ctx, addr)
}

// TestCollectAgents: the agents read the pods only when some pod serves
// no channelz, then every pod (one unit for all); exec reads them when
// agents cannot, if it reads more pods than channelz answers in; else
// channelz stays and the report says what is missing.
func TestCollectAgents(t *testing.T) {
	podtest.Start(t, pod.Config{Name: "good", Addr: netip.MustParseAddrPort("127.203.211.1:8471")})
	podtest.Start(t, pod.Config{Name: "plain", Addr: netip.MustParseAddrPort("127.203.211.2:8471"), NoChannelz: true})
	podtest.Start(t, pod.Config{Name: "plain2", Addr: netip.MustParseAddrPort("127.203.211.3:8471"), NoChannelz: true})
	for _, tc := range []struct {
		name     string
		pods     []corev1.Pod
		none     map[string]string
		noAgents bool
		execOff  string
		// execUntried: exec must not be tried (agents read every pod).
		execUntried bool
		exec        map[string]string // nil: no exec; else the IPs it cannot read
		prepared    int
		from        string
		problem     string
	}{
		{name: "all serve channelz", pods: []corev1.Pod{readyPod("good", "127.203.211.1")}, from: "channelz"},
		{name: "one without channelz", pods: []corev1.Pod{readyPod("good", "127.203.211.1"), readyPod("plain", "127.203.211.2")}, prepared: 1, from: "agent"},
		{name: "agents in fewer pods than channelz", pods: []corev1.Pod{readyPod("good", "127.203.211.1"), readyPod("plain", "127.203.211.2")},
			none: map[string]string{"plain": "no pinlab-agent runs in it"}, prepared: 1, from: "channelz",
			problem: "no other way reads more pods than channelz answers in (1): pinlab-agent runs in 1 pod (no pinlab-agent runs in it"},
		{name: "one pod without an agent", pods: []corev1.Pod{readyPod("good", "127.203.211.1"), readyPod("plain", "127.203.211.2"), readyPod("plain2", "127.203.211.3")},
			none: map[string]string{"good": "no pinlab-agent runs in it"}, prepared: 1, from: "agent",
			problem: "pod good: no agent: no pinlab-agent runs in it"},
		{name: "no agent anywhere", pods: []corev1.Pod{readyPod("good", "127.203.211.1"), readyPod("plain", "127.203.211.2")},
			none: map[string]string{"good": "no pinlab-agent runs in it", "plain": "no pinlab-agent runs in it"}, prepared: 1, from: "channelz",
			problem: "1 of the 2 pods serve no channelz (plain) and no other way reads more pods than channelz answers in (1): pinlab-agent runs in 0 pods (no pinlab-agent runs in it; --agent-image REF --yes adds it); only channelz's pods are read"},
		{name: "exec off", pods: []corev1.Pod{readyPod("good", "127.203.211.1"), readyPod("plain", "127.203.211.2")},
			none: map[string]string{"good": "no pinlab-agent runs in it", "plain": "no pinlab-agent runs in it"}, execOff: "--no-exec", prepared: 1, from: "channelz",
			problem: "--agent-image REF --yes adds it); exec is off (--no-exec); only channelz's pods are read"},
		{name: "agents in some pods, exec in all", pods: []corev1.Pod{readyPod("plain", "127.203.211.2"), readyPod("plain2", "127.203.211.3"), readyPod("good", "127.203.211.1")},
			none: map[string]string{"good": "no pinlab-agent runs in it"}, exec: map[string]string{}, prepared: 1, from: "exec"},
		{name: "agents in every pod, exec not tried", pods: []corev1.Pod{readyPod("plain", "127.203.211.2"), readyPod("plain2", "127.203.211.3")},
			exec: map[string]string{}, execUntried: true, prepared: 1, from: "agent"},
		{name: "agents and exec in as many pods", pods: []corev1.Pod{readyPod("plain", "127.203.211.2"), readyPod("plain2", "127.203.211.3"), readyPod("good", "127.203.211.1")},
			none: map[string]string{"good": "no pinlab-agent runs in it"}, exec: map[string]string{"127.203.211.1": "exec: has no cat"}, prepared: 1, from: "agent",
			problem: "1 pod without a pinlab-agent that runs, not read (named above; --agent-image REF --yes adds one where it can); exec read 2 pods (it read plain)"},
		{name: "exec where no agent runs", pods: []corev1.Pod{readyPod("good", "127.203.211.1"), readyPod("plain", "127.203.211.2")},
			none: map[string]string{"good": "no pinlab-agent runs in it", "plain": "no pinlab-agent runs in it"}, exec: map[string]string{}, prepared: 1, from: "exec"},
		{name: "exec only", pods: []corev1.Pod{readyPod("good", "127.203.211.1"), readyPod("plain", "127.203.211.2"), readyPod("plain2", "127.203.211.3")},
			noAgents: true, exec: map[string]string{"127.203.211.1": "exec: has no cat"}, from: "exec", problem: "pod good: exec: has no cat"},
		{name: "exec in no more pods than channelz", pods: []corev1.Pod{readyPod("good", "127.203.211.1"), readyPod("plain", "127.203.211.2")},
			noAgents: true, exec: map[string]string{"127.203.211.2": "`cat` exited with code 127"}, from: "channelz",
			problem: "(1): exec read 1 pod (`cat` exited with code 127); only channelz's pods are read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ag := &fakeAgents{none: tc.none}
			req := evidence.Request{Namespace: "shop", Service: "pricing", Window: 300 * time.Millisecond, Agents: ag}
			if tc.noAgents {
				req.Agents = nil
			}
			fe := &fakeExec{fail: tc.exec}
			if tc.exec != nil {
				req.Exec = fe
			}
			req.ExecOff = tc.execOff
			ev, err := evidence.Collect(context.Background(), fakeSource{objects(tc.pods...)}, req)
			if err != nil {
				t.Fatal(err)
			}
			if tc.execUntried && len(fe.reads) > 0 {
				t.Errorf("exec read %d pods; agents read every pod, exec must not be tried", len(fe.reads))
			}
			if ag.prepared != tc.prepared || ev.RatesFrom != tc.from {
				t.Fatalf("prepared %d times, rates from %q; want %d, %q", ag.prepared, ev.RatesFrom, tc.prepared, tc.from)
			}
			unit := map[string]string{"agent": "bytes", "exec": evidence.UnitConnMs}[tc.from]
			if unit != "" {
				for _, p := range ev.Pods {
					if tc.none[p.Name] != "" && tc.from == "agent" || p.Err != "" && tc.exec[p.IP] != "" {
						continue
					}
					if ev.Unit != unit || p.Err != "" || len(p.Conns) != 1 || p.Calls.Started != p.Conns[0].Calls || p.Calls.Started < 1000 {
						t.Errorf("pod %s: unit %q, %+v; want its connection's figure as its count, in %s", p.Name, ev.Unit, p, unit)
					}
				}
			}
			if tc.problem != "" && !strings.Contains(strings.Join(ev.Problems, "\n"), tc.problem) {
				t.Errorf("problems %q, want %q", ev.Problems, tc.problem)
			}
		})
	}
}
