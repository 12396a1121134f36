package cli

import (
	"io"

	"github.com/pinlab/pinlab/internal/evidence"
	"github.com/pinlab/pinlab/internal/exit"
	"github.com/pinlab/pinlab/internal/xds"
	"github.com/spf13/cobra"
)

func newCmdXDS(stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "xds",
		Short: "An xDS control plane for proxyless gRPC clients",
	}
	groupCmd(cmd)
	cmd.AddCommand(newCmdXDSServe(stdout, stderr))
	return cmd
}

// xdsServeOptions are `pinlab xds serve`'s flags.
type xdsServeOptions struct {
	Listen, Advertise, Namespace, Bootstrap string
	Kube                                    *evidence.Kube
}

func newCmdXDSServe(stdout, _ io.Writer) *cobra.Command {
	o := &xdsServeOptions{Kube: &evidence.Kube{}}
	cmd := &cobra.Command{
		Use:   "serve [--listen ADDR] [--bootstrap FILE]",
		Short: "Serve the cluster's Services to gRPC clients over xDS",
		Long: `Serve, over xDS (ADS), every port of every Service of the cluster your
kubeconfig names as xds:///SERVICE.NAMESPACE:PORT: a Listener, a route, a
Cluster and its endpoints from the Service's EndpointSlices (every slice
merged; ready endpoints HEALTHY, terminating ones that still serve
DRAINING; zones as localities), pushed to the clients as they change.

A Service's annotations choose its load-balancing policy and outlier
detection:
  xds.pinlab.dev/lb-policy: round_robin (default), least_request,
      weighted_round_robin, ring_hash or pick_first
  xds.pinlab.dev/lb-config: the policy's settings as JSON, e.g.
      {"choiceCount": 3}
  xds.pinlab.dev/outlier-detection: gRFC A50's settings as JSON, e.g.
      {"interval": "1s", "failurePercentageEjection": {"threshold": 30,
      "minimumHosts": 3, "requestVolume": 20}} (the defaults, 5 hosts and
      50 calls per interval, eject nothing in a small fleet)
A bad annotation is reported as a Warning event on the Service and ignored.

It reads Services and EndpointSlices and writes events (deploy/xds has the
RBAC and a Deployment to run it in the cluster). It listens on loopback
unless --listen says otherwise; what it serves is what list on those
objects shows. Ctrl-C stops it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := o.Kube.Load(); err != nil {
				return exit.UsageError(err)
			}
			return xds.Serve(cmd.Context(), xds.ServeConfig{REST: o.Kube.Config(), Namespace: o.Namespace, Listen: o.Listen,
				Advertise: o.Advertise, BootstrapFile: o.Bootstrap, Out: stdout})
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Listen, "listen", xds.DefaultListen, "address to serve xDS on")
	f.StringVar(&o.Advertise, "advertise", "", "address clients dial, for the bootstrap (default: the --listen address)")
	f.StringVarP(&o.Namespace, "namespace", "n", "", "serve only this namespace's Services (default: every namespace)")
	f.StringVar(&o.Bootstrap, "bootstrap", "", "write the clients' xDS bootstrap JSON to this file (removed on exit); point GRPC_XDS_BOOTSTRAP at it")
	kubeFlags(f, o.Kube)
	return cmd
}
