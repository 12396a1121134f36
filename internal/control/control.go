// Package control is the loopback HTTP API of a running lab (pinlab lab
// up), through which other pinlab commands change it and read it the way
// kubectl reads a cluster: scale a Deployment or StatefulSet, delete a pod,
// force a pod not ready, list objects. Requests and replies are JSON; an
// error reply is {"error": "..."} with a 4xx or 5xx status.
package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/pinlab/pinlab/internal/kubelet"
	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/loopback"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
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

// Server serves one lab's control API. Create it with Listen.
type Server struct {
	lab  *lab.Lab
	ln   net.Listener
	http *http.Server
	done chan error
}

// Listen binds addr (inside 127.0.0.0/8) and serves in a goroutine owned
// by the Server until Shutdown.
func Listen(ctx context.Context, addr string, l *lab.Lab) (*Server, error) {
	ln, err := loopback.Listen(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("control: %w", err)
	}
	s := &Server{lab: l, ln: ln, done: make(chan error, 1)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/info", s.info)
	mux.HandleFunc("GET /v1/objects", s.objects)
	mux.HandleFunc("POST /v1/scale", s.scale)
	mux.HandleFunc("POST /v1/delete", s.deletePod)
	mux.HandleFunc("POST /v1/ready", s.ready)
	s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { s.done <- s.http.Serve(ln) }()
	return s, nil
}

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
	cfg := s.lab.Cluster.Config()
	reply(w, http.StatusOK, Info{DNS: s.lab.DNSAddr(), PodCIDR: cfg.PodCIDR.String(), ServiceCIDR: cfg.ServiceCIDR.String()})
}

func (s *Server) objects(w http.ResponseWriter, _ *http.Request) {
	reply(w, http.StatusOK, Snapshot(s.lab))
}

// Snapshot lists a lab's objects from its informer caches.
func Snapshot(l *lab.Lab) Objects {
	f := l.Cluster.Factory()
	var o Objects
	all := labels.Everything()
	svcs, _ := f.Core().V1().Services().Lister().List(all)
	for _, x := range svcs {
		o.Services = append(o.Services, *x)
	}
	pods, _ := f.Core().V1().Pods().Lister().List(all)
	for _, x := range pods {
		o.Pods = append(o.Pods, *x)
	}
	slices, _ := f.Discovery().V1().EndpointSlices().Lister().List(all)
	for _, x := range slices {
		o.EndpointSlices = append(o.EndpointSlices, *x)
	}
	ds, _ := f.Apps().V1().Deployments().Lister().List(all)
	for _, x := range ds {
		o.Deployments = append(o.Deployments, *x)
	}
	ss, _ := f.Apps().V1().StatefulSets().Lister().List(all)
	for _, x := range ss {
		o.StatefulSets = append(o.StatefulSets, *x)
	}
	return o
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
	result(w, s.lab.Scale(r.Context(), req.Kind, req.Namespace, req.Name, req.Replicas))
}

func (s *Server) deletePod(w http.ResponseWriter, r *http.Request) {
	var req PodRequest
	if !decode(w, r, &req) {
		return
	}
	result(w, s.lab.Cluster.Client().CoreV1().Pods(req.Namespace).Delete(r.Context(), req.Name, metav1.DeleteOptions{}))
}

func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	var req PodRequest
	if !decode(w, r, &req) {
		return
	}
	result(w, s.lab.Kubelet.SetReady(req.Namespace, req.Name, req.Ready))
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
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, code int, err error) {
	reply(w, code, map[string]string{"error": err.Error()})
}
