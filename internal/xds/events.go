package xds

import (
	"context"
	"errors"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// eventTimeout bounds each write of an event to the API.
const eventTimeout = 10 * time.Second

// errSinkClosed is an event's write after the server closed: dropped.
var errSinkClosed = errors.New("xds: closed: event dropped")

// eventSink writes the server's events through client (record.EventSink),
// each call bounded by eventTimeout, until close; then it drops them.
// close cancels the writes in flight and waits for them, so that no
// request made with the server's credentials outlives Close (the record
// broadcaster's Shutdown does not wait for its sink's goroutine) and
// Close returns at once.
type eventSink struct {
	client kubernetes.Interface
	ctx    context.Context // ended by close
	cancel context.CancelFunc

	mu       sync.Mutex
	closed   bool
	inflight sync.WaitGroup // Add under mu, only while not closed
}

func newEventSink(client kubernetes.Interface) *eventSink {
	ctx, cancel := context.WithCancel(context.Background())
	return &eventSink{client: client, ctx: ctx, cancel: cancel}
}

func (s *eventSink) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.inflight.Add(1)
	return true
}

func (s *eventSink) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.inflight.Wait()
}

func (s *eventSink) Create(e *corev1.Event) (*corev1.Event, error) {
	if !s.enter() {
		return nil, errSinkClosed
	}
	defer s.inflight.Done()
	ctx, cancel := context.WithTimeout(s.ctx, eventTimeout)
	defer cancel()
	return s.client.CoreV1().Events(e.Namespace).Create(ctx, e, metav1.CreateOptions{})
}

func (s *eventSink) Update(e *corev1.Event) (*corev1.Event, error) {
	if !s.enter() {
		return nil, errSinkClosed
	}
	defer s.inflight.Done()
	ctx, cancel := context.WithTimeout(s.ctx, eventTimeout)
	defer cancel()
	return s.client.CoreV1().Events(e.Namespace).Update(ctx, e, metav1.UpdateOptions{})
}

func (s *eventSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	if !s.enter() {
		return nil, errSinkClosed
	}
	defer s.inflight.Done()
	ctx, cancel := context.WithTimeout(s.ctx, eventTimeout)
	defer cancel()
	return s.client.CoreV1().Events(e.Namespace).Patch(ctx, e.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
}
