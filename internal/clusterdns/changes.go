package clusterdns

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

// now is the clock of the SOA serial and of the cache plugin; tests
// replace it.
var now = time.Now

// trackers numbers the change indexers, one set per Server, so that
// Servers sharing an informer factory each get their own.
var trackers atomic.Uint64

// changes records when the API objects behind the zone last changed, so
// that cached answers can tell whether they are still current.
//
// Every change takes the next number of one sequence; the sequence number
// of the last change is kept per Service (its Service object and its
// EndpointSlices), for Namespaces and for Pods. An answer built after
// reading sequence number n is current while no change it depends on has
// a number above n.
//
// The counters move inside index functions: client-go calls them while
// it holds the informer store's write lock, so a change is counted before
// any lister read or event handler can see the new object. A query that
// reads the sequence and then the listers therefore never keeps an answer
// older than the store.
type changes struct {
	seq    atomic.Uint64 // number of the last change
	nsSeq  atomic.Uint64 // number of the last Namespace change
	podSeq atomic.Uint64 // number of the last Pod change
	serial atomic.Uint32 // Unix time of the last change: the SOA serial
	id     uint64        // names this tracker's index functions

	mu   sync.Mutex
	svcs map[string]*atomic.Uint64 // "<ns>/<service>": number of its last change
}

func newChanges() *changes {
	c := &changes{id: trackers.Add(1), svcs: map[string]*atomic.Uint64{}}
	c.next()
	return c
}

// indexers returns an index that records each change with changed and
// indexes nothing.
func (c *changes) indexers(changed func(obj any)) cache.Indexers {
	name := fmt.Sprintf("clusterdns.pinlab/changes-%d", c.id)
	return cache.Indexers{name: func(obj any) ([]string, error) {
		changed(obj)
		return nil, nil
	}}
}

// next numbers a new change and moves the SOA serial.
func (c *changes) next() uint64 {
	c.serial.Store(uint32(now().Unix()))
	return c.seq.Add(1)
}

func (c *changes) serviceChanged(obj any) {
	svc, ok := unwrap(obj).(*corev1.Service)
	if !ok {
		c.next()
		return
	}
	c.keyChanged(svc.Namespace + "/" + svc.Name)
}

func (c *changes) sliceChanged(obj any) {
	key := sliceService(unwrap(obj))
	if key == "" {
		c.next()
		return
	}
	c.keyChanged(key)
}

func (c *changes) namespaceChanged(any) { raise(&c.nsSeq, c.next()) }
func (c *changes) podChanged(any)       { raise(&c.podSeq, c.next()) }

func (c *changes) keyChanged(key string) {
	c.mu.Lock()
	ctr := c.svcs[key]
	if ctr == nil {
		ctr = new(atomic.Uint64)
		c.svcs[key] = ctr
	}
	c.mu.Unlock()
	raise(ctr, c.next())
}

// service returns the counter of a Service key, or nil if no object of that
// key has been seen yet. Counters are never removed: one that came back
// would start over and could pass off old answers as current.
func (c *changes) service(key string) *atomic.Uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.svcs[key]
}

// raise sets a to v unless it already holds more.
func raise(a *atomic.Uint64, v uint64) {
	for {
		old := a.Load()
		if old >= v || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// unwrap returns the last known state of a deleted object.
func unwrap(obj any) any {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return d.Obj
	}
	return obj
}

// scope is what an answer depends on, besides the name's grammar.
type scope uint8

const (
	scopeAll        scope = iota // anything: current only until the next change
	scopeNamespaces              // which Namespaces exist
	scopePods                    // Namespaces and Pods
	scopeService                 // Namespaces and one Service with its EndpointSlices
)

// current reports whether an answer built after reading sequence number
// seq, depending on sc (and the counter svc for scopeService), is current.
func (c *changes) current(seq uint64, sc scope, svc *atomic.Uint64) bool {
	switch sc {
	case scopeService:
		return c.nsSeq.Load() <= seq && svc.Load() <= seq
	case scopePods:
		return c.nsSeq.Load() <= seq && c.podSeq.Load() <= seq
	case scopeNamespaces:
		return c.nsSeq.Load() <= seq
	}
	return c.seq.Load() == seq
}
