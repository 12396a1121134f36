package load

import (
	"context"
	"fmt"

	"github.com/pinlab/pinlab/internal/load/cachedns"
	"google.golang.org/grpc/resolver"
)

// onceBuilder builds the "once" resolver: it looks the target up when
// grpc-go builds it (when the channel leaves idle: Run, Restart or
// Reconfigure, never New) and hands grpc-go that list, and nothing else,
// for good, as a client configured with IPs rendered at start-up.
type onceBuilder struct {
	dial   cachedns.DialFunc // how the lookup is sent (dialFor)
	target cachedns.Target
}

func (b onceBuilder) Scheme() string { return cachedns.Scheme }

// Build starts the lookup in a goroutine owned by the returned resolver,
// bounded by onceTimeout. An empty answer gives grpc-go an empty list; a
// failed lookup is reported as a resolver error. Either way every call then
// fails (plan.CauseNoAddress), and nothing asks DNS again.
func (b onceBuilder) Build(_ resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	ctx, cancel := context.WithTimeout(context.Background(), onceTimeout)
	r := &onceResolver{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		defer cancel()
		ips, err := cachedns.Lookup(ctx, b.target.Server, b.dial, b.target.Host)
		if err != nil {
			// An empty list first: grpc-go builds the channel's balancer
			// on its first update and, without one, fails calls with the
			// bare error, not as "name resolver error: ...".
			cc.UpdateState(resolver.State{})
			cc.ReportError(fmt.Errorf("resolver %q: %w", ResolverOnce, err))
			return
		}
		cc.UpdateState(cachedns.State(ips, b.target.Port))
	}()
	return r, nil
}

// onceResolver ignores ResolveNow; Close ends its lookup and waits for it.
type onceResolver struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (r *onceResolver) ResolveNow(resolver.ResolveNowOptions) {}

func (r *onceResolver) Close() {
	r.cancel()
	<-r.done
}
