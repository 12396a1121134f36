package kubernetes

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/resolver"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

// A clientset, real or fake, is a Client: WithClient takes one as is.
var (
	_ Client = kubernetes.Interface(nil)
	_ Client = (*fake.Clientset)(nil)
)

// TestTypedClients: the Client the Builder builds from a kubeconfig lists
// and watches EndpointSlices under /apis/discovery.k8s.io/v1 and gets the
// Service under /api/v1 (here to say it is missing), with the resolver's
// user agent on every request.
func TestTypedClients(t *testing.T) {
	var (
		mu    sync.Mutex
		calls []string // "METHOD path?watch"
		agent []string // the User-Agents seen
	)
	stop := make(chan struct{})
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		mu.Lock()
		calls = append(calls, fmt.Sprintf("%s %s watch=%s", r.Method, r.URL.Path, q.Get("watch")))
		agent = append(agent, r.UserAgent())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/apis/discovery.k8s.io/v1/namespaces/shop/endpointslices" && q.Get("watch") == "true":
			if q.Get("sendInitialEvents") == "true" { // a watch-list request: no slices, then the end of them
				fmt.Fprint(w, `{"type":"BOOKMARK","object":{"kind":"EndpointSlice","apiVersion":"discovery.k8s.io/v1",`+
					`"metadata":{"resourceVersion":"1","annotations":{"k8s.io/initial-events-end":"true"}}}}`+"\n")
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-stop:
			}
		case r.URL.Path == "/apis/discovery.k8s.io/v1/namespaces/shop/endpointslices":
			fmt.Fprint(w, `{"kind":"EndpointSliceList","apiVersion":"discovery.k8s.io/v1","metadata":{"resourceVersion":"1"},"items":[]}`)
		default:
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"message":"%s not found"}`, r.URL.Path)
		}
	}))
	t.Cleanup(api.Close)
	t.Cleanup(func() { close(stop) }) // before api.Close: it waits for the watch's handler
	u, _ := url.Parse("kubernetes:///pricing:grpc")
	cc := newFakeCC()
	r, err := NewBuilder(WithKubeconfig(writeKubeconfig(t, api.URL)), WithLogger(nil)).Build(resolver.Target{URL: *u}, cc, resolver.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	cc.waitError(t, "Service shop/pricing not found")

	mu.Lock()
	defer mu.Unlock()
	for _, want := range []string{
		"GET /apis/discovery.k8s.io/v1/namespaces/shop/endpointslices watch=true",
		"GET /api/v1/namespaces/shop/services/pricing watch=",
	} {
		if !slices.Contains(calls, want) {
			t.Errorf("no request %q; the API server saw:\n%s", want, strings.Join(calls, "\n"))
		}
	}
	for _, a := range agent {
		if !strings.HasPrefix(a, "grpc-kubernetes-resolver ") {
			t.Errorf("User-Agent %q, want the resolver's", a)
		}
	}
}

// TestImports: the package links the typed clients of the two API groups
// it uses, never k8s.io/client-go/kubernetes (the clientset, which links
// every group's client: 12.9 MB more in the example's binary) nor another
// group's typed client.
func TestImports(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to list the imports: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	allowed := []string{
		"k8s.io/client-go/kubernetes/scheme", // the typed clients' codecs
		"k8s.io/client-go/kubernetes/typed/core/v1",
		"k8s.io/client-go/kubernetes/typed/discovery/v1",
	}
	forbidden := func(pkg string) bool {
		return (pkg == "k8s.io/client-go/kubernetes" || strings.HasPrefix(pkg, "k8s.io/client-go/kubernetes/")) && !slices.Contains(allowed, pkg)
	}
	for line := range strings.Lines(string(out)) {
		pkg, imports, _ := strings.Cut(strings.TrimSpace(line), " ")
		if forbidden(pkg) {
			continue // reported where the first one is imported
		}
		for _, imp := range strings.Fields(imports) {
			if forbidden(imp) {
				t.Errorf("%s imports %s; of k8s.io/client-go/kubernetes, the resolver may link only %s", pkg, imp, strings.Join(allowed, ", "))
			}
		}
	}
}
