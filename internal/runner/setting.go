package runner

import (
	"context"
	"sync"
	"time"

	grpcdns "google.golang.org/grpc/resolver/dns"
)

// minResolution arbitrates grpc-go's process-wide minimum re-resolution
// interval between concurrent runs.
var minResolution = &sharedSetting{set: grpcdns.SetMinResolutionInterval}

// sharedSetting is a process-wide value that concurrent holders must agree
// on: hold waits until the value is free or already what the caller needs.
type sharedSetting struct {
	set func(time.Duration)

	mu      sync.Mutex
	value   time.Duration
	holders int
	changed chan struct{} // closed and replaced when holders drops to 0
}

func (s *sharedSetting) hold(ctx context.Context, v time.Duration) (release func(), err error) {
	for {
		s.mu.Lock()
		if s.changed == nil {
			s.changed = make(chan struct{})
		}
		if s.holders == 0 || s.value == v {
			if s.holders == 0 {
				s.value = v
				s.set(v)
			}
			s.holders++
			s.mu.Unlock()
			var once sync.Once
			return func() { once.Do(s.release) }, nil
		}
		wait := s.changed
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-wait:
		}
	}
}

func (s *sharedSetting) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holders--; s.holders == 0 {
		close(s.changed)
		s.changed = make(chan struct{})
	}
}
