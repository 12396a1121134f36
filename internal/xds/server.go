// Package xds is a minimal xDS control plane for gRPC clients: it watches
// a cluster's Services and EndpointSlices and serves, over ADS, a
// Listener, RouteConfiguration, Cluster and ClusterLoadAssignment for
// every Service port, named "SERVICE.NAMESPACE:PORT" (Name), so that a
// grpc-go channel to xds:///SERVICE.NAMESPACE:PORT balances every call
// over the Service's endpoints as the EndpointSlices list them: every
// slice merged, ready endpoints HEALTHY, serving-and-terminating ones
// DRAINING, zones as localities. A Service's annotations choose its
// load-balancing policy and outlier detection (AnnotationPolicy,
// AnnotationPolicyConfig, AnnotationOutlierDetection); a bad one is
// reported as a Warning event on the Service and ignored.
//
// It is built on go-control-plane's snapshot cache and server (the
// state-of-the-world protocol); every client gets the same snapshot, and
// asks only for the names its targets need. A name that no Service has
// is answered at once without it; grpc-go's xDS client, which cannot tell
// that answer from one to an older request, fails the channel's calls
// when its watch timer (15 s) expires. A name that existed and is gone is
// failed at once (LDS and CDS answers hold the full state).
package xds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
)

// Config configures Start.
type Config struct {
	// Clientset reads Services and EndpointSlices and writes the events
	// of bad annotations. Required.
	Clientset kubernetes.Interface
	// Namespace limits what is served to one namespace; "" serves every
	// namespace.
	Namespace string
	// Listener is where clients reach the server; Close closes it.
	// Required.
	Listener net.Listener
	// Logger receives what the server does; nil discards it.
	Logger *slog.Logger
}

// EventSource is the component that the events on Services name.
const EventSource = "pinlab-xds"

// ReasonBadAnnotation is the reason of the Warning event a Service gets
// when its annotations cannot be served.
const ReasonBadAnnotation = "InvalidXDSAnnotation"

// syncTimeout bounds the first listing of Services and EndpointSlices.
const syncTimeout = time.Minute

// Server serves xDS until Close. Its methods are safe for concurrent use.
type Server struct {
	cfg      Config
	log      *slog.Logger
	cache    cachev3.SnapshotCache
	grpc     *grpc.Server
	factory  informers.SharedInformerFactory
	events   record.EventBroadcaster
	sink     *eventSink
	recorder record.EventRecorder
	kickc    chan struct{} // a change to serve; capacity 1
	stop     chan struct{}
	wg       sync.WaitGroup // the update loop and the gRPC server
	version  atomic.Uint64
	// reported is, by Service, the last bad-annotation message sent; the
	// update loop owns it.
	reported  map[string]string
	closeOnce sync.Once
}

// snapshotNode is the one node ID every client's snapshot is kept under:
// they all see the same resources.
type snapshotNode struct{}

func (snapshotNode) ID(*corev3.Node) string { return "pinlab" }

// Start lists the Services and EndpointSlices, makes the first snapshot
// and serves it on cfg.Listener; it then follows every change until
// Close. On an error nothing is left running and the listener is closed.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Clientset == nil || cfg.Listener == nil {
		if cfg.Listener != nil {
			cfg.Listener.Close()
		}
		return nil, errors.New("xds: no API client or no listener")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		cfg: cfg, log: log,
		cache:    cachev3.NewSnapshotCache(false, snapshotNode{}, logAdapter{log}),
		kickc:    make(chan struct{}, 1),
		stop:     make(chan struct{}),
		reported: map[string]string{},
	}
	if err := s.watch(ctx); err != nil {
		cfg.Listener.Close()
		return nil, err
	}
	s.update()
	s.serve(ctx)
	s.wg.Go(s.loop)
	return s, nil
}

// watch starts the Services' and EndpointSlices' informers, each change
// kicking the loop, and the events' broadcaster, and waits until both
// are listed (at most syncTimeout); on an error it stops them again.
func (s *Server) watch(ctx context.Context) error {
	s.factory = informers.NewSharedInformerFactoryWithOptions(s.cfg.Clientset, 0, informers.WithNamespace(s.cfg.Namespace))
	kick := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.kick() },
		UpdateFunc: func(any, any) { s.kick() },
		DeleteFunc: func(any) { s.kick() },
	}
	svcs := s.factory.Core().V1().Services().Informer()
	slices := s.factory.Discovery().V1().EndpointSlices().Informer()
	for _, inf := range []cache.SharedIndexInformer{svcs, slices} {
		if _, err := inf.AddEventHandler(kick); err != nil {
			return err
		}
	}
	s.events = record.NewBroadcaster(record.WithContext(context.WithoutCancel(ctx)))
	s.sink = newEventSink(s.cfg.Clientset)
	s.events.StartRecordingToSink(s.sink)
	s.recorder = s.events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: EventSource})
	s.factory.Start(s.stop)
	sctx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	if !cache.WaitForCacheSync(sctx.Done(), svcs.HasSynced, slices.HasSynced) {
		s.closeInformers()
		return fmt.Errorf("xds: Services and EndpointSlices not listed within %v: %w", syncTimeout, context.Cause(sctx))
	}
	return nil
}

