package evidence_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"

	"github.com/pinlab/pinlab/internal/evidence"
)

// execAPI is an API server for one pod, shop/pricing-0 at 10.0.0.5, whose
// containers are istio-proxy and pricing (port 8471): GET the pod, and
// exec in it with the kubelet's remotecommand code over SPDY (WebSocket
// upgrades refused, as by a proxy), printing out and exiting with code.
type execAPI struct {
	out    string
	stderr string
	code   int
	forbid bool

	mu    sync.Mutex
	execs []string // "container: command" of each exec
}

func startExecAPI(t *testing.T, api *execAPI) *rest.Config {
	pod := corev1.Pod{
		TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "pricing-0", Namespace: "shop", UID: "u1"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "istio-proxy"},
			{Name: "pricing", Ports: []corev1.ContainerPort{{ContainerPort: 8471}}}}},
		Status: corev1.PodStatus{PodIP: "10.0.0.5", Phase: corev1.PodRunning},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/namespaces/shop/pods/pricing-0", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(pod)
	})
	mux.HandleFunc("/api/v1/namespaces/shop/pods/pricing-0/exec", api.serve)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &rest.Config{Host: srv.URL}
}

func (api *execAPI) serve(w http.ResponseWriter, r *http.Request) {
	switch {
	case api.forbid:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Reason: metav1.StatusReasonForbidden, Code: http.StatusForbidden,
			Message: `pods "pricing-0" is forbidden: User "bob" cannot create resource "pods/exec" in API group "" in the namespace "shop"`})
		return
	case r.Method == http.MethodGet:
		http.Error(w, "websocket upgrades are not supported", http.StatusBadRequest)
		return
	}
	// The API server asks the kubelet with its own parameter names.
	q := r.URL.Query()
	for from, to := range map[string]string{"stdin": "input", "stdout": "output", "stderr": "error"} {
		if q.Get(from) == "true" {
			q.Set(to, "1")
		}
	}
	r.URL.RawQuery = q.Encode()
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	remotecommand.ServeExec(w, r, api, "pricing-0", "u1", q.Get("container"), q["command"], opts, time.Minute, 10*time.Second, remotecommand.SupportedStreamingProtocols)
}

// ExecInContainer records the exec and prints the API's output.
func (api *execAPI) ExecInContainer(_ context.Context, _, _, container string, cmd []string, _ io.Reader, out, errw io.WriteCloser, _ bool, _ <-chan remotecommand.TerminalSize, _ time.Duration) error {
	api.mu.Lock()
	api.execs = append(api.execs, container+": "+strings.Join(cmd, " "))
	api.mu.Unlock()
	io.WriteString(out, api.out)
	io.WriteString(errw, api.stderr)
	if api.code != 0 {
		return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with exit code %d", api.code), Code: api.code}
	}
	return nil
}

const procHeader = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"

// procRow is one /proc/net/tcp row (the addresses in hex as printed).
func procRow(local, remote, state string, inode int) string {
	return fmt.Sprintf("   0: %s %s %s 00000000:00000000 00:00000000 00000000  1000        0 %d 1 0000000000000000 20 4 30 10 -1\n", local, remote, state, inode)
}

