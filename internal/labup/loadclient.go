package labup

import (
	"context"

	"github.com/pinlab/pinlab/internal/kubelet"
	"github.com/pinlab/pinlab/internal/loadpod"
	"github.com/pinlab/pinlab/internal/xds"
)

// LoadClient is the lab's kubelet.Config.LoadClient: the pinlab
// image's load client (package loadpod, as the image's process runs it)
// for the containers of it that `cluster run` puts on the lab's node.
func LoadClient(ctx context.Context, c kubelet.LoadContainer) int {
	return loadpod.Main(ctx, c.Args, c.Getenv, loadpod.Host{
		Source: c.Source, Dial: c.Dial, EventsIP: c.EventsIP, DNS: c.DNS, Kubernetes: c.Kubernetes, Listen: c.Listen,
		SetMinResolutionInterval: c.SetMinResolutionInterval, Stdout: c.Stdout, Stderr: c.Stderr,
	})
}

// XDSServer is the lab's kubelet.Config.XDSServer: the pinlab image's xDS
// control plane (package xds's Main, as the image's process runs it) for
// the containers of it that deploy/xds puts on the lab's node. The node
// runs them in its own process, as the lab's user, with no filesystem of
// the container's: --bootstrap is refused (exit 2), since it would write,
// then remove, a file of the host's.
func XDSServer(ctx context.Context, c kubelet.XDSContainer) int {
	return xds.Main(ctx, c.Args, xds.Host{REST: c.REST, NoREST: c.NoREST, Listen: c.Listen, NoFiles: true, Stdout: c.Stdout, Stderr: c.Stderr})
}
