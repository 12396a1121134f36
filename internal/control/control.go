// Package control is the loopback HTTP API of a running lab (pinlab lab
// up), through which other pinlab commands change it and read it the way
// kubectl reads a cluster: scale a Deployment or StatefulSet, delete a pod,
// force a pod not ready, list objects. Requests and replies are JSON; an
// error reply is {"error": "..."} with a 4xx or 5xx status. Every reply
// carries the header Pinlab-Control: v1.
//
// The API is guarded as a local kube-apiserver endpoint would be (see
// docs/control.md): every request needs the lab's bearer token, which
// `lab up` keeps in a file only its user can read (WriteToken); its Host
// must be the bound address (no DNS rebinding); browsers' cross-site
// requests are refused (Origin, Sec-Fetch-Site), and so are bodies that are
// not application/json; timeouts and a connection cap bound what idle
// clients can hold.
package control

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/loopback"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Info describes a running lab.
type Info struct {
	DNS         string `json:"dns"`
	PodCIDR     string `json:"pod_cidr"`
	ServiceCIDR string `json:"service_cidr"`
	// NetnsPID is the process whose network namespace the lab runs in (a
	// lab on a real control plane; `pinlab lab exec` enters it), 0 when
	// the lab runs on the host's loopback.
	NetnsPID int `json:"netns_pid,omitempty"`
}

// Objects is a snapshot of the lab's API objects.
type Objects struct {
	Services       []corev1.Service            `json:"services"`
	Pods           []corev1.Pod                `json:"pods"`
	EndpointSlices []discoveryv1.EndpointSlice `json:"endpointslices"`
	Deployments    []appsv1.Deployment         `json:"deployments"`
	StatefulSets   []appsv1.StatefulSet        `json:"statefulsets"`
}

// Header is set on every reply of the control API, so that clients can
// tell a lab from another HTTP server on the address.
const Header = "Pinlab-Control"

// headerValue is Header's value: the API version.
const headerValue = "v1"

// Server serves one lab's control API. Create it with Listen, then hand it
// the lab with Serve once the lab is up.
type Server struct {
	lab      atomic.Pointer[lab.Lab]
	stopping atomic.Bool
	netnsPID int
	tokenSum [sha256.Size]byte
	ln       *limitListener
	http     *http.Server
	ui       http.Handler
	done     chan error

	stopOnce sync.Once
	stopErr  error
}

// Listen binds cfg.Addr and serves in a goroutine owned by the Server until
// Shutdown. Until Serve is called every authorised request gets 503 with
// the error "the lab is still starting", so that the address can be
// claimed before a lab starts. Binding errors wrap the syscall error (e.g.
// syscall.EADDRINUSE).
func Listen(ctx context.Context, cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	ln := cfg.Listener
	if ln == nil {
		var err error
		if ln, err = loopback.Listen(ctx, cfg.Addr); err != nil {
			return nil, fmt.Errorf("control: %w", err)
		}
	} else if err := loopback.CheckAddr(ln.Addr().String()); err != nil {
		return nil, fmt.Errorf("control: %w", err)
	}
	s := &Server{netnsPID: cfg.NetnsPID, tokenSum: sha256.Sum256([]byte(cfg.Token)), ln: newLimitListener(ln, cfg.MaxConns), ui: cfg.UI, done: make(chan error, 1)}
	s.http = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ConnState:         s.ln.track,
	}
	go func() { s.done <- s.http.Serve(s.ln) }()
	return s, nil
}

// check refuses a Config that would serve without a token or with a
// negative limit.
func (c Config) check() error {
	if len(c.Token) < minToken {
		return fmt.Errorf("control: a token of at least %d characters is required (NewToken makes one)", minToken)
	}
	if c.ReadHeaderTimeout < 0 || c.ReadTimeout < 0 || c.WriteTimeout < 0 || c.IdleTimeout < 0 || c.MaxConns < 0 {
		return errors.New("control: negative timeout or connection cap")
	}
	return nil
}

// Serve makes the API answer for l. It is safe to call while requests are
// being served.
func (s *Server) Serve(l *lab.Lab) { s.lab.Store(l) }

// Addr returns the address the API is served on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// errStarting and errStopping are the errors of 503 replies.
var (
	errStarting = errors.New("the lab is still starting; try again when `pinlab lab up` prints \"lab is up\"")
	errStopping = errors.New("the lab is stopping")
)

// Shutdown stops the API: from its call on, a request that has not yet
// acted on the lab gets 503 "stopping" (one whose body is still arriving,
// say); new connections are refused, and net/http closes kept-alive ones
// rather than read another request. It waits for the requests in progress,
// at most until ctx ends (then it closes their connections). The lab is
// not touched: close it after Shutdown returns, so that no request changes
// a lab that is closing. Later calls return the first call's error.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stopOnce.Do(func() {
		s.stopping.Store(true)
		err := s.http.Shutdown(ctx)
		if err != nil {
			s.http.Close()
		}
		if serr := <-s.done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
			err = serr
		}
		s.stopErr = err
	})
	return s.stopErr
}

// Snapshot lists a lab's objects from its informer caches.
func Snapshot(l *lab.Lab) Objects {
	c := l.Objects()
	return Objects{Services: c.Services, Pods: c.Pods, EndpointSlices: c.EndpointSlices, Deployments: c.Deployments, StatefulSets: c.StatefulSets}
}
