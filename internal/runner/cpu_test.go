package runner

import (
	"errors"
	"testing"
)

// TestParseTicks: busy is every column but idle and iowait, steal
// included; guest and guest_nice, which user and nice already count, are
// not added again; a line that is not the cpu line is refused.
func TestParseTicks(t *testing.T) {
	tests := []struct {
		name string
		line string
		err  error
		want ticks
		ok   bool
	}{
		{name: "ten columns", line: "cpu  100 2 30 500 7 1 4 9 50 5\n",
			want: ticks{busy: 146, steal: 9, total: 653}, ok: true},
		{name: "old kernel, no steal", line: "cpu  100 2 30 500 7 1 4\n",
			want: ticks{busy: 137, total: 644}, ok: true},
		{name: "not the cpu line", line: "cpu0 100 2 30 500 7 1 4 9\n"},
		{name: "too short", line: "cpu 1 2 3\n"},
		{name: "not a number", line: "cpu 1 2 3 x 5 6 7 8\n"},
		{name: "read error", line: "cpu 1 2 3 4 5 6 7 8\n", err: errors.New("short read")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseTicks(tt.line, tt.err)
			if ok != tt.ok || got != tt.want {
				t.Errorf("parseTicks(%q) = %+v, %v; want %+v, %v", tt.line, got, ok, tt.want, tt.ok)
			}
		})
	}
}
