package scenario

import (
	"strings"
	"testing"
)

func TestSetFlag(t *testing.T) {
	tests := []struct {
		name string
		in   []string
		want string
	}{
		{name: "append", in: []string{"pod", "pricing"}, want: "pod pricing --max-connection-age=5s"},
		{name: "replace joined", in: []string{"pod", "pricing", "--max-connection-age=1s"}, want: "pod pricing --max-connection-age=5s"},
		{name: "replace separate", in: []string{"pod", "--max-connection-age", "1s", "pricing"}, want: "pod pricing --max-connection-age=5s"},
		{name: "keep grace", in: []string{"pod", "pricing", "--max-connection-age-grace=2s"}, want: "pod pricing --max-connection-age-grace=2s --max-connection-age=5s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := strings.Join(setFlag(tt.in, "--max-connection-age", "5s"), " "); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
