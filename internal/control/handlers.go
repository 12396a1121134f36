package control

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/pinlab/pinlab/internal/kubelet"
	"github.com/pinlab/pinlab/internal/lab"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	sigsjson "sigs.k8s.io/json"
)

// route is one call of the API.
type route struct {
	method string
	serve  func(*Server, *http.Request) (any, *statusError)
}

// routes are the API's calls by path.
var routes = map[string]route{
	"/v1/info":    {http.MethodGet, (*Server).info},
	"/v1/objects": {http.MethodGet, (*Server).objects},
	"/v1/scale":   {http.MethodPost, (*Server).scale},
	"/v1/delete":  {http.MethodPost, (*Server).deletePod},
	"/v1/ready":   {http.MethodPost, (*Server).ready},
}

// ServeHTTP checks a request, in this order: Host (421), Origin and
// Sec-Fetch-Site (403), token (401), path (404) and method (405),
// Content-Type of a POST (415), body (400, 413), the lab's state (503
// while starting, and once Shutdown began, so that a request whose body
// arrives then changes nothing); then the call's own answer (200, or 400,
// 404, 409 for what the lab refuses; 500 only for a failure of the lab
// itself).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(Header, headerValue)
	if s.ui != nil && !strings.HasPrefix(r.URL.Path, "/v1/") {
		s.serveUI(w, r)
		return
	}
	v, serr := s.serve(r)
	if serr != nil {
		refuse(w, r, serr)
		return
	}
	reply(w, http.StatusOK, v)
}

