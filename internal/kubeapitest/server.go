// Package kubeapitest serves a clientset's EndpointSlices over the
// Kubernetes API's HTTP list and watch, and its Services and Pods over
// list, so that a test drives HTTP clients from the same objects as a
// consumer of the clientset (a fake one from
// k8s.io/client-go/kubernetes/fake): clients that speak that HTTP
// themselves (sercand/kuberesolver) and client-go itself (a resolver built
// from a kubeconfig, `pinlab diagnose --kubeconfig`).
//
// It is not an API server: it answers the GETs below, JSON only, with no
// authentication or field selectors, and watch-list only after
// SetWatchList:
//
//	/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices?labelSelector=...[&watch=true&resourceVersion=...]
//	/apis/discovery.k8s.io/v1/watch/namespaces/{ns}/endpointslices?labelSelector=...
//	/api/v1/namespaces/{ns}/services
//	/api/v1/namespaces/{ns}/pods and /api/v1/pods (every namespace)
//
// so kuberesolver and client-go (a rest.Config or kubeconfig whose server
// is URL) both work on it.
//
// A watch relays the clientset's watch, one JSON event per line, flushed
// each: without a resourceVersion it starts, as the real API server's does,
// with an ADDED event per object that matches.
package kubeapitest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// Server is a loopback HTTP server (httptest, 127.0.0.1:0) over a
// clientset's EndpointSlices. Its methods are safe for concurrent use.
type Server struct {
	// URL is the server's base URL, http://127.0.0.1:port.
	URL string

	api kubernetes.Interface
	srv *httptest.Server

	mu        sync.Mutex
	status    int // answer every request with this status; 0: serve
	answered  map[int]int
	stop      []chan bool // open watches, closed by Fail
	requests  []Request
	watchList bool // serve sendInitialEvents
}

// SetWatchList makes the server serve watch-list requests (a watch with
// sendInitialEvents=true, as client-go sends by default since v0.35), as
// an API server with the WatchList feature does: an ADDED event per
// object, then a BOOKMARK annotated k8s.io/initial-events-end, then the
// changes. Off by default: such a request gets 422, as from an API server
// without the feature, and client-go falls back to a list and a watch.
func (s *Server) SetWatchList(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.watchList = on
}

// Request is one request the server got.
type Request struct {
	Watch         bool   // a watch, else a list
	WatchList     bool   // a watch with sendInitialEvents=true (client-go's watch-list)
	Namespace     string // from the path
	LabelSelector string // the labelSelector parameter as sent
}

