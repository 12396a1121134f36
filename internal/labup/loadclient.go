package labup

import (
	"context"

	"github.com/pinlab/pinlab/internal/kubelet"
	"github.com/pinlab/pinlab/internal/loadpod"
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
