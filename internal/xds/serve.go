package xds

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// DefaultListen is where `pinlab xds serve` listens unless told: loopback,
// for clients on the same machine. In a cluster (deploy/xds), it listens
// on every address of its pod.
const DefaultListen = "127.0.0.1:18000"

// DefaultNode is the node ID in the bootstrap Serve writes.
const DefaultNode = "pinlab-client"

// ServeConfig configures Serve.
type ServeConfig struct {
	// REST reaches the API server whose Services and EndpointSlices are
	// served (a kubeconfig's, or the pod's in-cluster config). Required.
	REST *rest.Config
	// Namespace limits what is served to one namespace; "" is every one.
	Namespace string
	// Listen is the address to listen on; "" is DefaultListen.
	Listen string
	// ListenFunc, if not nil, opens the listener on Listen's address
	// (inside a pod's network namespace, say); nil is net.Listen.
	ListenFunc func(ctx context.Context, addr string) (net.Listener, error)
	// Advertise is the address clients dial, written into the bootstrap
	// (its server_uri); "" is the address listened on.
	Advertise string
	// BootstrapFile, if not "", is where the clients' bootstrap JSON is
	// written (mode 0644: it holds no secret), and removed again when
	// Serve returns.
	BootstrapFile string
	// Out is told where the server listens and where the bootstrap is;
	// nil says nothing.
	Out io.Writer
	// Logger receives what the server does; nil discards it.
	Logger *slog.Logger
}

// Serve serves xDS for the Services and EndpointSlices cfg.REST names
// until ctx ends, then stops, removes the bootstrap file and returns nil.
// Its errors come before it says it serves: an unusable config, a listen
// address in use, an API server that does not list Services and
// EndpointSlices within a minute, a bootstrap file it cannot write (the
// server then stops again).
func Serve(ctx context.Context, cfg ServeConfig) error {
	if cfg.REST == nil {
		return errors.New("xds: no API server")
	}
	rc := rest.CopyConfig(cfg.REST)
	rc.Timeout = 0 // its watches last as long as the server
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	listen := cfg.ListenFunc
	if listen == nil {
		listen = func(_ context.Context, addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
	}
	ln, err := listen(ctx, cmp.Or(cfg.Listen, DefaultListen))
	if err != nil {
		return fmt.Errorf("xds: %w (another address: --listen)", err)
	}
	srv, err := Start(ctx, Config{Clientset: cs, Namespace: cfg.Namespace, Listener: ln, Logger: cfg.Logger})
	if err != nil {
		return err
	}
	defer srv.Close()
	advertise := cmp.Or(cfg.Advertise, srv.Addr().String())
	boot, err := Bootstrap(advertise, DefaultNode)
	if err != nil {
		return err
	}
	where := "every namespace"
	if cfg.Namespace != "" {
		where = "namespace " + cfg.Namespace
	}
	say := func(format string, args ...any) {
		if cfg.Out != nil {
			fmt.Fprintf(cfg.Out, format+"\n", args...)
		}
	}
	if cfg.BootstrapFile != "" {
		if err := os.WriteFile(cfg.BootstrapFile, append(boot, '\n'), 0o644); err != nil {
			return fmt.Errorf("xds: bootstrap: %w", err)
		}
		defer os.Remove(cfg.BootstrapFile)
		say("bootstrap for clients (GRPC_XDS_BOOTSTRAP=%s): server %s", cfg.BootstrapFile, advertise)
	}
	say("serving xDS on %s: the Services and EndpointSlices of %s at %s, as xds:///SERVICE.NAMESPACE:PORT", srv.Addr(), where, cfg.REST.Host)
	<-ctx.Done()
	say("stopping")
	return nil
}
