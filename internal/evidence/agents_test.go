package evidence_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/pinlab/pinlab/internal/agent"
	"github.com/pinlab/pinlab/internal/evidence"
)

// agentAPI is an API server for one pod, shop/pricing-0 at 10.0.0.5: GET
// the pod, PATCH its ephemeralcontainers, GET its agent's log (a reading
// every 20 ms, each connection's bytes growing by 1000 a reading, at most
// 200 readings).
type agentAPI struct {
	mu       sync.Mutex
	pod      corev1.Pod
	patches  []string
	state    string // the agent's state after a PATCH: "running", "ErrImagePull"
	forbid   string // a verb+resource to answer 403, e.g. "patch ephemeralcontainers"
	logReads int
}

func newAgentAPI(t *testing.T, withAgent bool) (*agentAPI, *rest.Config) {
	a := &agentAPI{state: "running", pod: corev1.Pod{
		TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "pricing-0", Namespace: "shop"},
		Status:     corev1.PodStatus{PodIP: "10.0.0.5", Phase: corev1.PodRunning},
	}}
	if withAgent {
		a.addAgent(evidence.AgentContainer, "pinlab-agent:v1", "running")
	}
	srv := httptest.NewServer(http.HandlerFunc(a.serve))
	t.Cleanup(srv.Close)
	return a, &rest.Config{Host: srv.URL}
}

func (a *agentAPI) addAgent(name, image, state string) {
	a.pod.Spec.EphemeralContainers = append(a.pod.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: name, Image: image}})
	st := corev1.ContainerStatus{Name: name, Image: image}
	if state == "running" {
		st.State.Running = &corev1.ContainerStateRunning{}
	} else {
		st.State.Waiting = &corev1.ContainerStateWaiting{Reason: state, Message: "pull access denied for " + image}
	}
	a.pod.Status.EphemeralContainerStatuses = append(a.pod.Status.EphemeralContainerStatuses, st)
}

func (a *agentAPI) serve(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	deny := func(what string) bool {
		if a.forbid != what {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: "Failure", Reason: metav1.StatusReasonForbidden, Code: 403,
			Message: `pods "pricing-0" is forbidden: User "dev" cannot ` + what})
		return true
	}
	base := "/api/v1/namespaces/shop/pods/pricing-0"
	switch {
	case r.Method == http.MethodGet && r.URL.Path == base:
		if deny("get pods") {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(a.pod)
	case r.Method == http.MethodPatch && r.URL.Path == base+"/ephemeralcontainers":
		if deny("patch pods/ephemeralcontainers") {
			return
		}
		b, _ := io.ReadAll(r.Body)
		a.patches = append(a.patches, string(b))
		var patch struct {
			Spec struct {
				EphemeralContainers []corev1.EphemeralContainer `json:"ephemeralContainers"`
			} `json:"spec"`
		}
		if err := json.Unmarshal(b, &patch); err != nil || len(patch.Spec.EphemeralContainers) != 1 {
			http.Error(w, "bad patch", http.StatusBadRequest)
			return
		}
		a.addAgent(patch.Spec.EphemeralContainers[0].Name, patch.Spec.EphemeralContainers[0].Image, a.state)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(a.pod)
	case r.Method == http.MethodGet && r.URL.Path == base+"/log":
		if deny("get pods/log") {
			return
		}
		a.logReads++
		if !strings.HasPrefix(r.URL.Query().Get("container"), evidence.AgentContainer) || r.URL.Query().Get("follow") != "true" {
			http.Error(w, "want container=pinlab-agent&follow=true", http.StatusBadRequest)
			return
		}
		a.mu.Unlock()
		streamReadings(w, r)
		a.mu.Lock()
	default:
		http.Error(w, "not here: "+r.Method+" "+r.URL.Path, http.StatusNotFound)
	}
}

