package xds

import (
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestEventSinkClose: close ends a write that hangs at once rather than
// after its 10 s bound, and later writes are dropped.
func TestEventSinkClose(t *testing.T) {
	cs := fake.NewClientset()
	entered := make(chan struct{})
	release := make(chan struct{})
	defer close(release)
	cs.PrependReactor("create", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
		close(entered)
		<-release // an API server that does not answer
		return true, nil, errors.New("never")
	})
	s := newEventSink(cs)
	done := make(chan error, 1)
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: "shop"}}
	go func() { _, err := s.Create(ev); done <- err }()
	<-entered
	began := time.Now()
	closed := make(chan struct{})
	go func() { s.close(); close(closed) }()
	// The fake ignores contexts; the sink's own context is what a real
	// client would stop on. Let the write return once its context ends.
	select {
	case <-s.ctx.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("close did not cancel the writes in flight")
	}
	release <- struct{}{}
	<-closed
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("close took %v", took)
	}
	<-done
	if _, err := s.Create(ev); !errors.Is(err, errSinkClosed) {
		t.Errorf("a write after close: %v, want errSinkClosed", err)
	}
}
