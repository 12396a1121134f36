// Package control is the loopback HTTP API of a running lab (pinlab lab
// up), through which other pinlab commands change it and read it the way
// kubectl reads a cluster: scale a Deployment or StatefulSet, delete a pod,
// force a pod not ready, list objects. Requests and replies are JSON; an
// error reply is {"error": "..."} with a 4xx or 5xx status. Every reply
// carries the header Pinlab-Control: v1.
package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/pinlab/pinlab/internal/kubelet"
	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/loopback"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// DefaultAddr is where `pinlab lab up` serves its control API.
const DefaultAddr = "127.0.0.1:7471"

// Info describes a running lab.
type Info struct {
	DNS         string `json:"dns"`
	PodCIDR     string `json:"pod_cidr"`
	ServiceCIDR string `json:"service_cidr"`
}

// Objects is a snapshot of the lab's API objects.
type Objects struct {
	Services       []corev1.Service            `json:"services"`
	Pods           []corev1.Pod                `json:"pods"`
	EndpointSlices []discoveryv1.EndpointSlice `json:"endpointslices"`
	Deployments    []appsv1.Deployment         `json:"deployments"`
	StatefulSets   []appsv1.StatefulSet        `json:"statefulsets"`
}

// ScaleRequest sets a Deployment's or StatefulSet's replicas.
type ScaleRequest struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Replicas  int32  `json:"replicas"`
}

// PodRequest names a pod; Ready is used by the readiness call only.
type PodRequest struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Ready     bool   `json:"ready"`
}

// Header is set on every reply of the control API, so that clients can
// tell a lab from another HTTP server on the address.
const Header = "Pinlab-Control"

// headerValue is Header's value: the API version.
const headerValue = "v1"

// Server serves one lab's control API. Create it with Listen, then hand it
// the lab with Serve once the lab is up.
type Server struct {
	lab  atomic.Pointer[lab.Lab]
	ln   net.Listener
	http *http.Server
	done chan error
}

// Listen binds addr (inside 127.0.0.0/8) and serves in a goroutine owned
// by the Server until Shutdown. Until Serve is called every request gets
// 503 with the error "the lab is still starting", so that the address can
// be claimed before a lab starts. Binding errors wrap the syscall error
// (e.g. syscall.EADDRINUSE).
func Listen(ctx context.Context, addr string) (*Server, error) {
	ln, err := loopback.Listen(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("control: %w", err)
	}
	s := &Server{ln: ln, done: make(chan error, 1)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/info", s.withLab(s.info))
	mux.HandleFunc("GET /v1/objects", s.withLab(s.objects))
	mux.HandleFunc("POST /v1/scale", s.withLab(s.scale))
	mux.HandleFunc("POST /v1/delete", s.withLab(s.deletePod))
	mux.HandleFunc("POST /v1/ready", s.withLab(s.ready))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fail(w, http.StatusNotFound, fmt.Errorf("control: no call %s %s", r.Method, r.URL.Path))
	})
	s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { s.done <- s.http.Serve(ln) }()
	return s, nil
}

// Serve makes the API answer for l. It is safe to call while requests are
// being served.
func (s *Server) Serve(l *lab.Lab) { s.lab.Store(l) }

// withLab answers 503 until Serve was called.
func (s *Server) withLab(h func(http.ResponseWriter, *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.lab.Load() == nil {
			fail(w, http.StatusServiceUnavailable, errStarting)
			return
		}
		h(w, r)
	}
}

// errStarting is the error of every call before Serve.
var errStarting = errors.New("the lab is still starting; try again when `pinlab lab up` prints \"lab is up\"")

// Addr returns the address the API is served on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Shutdown stops serving and waits for the serving goroutine.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.http.Shutdown(ctx)
	if serr := <-s.done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

func (s *Server) info(w http.ResponseWriter, _ *http.Request) {
	l := s.lab.Load()
	reply(w, http.StatusOK, Info{DNS: l.DNSAddr(), PodCIDR: l.PodCIDR().String(), ServiceCIDR: l.ServiceCIDR().String()})
}

func (s *Server) objects(w http.ResponseWriter, _ *http.Request) {
	reply(w, http.StatusOK, Snapshot(s.lab.Load()))
}

// Snapshot lists a lab's objects from its informer caches.
func Snapshot(l *lab.Lab) Objects {
	c := l.Objects()
	return Objects{Services: c.Services, Pods: c.Pods, EndpointSlices: c.EndpointSlices, Deployments: c.Deployments, StatefulSets: c.StatefulSets}
}

func (s *Server) scale(w http.ResponseWriter, r *http.Request) {
	var req ScaleRequest
	if !decode(w, r, &req) {
		return
	}
	if req.Replicas < 0 || req.Replicas > 1000 {
		fail(w, http.StatusBadRequest, fmt.Errorf("replicas %d: expected 0 to 1000", req.Replicas))
		return
	}
	result(w, s.lab.Load().Scale(r.Context(), req.Kind, req.Namespace, req.Name, req.Replicas))
}

func (s *Server) deletePod(w http.ResponseWriter, r *http.Request) {
	var req PodRequest
	if !decode(w, r, &req) {
		return
	}
	result(w, s.lab.Load().DeletePod(r.Context(), req.Namespace, req.Name, nil))
}

func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	var req PodRequest
	if !decode(w, r, &req) {
		return
	}
	result(w, s.lab.Load().Kubelet.SetReady(req.Namespace, req.Name, req.Ready))
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		fail(w, http.StatusBadRequest, fmt.Errorf("bad request body: %w", err))
		return false
	}
	return true
}

func result(w http.ResponseWriter, err error) {
	switch {
	case err == nil:
		reply(w, http.StatusOK, map[string]string{})
	case apierrors.IsNotFound(err), errors.Is(err, kubelet.ErrNoPod):
		fail(w, http.StatusNotFound, err)
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		fail(w, http.StatusBadRequest, err)
	default:
		fail(w, http.StatusInternalServerError, err)
	}
}

func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(Header, headerValue)
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, code int, err error) {
	reply(w, code, map[string]string{"error": err.Error()})
}
