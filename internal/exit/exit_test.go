package exit

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestOf(t *testing.T) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name     string
		ctx      context.Context
		err      error
		wantCode Code
		wantSay  bool
	}{
		{name: "success", ctx: context.Background(), err: nil, wantCode: OK},
		{name: "a failure", ctx: context.Background(), err: errors.New("boom"), wantCode: Failed, wantSay: true},
		{name: "a usage mistake, wrapped", ctx: context.Background(), err: fmt.Errorf("lab run: %w", UsageError(errors.New("--variant x"))), wantCode: Usage, wantSay: true},
		{name: "overloaded", ctx: context.Background(), err: OverloadedError(errors.New("2 checks")), wantCode: Overloaded, wantSay: true},
		{name: "a code, said already", ctx: context.Background(), err: fmt.Errorf("diagnose: %w", Pinned), wantCode: Pinned},
		{name: "interrupted", ctx: done, err: errors.New("context canceled"), wantCode: Interrupted, wantSay: true},
		{name: "a usage mistake while interrupted", ctx: done, err: UsageError(errors.New("bad")), wantCode: Usage, wantSay: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, say := Of(tt.ctx, tt.err)
			if code != tt.wantCode || say != tt.wantSay {
				t.Errorf("Of(%v) = %d, %v; want %d, %v", tt.err, code, say, tt.wantCode, tt.wantSay)
			}
		})
	}
}

// TestMarkersKeepTheMessage: a marked error reads as the error it wraps.
func TestMarkersKeepTheMessage(t *testing.T) {
	err := errors.New("--diagnose-at 1m ends after the run")
	for _, marked := range []error{UsageError(err), OverloadedError(err)} {
		if marked.Error() != err.Error() || !errors.Is(marked, err) {
			t.Errorf("%T reads %q (Is: %v), want %q", marked, marked, errors.Is(marked, err), err)
		}
	}
}
