package kubetier

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/controlplane"
	"github.com/pinlab/pinlab/internal/kubelab"
	"github.com/pinlab/pinlab/internal/kubelet"
	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/labup"
	"github.com/pinlab/pinlab/internal/netns"
	"github.com/pinlab/pinlab/internal/netns/netnstest"
	"github.com/pinlab/pinlab/internal/podnet"
	"go.uber.org/goleak"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// requireEnv, set to 1, makes the tests fail instead of skipping when the
// control plane's binaries are not built.
const requireEnv = "PINLAB_REQUIRE_CONTROL_PLANE"

// The tier shared by every test: the control plane, the lab on it and a
// kubeconfig for kubectl. skip says why the tests skip, if they do.
var (
	cp         *controlplane.ControlPlane
	theLab     *lab.Lab
	kubeconfig string
	kubectlBin string
	podNet     *podnet.Network // nil when the pods share the lab's namespace
	skip       string
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(userEnv); spec != "" {
		os.Exit(userMain(spec)) // TestDiagnoseFromUserMachine's child
	}
	netnstest.Main(tier{m}, netns.PodPrefix, netns.ServicePrefix)
}

type tier struct{ m *testing.M }

// Run starts the control plane and the lab, runs the tests, stops both and
// checks that no goroutine outlived them.
func (t tier) Run() int {
	bin, err := controlplane.BinDir()
	if err != nil {
		if os.Getenv(requireEnv) == "1" {
			fmt.Fprintf(os.Stderr, "kubetier: %v\n", err)
			return 1
		}
		skip = err.Error()
		return t.m.Run()
	}
	stop, err := startTier(bin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubetier: %v\n", err)
		return 1
	}
	code := t.m.Run()
	if err := stop(); err != nil {
		fmt.Fprintf(os.Stderr, "kubetier: stopping: %v\n", err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			return 1
		}
	}
	return code
}

// startTier starts the control plane from bin and a lab over it.
func startTier(bin string) (stop func() error, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "kubetier-")
	if err != nil {
		return nil, err
	}
	began := time.Now()
	cp, err = controlplane.Start(ctx, controlplane.Config{BinDir: bin, Dir: filepath.Join(dir, "cp"), AdvertiseAddress: lab.NodeIP(netns.PodPrefix)})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	// Each pod in its own network namespace, as on a real node, when the
	// CNI plugins are built (required with requireEnv).
	if podNet, err = kubelab.NewPodNetwork(netns.PodPrefix, filepath.Join(dir, "podnet")); err != nil {
		if !errors.Is(err, podnet.ErrNotBuilt) || os.Getenv(requireEnv) == "1" {
			cp.Close()
			os.RemoveAll(dir)
			return nil, err
		}
		fmt.Printf("kubetier: pods share the lab's network namespace: %v\n", err)
	}
	client, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err == nil {
		api := &lab.API{Client: client, PodCIDR: netns.PodPrefix, ServiceCIDR: netns.ServicePrefix, KubeletCA: cp.KubeletCA(), REST: rest.AnonymousClientConfig(cp.RESTConfig())}
		if podNet != nil {
			api.PodNetwork = podNet
		}
		// The node holds the pinlab image cluster run names (tierImage)
		// and runs its load client and xDS control plane containers, as
		// lab up's node does.
		theLab, err = lab.Start(ctx, lab.Config{API: api, Kubelet: kubelet.Config{Images: []string{tierDigest},
			LoadClient: labup.LoadClient, XDSServer: labup.XDSServer}})
	}
	closeNet := func() error {
		if podNet == nil {
			return nil
		}
		return podNet.Close()
	}
	if err != nil {
		closeNet()
		cp.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	fmt.Printf("kubetier: control plane and lab up in %.1fs\n", time.Since(began).Seconds())
	kubeconfig, kubectlBin = filepath.Join(dir, "kubeconfig"), filepath.Join(bin, "kubectl")
	if err := cp.WriteKubeconfig(kubeconfig, cp.URL()); err != nil {
		theLab.Close()
		closeNet()
		cp.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	return func() error {
		lerr := theLab.Close()
		nerr := closeNet()
		cerr := cp.Close()
		os.RemoveAll(dir)
		return errors.Join(lerr, nerr, cerr)
	}, nil
}

// needTier skips t when the tier could not start.
func needTier(t testing.TB) {
	t.Helper()
	if skip != "" {
		t.Skip(skip)
	}
}
