package kubelab

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/pinlab/pinlab/internal/controlplane"
	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/podnet"
)

// UpConfig configures Up.
type UpConfig struct {
	// Listener is where the host's kubectl reaches the API server: bound
	// on the host's loopback and handed over (Inherited). Up owns it.
	Listener net.Listener
	// Kubeconfig is the file Up writes (mode 0600) for kubectl, naming
	// the API server at Listener's address; removed by Close.
	Kubeconfig string
	// Progress, if not nil, is told what starts and how long it took.
	Progress io.Writer
	// PodNetwork is how the pods are networked ("": PodNetworkShared).
	PodNetwork PodNetwork
}

// Up is `lab up`'s real control plane, inside its namespace: the
// processes, the forwarder that serves the API server on the host's
// loopback (and the same address inside, for the commands lab exec runs
// there), and the kubeconfig kubectl reads.
type Up struct {
	cp            *controlplane.ControlPlane
	podNetwork    PodNetwork
	podNet        *podnet.Network // with PodNetworkNetns, once API made it
	binDir        string
	stateDir      string
	keepLogs      bool // a component failed: Close keeps the logs
	kubeconfig    string
	ln            net.Listener // until the forwarder takes it
	inside        net.Listener // ln's address inside the namespace, until its forwarder takes it
	forward       *forwarder   // on the host
	forwardInside *forwarder   // the same address inside the namespace
}

// StartUp starts etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler (the root command has made the namespace's ranges local),
// serves the API server on cfg.Listener and writes cfg.Kubeconfig. It
// first claims cfg.Listener's address inside the namespace too, and fails
// at once if that is taken (before any component starts). On
// error everything it started is stopped; a component that failed to
// start leaves its logs, named in the error.
func StartUp(ctx context.Context, cfg UpConfig) (_ *Up, err error) {
	u := &Up{ln: cfg.Listener, podNetwork: cfg.PodNetwork}
	defer func() {
		if err != nil {
			u.Close()
		}
	}()
	// The same address inside the namespace (see serve), taken first:
	// the control plane's components pick their ports and their
	// connections' ports on this loopback, and one could take the host
	// listener's (seen once: "bind: address already in use").
	if u.inside, err = loopback.Listen(ctx, u.ln.Addr().String()); err != nil {
		return nil, fmt.Errorf("lab up: the API server's address inside the namespace: %w", err)
	}
	if u.binDir, err = controlplane.BinDir(); err != nil {
		return nil, err
	}
	if cfg.PodNetwork == PodNetworkNetns {
		if _, err = podnet.BinDir(); err != nil {
			return nil, err
		}
	}
	if u.stateDir, err = os.MkdirTemp("", "pinlab-controlplane-"); err != nil {
		return nil, err
	}
	progress := cfg.Progress
	if progress == nil {
		progress = io.Discard
	}
	fmt.Fprintf(progress, "starting etcd, kube-apiserver, kube-controller-manager and kube-scheduler (state and logs in %s) ...\n", u.stateDir)
	started := time.Now()
	u.cp, err = controlplane.Start(ctx, controlplane.Config{
		BinDir: u.binDir, Dir: u.stateDir, ServiceCIDR: ServiceCIDR, AdvertiseAddress: lab.NodeIP(PodCIDR),
	})
	if err != nil {
		if ctx.Err() == nil {
			// A component failed: its whole log is worth reading; the
			// rest (etcd's data, keys, tokens) goes.
			u.keepLogs = true
			return nil, fmt.Errorf("%w\n(the components' logs are kept in %s; remove it when done)", err, u.stateDir)
		}
		return nil, err
	}
	fmt.Fprintf(progress, "control plane ready in %.1fs\n", time.Since(started).Seconds())
	if err := u.serve(); err != nil {
		return nil, err
	}
	u.kubeconfig = cfg.Kubeconfig
	if err := u.cp.WriteKubeconfig(u.kubeconfig, "https://"+u.forward.ln.Addr().String()); err != nil {
		return nil, err
	}
	return u, nil
}

// serve forwards the host listener, and the same address inside the
// namespace, to the API server.
func (u *Up) serve() error {
	target, err := apiServerAddr(u.cp)
	if err != nil {
		return err
	}
	u.forward = newForwarder(u.ln, target)
	u.ln = nil // the forwarder's now
	// The same address inside the namespace, so that the kubeconfig
	// serves commands lab exec runs there too (diagnose --kubeconfig,
	// which reaches the pods at their IPs only there).
	u.forwardInside = newForwarder(u.inside, target)
	u.inside = nil
	return nil
}

// API is the lab's view of the control plane, with dataplane dp; call it
// once.
func (u *Up) API(dp lab.Dataplane) (*lab.API, error) {
	api, pn, err := apiFor(u.cp, PodCIDR, ServiceCIDR, dp, u.podNetwork)
	u.podNet = pn
	return api, err
}

// KeepLogs makes Close keep the components' logs, which an error about a
// component that stopped names, and remove the rest of the state
// (etcd's data, keys, tokens).
func (u *Up) KeepLogs() { u.keepLogs = true }

// Dir is the control plane's state directory (its logs among the rest).
func (u *Up) Dir() string { return u.stateDir }

// Kubeconfig is the kubeconfig file's path.
func (u *Up) Kubeconfig() string { return u.kubeconfig }

// Kubectl is the kubectl built beside the control plane.
func (u *Up) Kubectl() string { return filepath.Join(u.binDir, "kubectl") }

// Close stops the forwarders and the control plane and removes the files
// Up wrote (the state directory, or all of it but the logs when a
// component failed to start).
func (u *Up) Close() {
	for _, ln := range []net.Listener{u.ln, u.inside} {
		if ln != nil {
			ln.Close()
		}
	}
	for _, f := range []*forwarder{u.forward, u.forwardInside} {
		if f != nil {
			f.close()
		}
	}
	if u.podNet != nil {
		u.podNet.Close()
	}
	if u.cp != nil {
		u.cp.Close()
	}
	if u.kubeconfig != "" {
		os.Remove(u.kubeconfig)
	}
	if u.stateDir != "" {
		controlplane.RemoveState(u.stateDir, u.keepLogs)
	}
}

// apiServerAddr is the API server's "IP:port" inside the namespace.
func apiServerAddr(cp *controlplane.ControlPlane) (string, error) {
	u, err := url.Parse(cp.URL())
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("lab up: API server address %q: %v", cp.URL(), err)
	}
	return u.Host, nil
}