// streamReadings writes agent readings: two client connections on port
// 8471 and one of the pod's own (local port 40000), bytes growing.
func streamReadings(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	start := time.Now()
	if r.URL.Query().Get("tailLines") == "1" {
		// The last line from before: a reading with a connection since
		// gone, which Sample must not return.
		old, _ := json.Marshal(agent.Reading{V: agent.FormatVersion, At: start.Add(-time.Hour), Source: "sock_diag", Bytes: true,
			Conns: []agent.Conn{{ID: "00000000000000ff", Local: "10.0.0.5:8471", Remote: "10.0.9.9:1", RX: 1}}})
		w.Write(append(old, '\n'))
	}
	fmt.Fprintln(w, "a line that is not a reading")
	fmt.Fprintln(w, `{"v":2,"at":"2026-12-04T00:00:00Z","conns":[]}`)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for k := int64(1); k <= 200; k++ {
		rd := agent.Reading{V: 1, At: start.Add(time.Duration(k) * time.Second), Source: "sock_diag", Bytes: true, Conns: []agent.Conn{
			{ID: "00000000000000a1", Local: "10.0.0.5:8471", Remote: "10.0.1.7:40100", RX: 1000 * k, TX: 500 * k},
			{ID: "00000000000000a2", Local: "10.0.0.5:8471", Remote: "10.0.1.8:40200", RX: 10 * k},
			{ID: "00000000000000a3", Local: "10.0.0.5:40000", Remote: "10.0.2.1:5432", RX: 99999 * k},
		}}
		b, _ := json.Marshal(rd)
		w.Write(append(b, '\n'))
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
	}
}

func podByIP(ip netip.Addr) (string, string, bool) {
	if ip.String() == "10.0.0.5" {
		return "shop", "pricing-0", true
	}
	return "", "", false
}

var agentPods = []evidence.Pod{{Name: "pricing-0", IP: "10.0.0.5", Addr: "10.0.0.5:8471"}}

// TestAgentsPrepare: an agent found is reused; one is added only with an
// image and the user's consent, with the Restricted security context; a
// pull error and RBAC refusals are named, within a bounded time.
func TestAgentsPrepare(t *testing.T) {
	cases := []struct {
		name      string
		withAgent bool
		broken    bool // a pinlab-agent whose image cannot be pulled is there
		image     string
		consent   bool
		state     string // the added agent's state
		forbid    string
		want      string // why pricing-0 has no agent; "" it has one
		patches   int
		container string // the container patched in; "" means pinlab-agent
	}{
		{name: "agent running: reused", withAgent: true, image: "reg.example/pinlab-agent:v1", consent: true, want: ""},
		{name: "no agent, no image", want: "no pinlab-agent runs in it"},
		{name: "no agent, no consent", image: "reg.example/pinlab-agent:v1", want: "no pinlab-agent runs in it"},
		{name: "added with consent", image: "reg.example/pinlab-agent:v1", consent: true, state: "running", patches: 1},
		{name: "image not pullable", image: "reg.example/pinlab-agent:nope", consent: true, state: "ErrImagePull", patches: 1,
			want: "its pinlab-agent container (image reg.example/pinlab-agent:nope) does not run: waiting: ErrImagePull: pull access denied"},
		{name: "patch forbidden", image: "reg.example/pinlab-agent:v1", consent: true, forbid: "patch pods/ephemeralcontainers",
			want: "the API server forbids it (RBAC: patch pods/ephemeralcontainers)"},
		{name: "get forbidden", image: "reg.example/pinlab-agent:v1", consent: true, forbid: "get pods", want: "(RBAC: get pods)"},
		{name: "broken agent, no consent", broken: true, image: "reg.example/pinlab-agent:v1",
			want: "its pinlab-agent container (image reg.example/pinlab-agent:typo) does not run (waiting: ErrImagePull: pull access denied for reg.example/pinlab-agent:typo), and an ephemeral container can be neither removed nor restarted"},
		{name: "broken agent, same image", broken: true, image: "reg.example/pinlab-agent:typo", consent: true,
			want: "another of the same image would not run either"},
		{name: "broken agent, another added", broken: true, image: "reg.example/pinlab-agent:v1", consent: true, state: "running", patches: 1, container: "pinlab-agent-1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			api, cfg := newAgentAPI(t, tc.withAgent)
			api.state, api.forbid = cmp.Or(tc.state, "running"), tc.forbid
			if tc.broken {
				api.addAgent(evidence.AgentContainer, "reg.example/pinlab-agent:typo", "ErrImagePull")
			}
			asked := 0
			ag := &evidence.Agents{Config: cfg, Pod: podByIP, Image: tc.image, Confirm: func(ns string, pods []string, image string) bool {
				asked++
				if ns != "shop" || strings.Join(pods, ",") != "pricing-0" || image != tc.image {
					t.Errorf("Confirm(%q, %v, %q)", ns, pods, image)
				}
				return tc.consent
			}}
			defer ag.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			why, err := ag.Prepare(ctx, "shop", agentPods)
			if err != nil {
				t.Fatal(err)
			}
			got := why["pricing-0"]
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("why = %q, want %q", got, tc.want)
			}
			api.mu.Lock()
			defer api.mu.Unlock()
			if len(api.patches) != tc.patches {
				t.Fatalf("%d patches, want %d: %q", len(api.patches), tc.patches, api.patches)
			}
			if tc.withAgent && asked > 0 {
				t.Errorf("asked for consent %d times with an agent running", asked)
			}
			if tc.patches == 1 {
				var patch struct {
					Spec struct {
						EphemeralContainers []corev1.EphemeralContainer `json:"ephemeralContainers"`
					} `json:"spec"`
				}
				json.Unmarshal([]byte(api.patches[0]), &patch)
				c := patch.Spec.EphemeralContainers[0]
				sc := c.SecurityContext
				if c.Name != cmp.Or(tc.container, "pinlab-agent") || c.Image != tc.image || sc == nil || !*sc.RunAsNonRoot || *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem || len(sc.Capabilities.Drop) != 1 {
					t.Errorf("patched container %+v", c)
				}
			}
		})
	}
}

