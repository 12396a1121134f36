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

// TestShares: busy and steal over all the ticks between two readings;
// unknown (-1, 0) when no time passed or a counter went back.
func TestShares(t *testing.T) {
	base := ticks{busy: 1000, steal: 100, total: 4000}
	tests := []struct {
		name           string
		next           ticks
		machine, steal float64
	}{
		{name: "a quarter busy, a tenth stolen", next: ticks{busy: 1050, steal: 120, total: 4200}, machine: 0.25, steal: 0.1},
		{name: "idle", next: ticks{busy: 1000, steal: 100, total: 4200}, machine: 0, steal: 0},
		{name: "no time passed", next: base, machine: -1, steal: 0},
		{name: "steal went back", next: ticks{busy: 1050, steal: 90, total: 4200}, machine: -1, steal: 0},
		{name: "busy went back", next: ticks{busy: 900, steal: 120, total: 4200}, machine: -1, steal: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			machine, steal := shares(base, tt.next)
			if machine != tt.machine || steal != tt.steal {
				t.Errorf("shares = %v, %v; want %v, %v", machine, steal, tt.machine, tt.steal)
			}
		})
	}
}
