package kubelab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"

	"github.com/pinlab/pinlab/internal/controlplane"
	"github.com/pinlab/pinlab/internal/coredns"
	"github.com/pinlab/pinlab/internal/kubeproxy"
	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/podnet"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// MaxVariants bounds the control planes `lab run` runs at once (about 500
// MB and a few percent of a core each when idle): side-by-side variants
// run in batches of this many.
const MaxVariants = 4

// variantBits is the size of each variant's share of the pod and Service
// ranges: a /20 each.
const variantBits = 20

// Variants starts a real control plane per variant of a `lab run`, inside
// the network namespace. Start may be called concurrently.
type Variants struct {
	binDir     string
	dataplane  lab.Dataplane
	podNetwork PodNetwork
	logger     *slog.Logger
}

// NewVariants finds the control plane's binaries (and with
// PodNetworkNetns the CNI plugins); dp is the dataplane every variant's lab
// runs, pn how its pods are networked; logger (nil: none) receives the
// components' logs.
func NewVariants(dp lab.Dataplane, pn PodNetwork, logger *slog.Logger) (*Variants, error) {
	bin, err := controlplane.BinDir()
	if err != nil {
		return nil, err
	}
	if pn == PodNetworkNetns {
		if _, err := podnet.BinDir(); err != nil {
			return nil, err
		}
	}
	return &Variants{binDir: bin, dataplane: dp, podNetwork: pn, logger: logger}, nil
}

// Dataplane is what serves every variant's ClusterIPs.
func (v *Variants) Dataplane() lab.Dataplane { return v.dataplane }

// Start starts variant i's control plane, on the i-th /20 of the pod and
// Service ranges (pods 10.244.16i.0/20, Services 10.96.16i.0/20), and
// returns the lab's view of it and its stop, which the caller calls once
// the lab on it has closed: stop(true) when the lab failed, to keep the
// components' logs an error names (the rest of the state goes either way).
func (v *Variants) Start(ctx context.Context, i int) (*lab.API, func(failed bool) error, error) {
	pods, err1 := subnet(PodCIDR, variantBits, i)
	svcs, err2 := subnet(ServiceCIDR, variantBits, i)
	if err := errors.Join(err1, err2); err != nil {
		return nil, nil, fmt.Errorf("--control-plane kubernetes runs at most %d variants (a /%d of %v each): %w", 1<<(variantBits-PodCIDR.Bits()), variantBits, PodCIDR, err)
	}
	cp, err := controlplane.Start(ctx, controlplane.Config{BinDir: v.binDir, ServiceCIDR: svcs, AdvertiseAddress: lab.NodeIP(pods), Logger: v.logger})
	if err != nil {
		return nil, nil, err
	}
	api, pn, err := apiFor(cp, pods, svcs, v.dataplane, v.podNetwork)
	if err != nil {
		cp.Close()
		return nil, nil, err
	}
	stop := func(failed bool) error {
		if failed {
			cp.KeepLogs()
		}
		var err error
		if pn != nil {
			err = pn.Close()
		}
		return errors.Join(err, cp.Close())
	}
	return api, stop, nil
}

// apiFor is a lab's view of cp with dataplane dp: the real kube-proxy
// gets the binaries beside the control plane's, its kubeconfig and a log
// in the control plane's state directory; the real CoreDNS (under the
// real kube-proxy) the control plane's admin, to grant it kubeadm's RBAC,
// and a directory there for its Corefile, log and dnstap socket.
//
// With PodNetworkNetns each pod gets its own network namespace on a bridge
// (package podnet; its state in the control plane's directory), which the
// caller closes (the returned Network, nil otherwise) after the lab.
func apiFor(cp *controlplane.ControlPlane, pods, svcs netip.Prefix, dp lab.Dataplane, pn PodNetwork) (*lab.API, *podnet.Network, error) {
	client, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		return nil, nil, err
	}
	api := &lab.API{Client: client, PodCIDR: pods, ServiceCIDR: svcs, Dataplane: dp, KubeProxy: kubeproxy.Config{
		BinDir: cp.BinDir(), Kubeconfig: cp.KubeProxyKubeconfig(), Log: filepath.Join(cp.Dir(), "kube-proxy.log"),
	}, CoreDNS: coredns.Config{REST: cp.RESTConfig(), Dir: filepath.Join(cp.Dir(), "coredns")}, KubeletCA: cp.KubeletCA(), ControlPlane: cp, REST: rest.AnonymousClientConfig(cp.RESTConfig())}
	if pn != PodNetworkNetns {
		return api, nil, nil
	}
	n, err := NewPodNetwork(pods, filepath.Join(cp.Dir(), "podnet"))
	if err != nil {
		return nil, nil, err
	}
	api.PodNetwork = n
	return api, n, nil
}

// NewPodNetwork returns the pod network of a lab's node on pod range pods
// (package podnet): a bridge named after the range, the range's top /23
// (lab.NodeRange) kept local to the node, its state in stateDir (which the
// caller removes after closing it).
func NewPodNetwork(pods netip.Prefix, stateDir string) (*podnet.Network, error) {
	bin, err := podnet.BinDir()
	if err != nil {
		return nil, err
	}
	a := pods.Masked().Addr().As4()
	return podnet.New(podnet.Config{
		Bridge:   fmt.Sprintf("%s%02x%02x", loopback.PodBridgePrefix, a[1], a[2]),
		Subnet:   pods,
		Local:    []netip.Prefix{lab.NodeRange(pods)},
		BinDir:   bin,
		StateDir: stateDir,
	})
}