// serve serves ADS and gRPC health on the listener, on a goroutine owned
// by s (Close stops it).
func (s *Server) serve(ctx context.Context) {
	s.grpc = grpc.NewServer(
		grpc.WaitForHandlers(true), // Close returns once every ADS stream's handler has
		grpc.MaxRecvMsgSize(1<<20),
		grpc.MaxConcurrentStreams(1000),
		grpc.ConnectionTimeout(10*time.Second),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	)
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(s.grpc, serverv3.NewServer(context.WithoutCancel(ctx), s.cache, nil))
	// SERVING from the first snapshot on: a Deployment's readiness probe
	// (grpc, port of the server) waits for it.
	healthgrpc.RegisterHealthServer(s.grpc, health.NewServer())
	s.wg.Go(func() {
		if err := s.grpc.Serve(s.cfg.Listener); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.log.Warn("xds: serving stopped", "err", err)
		}
	})
}

// Addr is where the server listens.
func (s *Server) Addr() net.Addr { return s.cfg.Listener.Addr() }

// Version is the number of snapshots made so far (the first at Start).
func (s *Server) Version() uint64 { return s.version.Load() }

// kick asks the loop for a new snapshot; kicks before it runs merge.
func (s *Server) kick() {
	select {
	case s.kickc <- struct{}{}:
	default:
	}
}

func (s *Server) loop() {
	for {
		select {
		case <-s.stop:
			return
		case <-s.kickc:
			s.update()
		}
	}
}

// update makes a snapshot of the listers' Services and EndpointSlices
// and serves it; it reports the Services whose annotations it ignored.
func (s *Server) update() {
	svcs, err := s.factory.Core().V1().Services().Lister().List(labels.Everything())
	if err != nil {
		s.log.Warn("xds: listing Services", "err", err)
		return
	}
	eps, err := s.factory.Discovery().V1().EndpointSlices().Lister().List(labels.Everything())
	if err != nil {
		s.log.Warn("xds: listing EndpointSlices", "err", err)
		return
	}
	res, problems := build(svcs, eps)
	v := s.version.Add(1)
	// Not snap.Consistent(): it looks for route names in Envoy's socket
	// listeners' filter chains, where API listeners have none; build
	// names every resource after its port, so references always resolve.
	snap, err := cachev3.NewSnapshot(strconv.FormatUint(v, 10), res)
	if err == nil {
		err = s.cache.SetSnapshot(context.Background(), snapshotNode{}.ID(nil), snap)
	}
	if err != nil {
		s.log.Error("xds: snapshot not served", "version", v, "err", err)
	}
	s.report(svcs, problems)
}

// report sends a Warning event for each Service whose annotations were
// ignored, once per distinct message.
func (s *Server) report(svcs []*corev1.Service, problems []problem) {
	bad := map[string]bool{}
	for _, p := range problems {
		key := p.svc.Namespace + "/" + p.svc.Name
		bad[key] = true
		msg := fmt.Sprintf("%v; ignored: serving round_robin without outlier detection", p.err)
		if s.reported[key] == msg {
			continue
		}
		s.reported[key] = msg
		s.log.Warn("xds: annotation ignored", "service", key, "err", p.err)
		s.recorder.Event(p.svc, corev1.EventTypeWarning, ReasonBadAnnotation, msg)
	}
	for key := range s.reported {
		if !bad[key] {
			delete(s.reported, key)
		}
	}
}

// Close stops serving (streams end; clients keep their last resources
// and reconnect), stops watching and waits for every goroutine.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.grpc.Stop()
		close(s.stop)
		s.wg.Wait()
		s.closeInformers()
	})
	return nil
}

func (s *Server) closeInformers() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.factory.Shutdown()
	s.events.Shutdown()
	s.sink.close()
}

// Bootstrap is the xDS bootstrap JSON (gRFC A27) for a grpc-go client
// of this server: the server's address with insecure credentials, and a
// node ID. grpc-go reads it from the file $GRPC_XDS_BOOTSTRAP names, or
// from $GRPC_XDS_BOOTSTRAP_CONFIG.
func Bootstrap(serverURI, nodeID string) ([]byte, error) {
	type creds struct {
		Type string `json:"type"`
	}
	type server struct {
		URI      string   `json:"server_uri"`
		Creds    []creds  `json:"channel_creds"`
		Features []string `json:"server_features"`
	}
	b := struct {
		Servers []server          `json:"xds_servers"`
		Node    map[string]string `json:"node"`
	}{
		Servers: []server{{URI: serverURI, Creds: []creds{{Type: "insecure"}}, Features: []string{"xds_v3"}}},
		Node:    map[string]string{"id": nodeID},
	}
	return json.MarshalIndent(b, "", "  ")
}

// logAdapter gives go-control-plane's log lines to slog.
type logAdapter struct{ l *slog.Logger }

func (a logAdapter) Debugf(f string, args ...any) { a.l.Debug(fmt.Sprintf(f, args...)) }
func (a logAdapter) Infof(f string, args ...any)  { a.l.Debug(fmt.Sprintf(f, args...)) }
func (a logAdapter) Warnf(f string, args ...any)  { a.l.Info(fmt.Sprintf(f, args...)) }
func (a logAdapter) Errorf(f string, args ...any) { a.l.Warn(fmt.Sprintf(f, args...)) }
