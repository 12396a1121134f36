package cluster

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// worker is the loop every controller shares: informer handlers enqueue
// "namespace/name" keys, one goroutine syncs them; failed syncs are retried
// with the workqueue's rate-limited backoff, as in kube-controller-manager.
type worker struct {
	name   string
	queue  workqueue.TypedRateLimitingInterface[string]
	sync   func(ctx context.Context, key string) error
	synced []cache.InformerSynced
	log    *slog.Logger
}

func newWorker(name string, log *slog.Logger, sync func(context.Context, string) error, synced ...cache.InformerSynced) *worker {
	rl := workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, 2*time.Second)
	return &worker{
		name:   name,
		queue:  workqueue.NewTypedRateLimitingQueueWithConfig(rl, workqueue.TypedRateLimitingQueueConfig[string]{Name: name}),
		sync:   sync,
		synced: synced,
		log:    log.With("controller", name),
	}
}

func (w *worker) enqueue(key string) { w.queue.Add(key) }

// enqueueAfter queues key once d has passed (at once if d <= 0), for
// progress that depends on time alone (minReadySeconds, progress deadlines).
func (w *worker) enqueueAfter(key string, d time.Duration) { w.queue.AddAfter(key, d) }

// run processes keys until ctx ends, then shuts the queue down and waits for
// the processing goroutine.
func (w *worker) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	defer w.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), w.synced...) {
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for w.next(ctx) {
		}
	}()
	<-ctx.Done()
}

func (w *worker) next(ctx context.Context) bool {
	key, quit := w.queue.Get()
	if quit {
		return false
	}
	defer w.queue.Done(key)
	if err := w.sync(ctx, key); err != nil {
		if ctx.Err() == nil {
			w.log.Debug("sync failed, retrying", "key", key, "err", err)
			w.queue.AddRateLimited(key)
		}
		return true
	}
	w.queue.Forget(key)
	return true
}

// handler returns informer handlers that enqueue keyFn's keys for every
// add, update and delete.
func handler(keys func(obj any) []string, enqueue func(string)) cache.ResourceEventHandlerFuncs {
	add := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		for _, k := range keys(obj) {
			enqueue(k)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    add,
		UpdateFunc: func(old, cur any) { add(old); add(cur) },
		DeleteFunc: add,
	}
}

// Controllers is the set of controllers of one cluster; create it with
// NewControllers before starting the informer factory, run it with
// Cluster.Run.
type Controllers struct {
	runs []func(context.Context)
}

// NewControllers registers the Deployment, ReplicaSet, StatefulSet and
// EndpointSlice controllers' informers on c's factory.
func NewControllers(c *Cluster) *Controllers {
	d := newDeploymentController(c)
	rs := newReplicaSetController(c)
	ss := newStatefulSetController(c)
	es := newEndpointSliceController(c)
	return &Controllers{runs: []func(context.Context){d.run, rs.run, ss.run, es.run}}
}