// TestExecSample: Exec reads the server container's TCP tables through
// pods/exec (the container that declares the port, over SPDY after the
// WebSocket upgrade is refused) and keeps the established connections on
// the sampled port, IPv4 and IPv4-mapped alike, each open for the time
// since Exec first saw it; in the byte order that gives the pod's IP.
func TestExecSample(t *testing.T) {
	le := procHeader +
		procRow("00000000:2117", "00000000:0000", "0A", 100) + // listening
		procRow("0500000A:2117", "0701000A:9C40", "01", 101) + // 10.0.1.7:40000
		procRow("0500000A:2117", "0701000A:9C41", "06", 0) + // TIME_WAIT
		procRow("0500000A:2382", "0701000A:9C42", "01", 102) + // another port
		procRow("0600000A:2117", "0701000A:9C44", "01", 104) + // another pod's (10.0.0.6), sharing the namespace
		procRow("0100007F:2117", "0600007F:9C45", "01", 105) + // from an inbound sidecar, 127.0.0.6
		procHeader +
		procRow("0000000000000000FFFF00000500000A:2117", "0000000000000000FFFF00000801000A:9C43", "01", 103) // ::ffff:10.0.1.8
	be := procHeader + procRow("0A000005:2117", "0A000107:9C40", "01", 101)
	for _, tc := range []struct {
		name, out string
		want      []string // remotes
	}{
		{"little-endian, both tables", le, []string{"10.0.1.7:40000", "10.0.1.8:40003", "127.0.0.6:40005"}},
		{"big-endian", be, []string{"10.0.1.7:40000"}},
		{"big-endian, only an inbound sidecar's", procHeader + procRow("7F000001:2117", "7F000006:9C45", "01", 105), []string{"127.0.0.6:40005"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := &execAPI{out: tc.out}
			now := time.Unix(1000, 0)
			ex := &evidence.Exec{Config: startExecAPI(t, api), Pod: func(netip.Addr) (string, string, bool) { return "shop", "pricing-0", true },
				Now: func() time.Time { return now }}
			addr := netip.MustParseAddrPort("10.0.0.5:8471")
			first, err := ex.Sample(context.Background(), addr)
			if err != nil {
				t.Fatal(err)
			}
			now = now.Add(30 * time.Millisecond) // the sockets' age between the two readings
			second, err := ex.Sample(context.Background(), addr)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for id, s := range second.Sockets {
				got = append(got, s.Remote)
				if s.Streams != 30 || first.Sockets[id].Streams != 0 {
					t.Errorf("socket %d: %d ms open at the second reading, %d at the first; want 30 and 0", id, s.Streams, first.Sockets[id].Streams)
				}
			}
			slices.Sort(got)
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("remotes %v, want %v", got, tc.want)
			}
			if api.execs[0] != "pricing: cat /proc/net/tcp /proc/net/tcp6" {
				t.Errorf("exec %q, want cat of both tables in container pricing", api.execs[0])
			}
		})
	}
}

// TestExecErrors: a container without cat, a kernel without tcp6 (the
// tcp table printed, then an error), RBAC's refusal.
func TestExecErrors(t *testing.T) {
	table := procHeader + procRow("0500000A:2117", "0701000A:9C40", "01", 101)
	for _, tc := range []struct {
		name string
		api  *execAPI
		want string // in the error; empty: none
	}{
		{name: "no cat", api: &execAPI{stderr: `exec: "cat": executable file not found in $PATH`, code: 127},
			want: "exec: `cat /proc/net/tcp /proc/net/tcp6` in its pricing container exited with code 127: exec: \"cat\": executable file not found in $PATH"},
		{name: "no cat, nothing said", api: &execAPI{code: 127}, want: "exited with code 127: command terminated with exit code 127"},
		{name: "no tcp6", api: &execAPI{out: table, stderr: "cat: /proc/net/tcp6: No such file or directory", code: 1}},
		{name: "forbidden", api: &execAPI{forbid: true}, want: "exec: in its pricing container: the API server forbids it (RBAC: create pods/exec)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ex := &evidence.Exec{Config: startExecAPI(t, tc.api), Pod: func(netip.Addr) (string, string, bool) { return "shop", "pricing-0", true }}
			s, err := ex.Sample(context.Background(), netip.MustParseAddrPort("10.0.0.5:8471"))
			switch {
			case tc.want == "" && (err != nil || len(s.Sockets) != 1):
				t.Errorf("Sample = %+v, %v; want the one connection of the tcp table", s, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Sample error %v, want one with %q", err, tc.want)
			}
		})
	}
}