// refuse answers with serr.
func refuse(w http.ResponseWriter, r *http.Request, serr *statusError) {
	if serr.code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="pinlab"`)
	}
	if serr.code == http.StatusMethodNotAllowed {
		w.Header().Set("Allow", routes[r.URL.Path].method)
	}
	reply(w, serr.code, map[string]string{"error": serr.Error()})
}

// serveUI hands a request outside /v1/ to Config.UI once it passed the
// API's checks: Host, Origin and Sec-Fetch-Site, and the token for all but
// the page itself (see Config.UI).
func (s *Server) serveUI(w http.ResponseWriter, r *http.Request) {
	checks := []func(*http.Request) *statusError{s.checkHost, s.checkOrigin}
	page := r.URL.Path == "/" && (r.Method == http.MethodGet || r.Method == http.MethodHead)
	if !page {
		checks = append(checks, s.checkToken)
	}
	for _, check := range checks {
		if serr := check(r); serr != nil {
			refuse(w, r, serr)
			return
		}
	}
	if s.stopping.Load() {
		refuse(w, r, &statusError{http.StatusServiceUnavailable, errStopping})
		return
	}
	s.ui.ServeHTTP(w, r)
}

func (s *Server) serve(r *http.Request) (any, *statusError) {
	for _, check := range []func(*http.Request) *statusError{s.checkHost, s.checkOrigin, s.checkToken} {
		if err := check(r); err != nil {
			return nil, err
		}
	}
	rt, ok := routes[r.URL.Path]
	switch {
	case !ok:
		return nil, errorf(http.StatusNotFound, "control: no call %s %s", r.Method, r.URL.Path)
	case r.Method != rt.method:
		return nil, errorf(http.StatusMethodNotAllowed, "control: %s takes %s, not %s", r.URL.Path, rt.method, r.Method)
	}
	if r.Method == http.MethodPost {
		if err := checkJSON(r); err != nil {
			return nil, err
		}
	}
	return rt.serve(s, r)
}

// live returns the lab to act on; 503 while it starts and once Shutdown
// began.
func (s *Server) live() (*lab.Lab, *statusError) {
	l := s.lab.Load()
	switch {
	case s.stopping.Load():
		return nil, &statusError{http.StatusServiceUnavailable, errStopping}
	case l == nil:
		return nil, &statusError{http.StatusServiceUnavailable, errStarting}
	}
	return l, nil
}

func (s *Server) info(*http.Request) (any, *statusError) {
	l, serr := s.live()
	if serr != nil {
		return nil, serr
	}
	return Info{DNS: l.DNSAddr(), PodCIDR: l.PodCIDR().String(), ServiceCIDR: l.ServiceCIDR().String(), NetnsPID: s.netnsPID}, nil
}

func (s *Server) objects(*http.Request) (any, *statusError) {
	l, serr := s.live()
	if serr != nil {
		return nil, serr
	}
	return Snapshot(l), nil
}

func (s *Server) scale(r *http.Request) (any, *statusError) {
	var req ScaleRequest
	if serr := decode(r, &req); serr != nil {
		return nil, serr
	}
	l, serr := s.live()
	if serr != nil {
		return nil, serr
	}
	kind := scaleKinds[strings.ToLower(req.Kind)]
	if others := replicasBut(l, kind, req.Namespace, req.Name); others+int(*req.Replicas) > MaxReplicas {
		return nil, &statusError{http.StatusConflict, fmt.Errorf("the lab would run %d pods, more than the %d it runs (the other workloads ask for %d)", others+int(*req.Replicas), MaxReplicas, others)}
	}
	return result(l.Scale(r.Context(), kind, req.Namespace, req.Name, *req.Replicas))
}

// replicasBut sums the replicas every Deployment and StatefulSet of the
// lab asks for, but the one named (by kind, namespace and name).
func replicasBut(l *lab.Lab, kind, namespace, name string) int {
	apps := l.Cluster.Factory().Apps().V1()
	n := 0
	ds, _ := apps.Deployments().Lister().List(labels.Everything())
	for _, d := range ds {
		if kind != "Deployment" || d.Namespace != namespace || d.Name != name {
			n += int(ptr.Deref(d.Spec.Replicas, 1))
		}
	}
	ss, _ := apps.StatefulSets().Lister().List(labels.Everything())
	for _, st := range ss {
		if kind != "StatefulSet" || st.Namespace != namespace || st.Name != name {
			n += int(ptr.Deref(st.Spec.Replicas, 1))
		}
	}
	return n
}

func (s *Server) deletePod(r *http.Request) (any, *statusError) {
	var req PodRequest
	if serr := decode(r, &req); serr != nil {
		return nil, serr
	}
	l, serr := s.live()
	if serr != nil {
		return nil, serr
	}
	return result(l.DeletePod(r.Context(), req.Namespace, req.Name, nil))
}

func (s *Server) ready(r *http.Request) (any, *statusError) {
	var req ReadyRequest
	if serr := decode(r, &req); serr != nil {
		return nil, serr
	}
	l, serr := s.live()
	if serr != nil {
		return nil, serr
	}
	return result(l.Kubelet.SetReady(req.Namespace, req.Name, *req.Ready))
}

// request is a request body: check reports what is missing or wrong in it.
type request interface{ check() error }

// decode reads a JSON object strictly, as kube-apiserver's strict field
// validation does: unknown and duplicate fields, a value that is not an
// object, and anything after it are 400; so is a body check refuses. A
// body over maxBody is 413.
func decode(r *http.Request, v request) *statusError {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	switch {
	case err != nil:
		return errorf(http.StatusBadRequest, "control: reading the body: %v", err)
	case len(body) > maxBody:
		return errorf(http.StatusRequestEntityTooLarge, "control: body larger than %d KiB", maxBody>>10)
	}
	if b := bytes.TrimLeft(body, " \t\r\n"); len(b) == 0 || b[0] != '{' {
		return errorf(http.StatusBadRequest, "control: bad request body: expected a JSON object")
	}
	strict, err := sigsjson.UnmarshalStrict(body, v)
	if err == nil {
		err = errors.Join(strict...)
	}
	if err == nil {
		err = v.check()
	}
	if err != nil {
		return errorf(http.StatusBadRequest, "control: bad request body: %v", err)
	}
	return nil
}

// result turns what the lab answered into a reply.
func result(err error) (any, *statusError) {
	switch {
	case err == nil:
		return struct{}{}, nil
	case apierrors.IsNotFound(err), errors.Is(err, kubelet.ErrNoPod):
		return nil, &statusError{http.StatusNotFound, err}
	case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err):
		return nil, &statusError{http.StatusConflict, err}
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return nil, &statusError{http.StatusBadRequest, err}
	}
	return nil, &statusError{http.StatusInternalServerError, err}
}

func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// checkObject requires a namespace and a name valid as the API server
// would require them.
func checkObject(namespace, name string) error {
	if msgs := validation.IsDNS1123Label(namespace); len(msgs) > 0 {
		return fmt.Errorf("namespace %q: %s", namespace, strings.Join(msgs, "; "))
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return fmt.Errorf("name %q: %s", name, strings.Join(msgs, "; "))
	}
	return nil
}
