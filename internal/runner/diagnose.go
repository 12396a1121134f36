package runner

import (
	"context"
	"sync"
	"time"

	"errors"

	"github.com/pinlab/pinlab/internal/evidence"
	"github.com/pinlab/pinlab/internal/outcome"
	"github.com/pinlab/pinlab/internal/plan"
	"k8s.io/apimachinery/pkg/labels"
)

// DiagnoseSlack is the time left between the end of a diagnosis's window
// and the end of the run when Diagnose.At is zero: room for the second
// channelz reading of every pod.
const DiagnoseSlack = 2 * time.Second

// Diagnose asks Run to collect, in each variant's lab while its load runs,
// the evidence `pinlab diagnose --lab` collects from a lab up: the lab's
// objects (from its informer caches) and channelz readings of each pod (one a second)
// of every Service the variant's clients target, one a second over Window (package
// evidence). Judging it is package diagnose's.
type Diagnose struct {
	// At is when the first reading is taken, counted from load start;
	// zero means as late as the run allows: Window plus DiagnoseSlack
	// before its end (or at load start if the run is shorter).
	At time.Duration
	// Window is the time from the first reading to the last; zero means
	// evidence.DefaultWindow.
	Window time.Duration
}

// start returns when the first reading of a run of duration d is due.
func (d Diagnose) start(duration time.Duration) time.Duration {
	if d.At > 0 {
		return d.At
	}
	return max(0, duration-d.window()-DiagnoseSlack)
}

func (d Diagnose) window() time.Duration {
	if d.Window > 0 {
		return d.Window
	}
	return evidence.DefaultWindow
}

// labSource lists a variant's objects from its cluster's informer caches:
// the same objects a lab up's control API serves to `pinlab diagnose
// --lab`.
type labSource struct {
	c       Cluster
	variant string
}

func (s labSource) Objects(context.Context) (evidence.Objects, error) {
	f := s.c.Informers()
	var o evidence.Objects
	svcs, err1 := f.Core().V1().Services().Lister().List(labels.Everything())
	pods, err2 := f.Core().V1().Pods().Lister().List(labels.Everything())
	slices, err3 := f.Discovery().V1().EndpointSlices().Lister().List(labels.Everything())
	if err := errors.Join(err1, err2, err3); err != nil {
		return o, err
	}
	for _, x := range svcs {
		o.Services = append(o.Services, *x)
	}
	for _, x := range pods {
		o.Pods = append(o.Pods, *x)
	}
	for _, x := range slices {
		o.EndpointSlices = append(o.EndpointSlices, *x)
	}
	return o, nil
}

func (s labSource) String() string { return "the lab of variant " + s.variant }

// diagnose waits until the diagnosis is due (or ctx ends), then collects
// the evidence of every target Service of the variant at once. It blocks
// for about the window plus one round of readings (each bounded by
// evidence.SampleTimeout); the caller keeps load running meanwhile.
func (r *variantRun) diagnose(ctx context.Context, l Cluster, start time.Time) []outcome.Diagnosis {
	d := *r.opts.Diagnose
	t := time.NewTimer(time.Until(start.Add(d.start(r.plan.Duration))))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil
	case <-t.C:
	}
	targets := r.v.Services()
	out := make([]outcome.Diagnosis, len(targets))
	var wg sync.WaitGroup
	for i, tg := range targets {
		if !speaksGRPC(r.v, tg) {
			out[i] = outcome.Diagnosis{Service: tg.Key(), At: time.Since(start), Error: notGRPC}
			continue
		}
		wg.Go(func() { out[i] = collect(ctx, labSource{l, r.v.Name}, tg, d.window(), start) })
	}
	wg.Wait()
	return out
}

// notGRPC is the Error of a Service that only HTTP/1.1 or WebSocket clients
// call: its pods' channelz counts gRPC calls only, so diagnose would read
// their kubelet probes and nothing else.
const notGRPC = "its clients speak HTTP/1.1 or WebSocket, and diagnose counts gRPC calls (channelz)"

// speaksGRPC reports whether some gRPC client group of v targets tg.
func speaksGRPC(v plan.Variant, tg plan.Target) bool {
	for _, g := range v.Groups {
		if g.Target.Key() == tg.Key() && g.Settings.Protocol == plan.ProtocolGRPC {
			return true
		}
	}
	return false
}

// collect collects the evidence of one target Service.
func collect(ctx context.Context, src labSource, tg plan.Target, window time.Duration, start time.Time) outcome.Diagnosis {
	d := outcome.Diagnosis{Service: tg.Key(), At: time.Since(start)}
	ev, err := evidence.Collect(ctx, src, evidence.Request{Namespace: tg.Namespace, Service: tg.Service, Window: window})
	d.Evidence = ev
	if err != nil {
		d.Error = err.Error()
	}
	return d
}