// NewServer starts a Server over api's EndpointSlices; t's cleanup closes
// it (open watches end).
func NewServer(t testing.TB, api kubernetes.Interface) *Server {
	s := &Server{api: api, answered: map[int]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices", s.list)
	mux.HandleFunc("GET /apis/discovery.k8s.io/v1/watch/namespaces/{ns}/endpointslices", s.watch)
	mux.HandleFunc("GET /api/v1/namespaces/{ns}/services", s.services)
	mux.HandleFunc("GET /api/v1/namespaces/{ns}/pods", s.pods)
	mux.HandleFunc("GET /api/v1/pods", s.pods)
	s.srv = httptest.NewServer(mux)
	s.URL = s.srv.URL
	t.Cleanup(func() {
		s.srv.CloseClientConnections()
		s.srv.Close()
	})
	return s
}

// Fail makes every later request get status (e.g. 403, with a Status body
// as the API server sends) and ends the open watches, as an API server
// does when RBAC changes or it restarts; 0 serves again.
func (s *Server) Fail(status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status = status
	if status != 0 {
		for _, c := range s.stop {
			close(c)
		}
		s.stop = nil
	}
}

// Answered returns how many requests Fail's status answered; 200 counts
// those it let through (whatever they were then answered).
func (s *Server) Answered(status int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.answered[status]
}

// Requests returns the requests so far, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// failing records r and answers it with the status Fail set, if any; it
// counts the answer either way.
func (s *Server) failing(w http.ResponseWriter, r *http.Request) bool {
	s.mu.Lock()
	q := r.URL.Query().Get("watch")
	s.requests = append(s.requests, Request{Watch: strings.Contains(r.URL.Path, "/watch/") || q == "true" || q == "1",
		WatchList: r.URL.Query().Get("sendInitialEvents") == "true",
		Namespace: r.PathValue("ns"), LabelSelector: r.URL.Query().Get("labelSelector")})
	status := s.status
	if status == 0 {
		s.answered[http.StatusOK]++
	} else {
		s.answered[status]++
	}
	s.mu.Unlock()
	if status == 0 {
		return false
	}
	gr := schema.GroupResource{Group: discoveryv1.GroupName, Resource: "endpointslices"}
	st := apierrors.NewGenericServerResponse(status, "watch", gr, "", "kubeapitest: Fail", 0, false).Status()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(st)
	return true
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	if q := r.URL.Query().Get("watch"); q == "true" || q == "1" {
		s.watch(w, r) // client-go watches on the list path
		return
	}
	if s.failing(w, r) {
		return
	}
	l, err := s.api.DiscoveryV1().EndpointSlices(r.PathValue("ns")).List(r.Context(),
		metav1.ListOptions{LabelSelector: r.URL.Query().Get("labelSelector")})
	if err != nil {
		writeError(w, err)
		return
	}
	l.Kind, l.APIVersion = "EndpointSliceList", discoveryv1.SchemeGroupVersion.String()
	for i := range l.Items {
		typed(&l.Items[i])
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(l)
}

// services lists the namespace's Services (no watch, no selectors).
func (s *Server) services(w http.ResponseWriter, r *http.Request) {
	if s.failing(w, r) {
		return
	}
	l, err := s.api.CoreV1().Services(r.PathValue("ns")).List(r.Context(), metav1.ListOptions{})
	if err != nil {
		writeError(w, err)
		return
	}
	l.Kind, l.APIVersion = "ServiceList", "v1"
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(l)
}

// pods lists the namespace's Pods, or every namespace's (no watch, no
// selectors).
func (s *Server) pods(w http.ResponseWriter, r *http.Request) {
	if s.failing(w, r) {
		return
	}
	l, err := s.api.CoreV1().Pods(r.PathValue("ns")).List(r.Context(), metav1.ListOptions{})
	if err != nil {
		writeError(w, err)
		return
	}
	l.Kind, l.APIVersion = "PodList", "v1"
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(l)
}

// typed sets the kind and apiVersion client-go's decoder needs.
func typed(s *discoveryv1.EndpointSlice) {
	s.Kind, s.APIVersion = "EndpointSlice", discoveryv1.SchemeGroupVersion.String()
}

// writeError answers with err's API status (a clientset reactor's 403),
// else 500.
func writeError(w http.ResponseWriter, err error) {
	st := apierrors.NewInternalError(err).Status()
	if se, ok := err.(apierrors.APIStatus); ok {
		st = se.Status()
	}
	st.Kind, st.APIVersion = "Status", "v1"
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(st.Code))
	_ = json.NewEncoder(w).Encode(st)
}

// watch relays the clientset's watch. A watch without a resourceVersion
// starts with an ADDED event per existing object, from the real API server
// and from client-go's fake tracker (k8s.io/client-go/testing) alike.
func (s *Server) watch(w http.ResponseWriter, r *http.Request) {
	if s.failing(w, r) {
		return
	}
	q := r.URL.Query()
	s.mu.Lock()
	watchList := s.watchList
	s.mu.Unlock()
	var initial *discoveryv1.EndpointSliceList
	if q.Get("sendInitialEvents") == "true" && watchList {
		l, err := s.api.DiscoveryV1().EndpointSlices(r.PathValue("ns")).List(r.Context(), metav1.ListOptions{LabelSelector: q.Get("labelSelector")})
		if err != nil {
			writeError(w, err)
			return
		}
		initial = l
		q.Set("resourceVersion", l.ResourceVersion) // the changes since
	} else if q.Get("sendInitialEvents") == "true" {
		// As an API server without the WatchList feature: client-go falls
		// back to a list, then a watch.
		writeError(w, apierrors.NewInvalid(discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice").GroupKind(), "",
			field.ErrorList{field.Forbidden(field.NewPath("sendInitialEvents"), "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled")}))
		return
	}
	sel, err := labels.Parse(q.Get("labelSelector"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	wi, err := s.api.DiscoveryV1().EndpointSlices(r.PathValue("ns")).Watch(r.Context(),
		metav1.ListOptions{LabelSelector: sel.String(), ResourceVersion: q.Get("resourceVersion")})
	if err != nil {
		writeError(w, err)
		return
	}
	defer wi.Stop()
	stop := make(chan bool)
	s.mu.Lock()
	s.stop = append(s.stop, stop)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush() // the client's Watch returns on the headers
	enc := json.NewEncoder(w)
	send := func(t watch.EventType, obj any) bool {
		if enc.Encode(map[string]any{"type": t, "object": obj}) != nil {
			return false
		}
		w.(http.Flusher).Flush()
		return true
	}
	if initial != nil {
		for i := range initial.Items {
			typed(&initial.Items[i])
			if !send(watch.Added, &initial.Items[i]) {
				return
			}
		}
		end := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{ResourceVersion: initial.ResourceVersion,
			Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
		typed(end)
		if !send(watch.Bookmark, end) {
			return
		}
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-stop:
			return
		case e, ok := <-wi.ResultChan():
			if !ok {
				return
			}
			// A fake clientset's watch ignores the label selector.
			if es, isSlice := e.Object.(*discoveryv1.EndpointSlice); isSlice {
				if !sel.Matches(labels.Set(es.Labels)) {
					continue
				}
				es = es.DeepCopy()
				typed(es)
				e.Object = es
			}
			if !send(e.Type, e.Object) {
				return
			}
		}
	}
}