// TestAgentsSample: each Sample is a newer reading, with only the
// connections on the sampled port, bytes both ways.
func TestAgentsSample(t *testing.T) {
	_, cfg := newAgentAPI(t, true)
	ag := &evidence.Agents{Config: cfg, Pod: podByIP}
	defer ag.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	addr := netip.MustParseAddrPort("10.0.0.5:8471")
	a, err := ag.Sample(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	b, err := ag.Sample(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	if !a.At.After(time.Now().Add(-time.Minute)) || a.Sockets[0xff].Remote != "" {
		t.Errorf("first reading at %v with %v: want one taken after the stream opened, not the tail line", a.At, a.Sockets)
	}
	if !b.At.After(a.At) {
		t.Errorf("second reading at %v, first at %v: want a newer one", b.At, a.At)
	}
	if len(b.Sockets) != 2 {
		t.Fatalf("sockets %v, want the 2 on port 8471", b.Sockets)
	}
	k := b.At.Sub(a.At).Round(time.Second) / time.Second
	if got := b.Sockets[0xa1].Streams - a.Sockets[0xa1].Streams; got != 1500*int64(k) {
		t.Errorf("socket a1 grew by %d bytes over %d readings, want %d", got, k, 1500*k)
	}
	if b.Sockets[0xa1].Remote != "10.0.1.7:40100" {
		t.Errorf("remote %q", b.Sockets[0xa1].Remote)
	}
	if _, err := ag.Sample(ctx, netip.MustParseAddrPort("10.9.9.9:8471")); err == nil || !strings.Contains(err.Error(), "no pod has the IP 10.9.9.9") {
		t.Errorf("unknown pod: %v", err)
	}
}

// TestAgentsLogForbidden: a log stream the API server refuses is an error
// naming the permission, not a wait until the timeout.
func TestAgentsLogForbidden(t *testing.T) {
	api, cfg := newAgentAPI(t, true)
	api.forbid = "get pods/log"
	ag := &evidence.Agents{Config: cfg, Pod: podByIP}
	defer ag.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	_, err := ag.Sample(ctx, netip.MustParseAddrPort("10.0.0.5:8471"))
	if err == nil || !strings.Contains(err.Error(), "RBAC: get pods/log") {
		t.Errorf("err = %v, want RBAC: get pods/log", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("took %v", time.Since(start))
	}
}
