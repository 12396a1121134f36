package workload

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseArgs(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    Args
		wantErr bool
	}{
		{name: "plain", args: []string{"pod", "pricing"}, want: Args{Workload: "pricing"}},
		{name: "all flags", args: []string{"pod", "pricing", "--port=9000", "--max-connection-age", "10s", "--max-connection-age-grace=5s"},
			want: Args{Workload: "pricing", Port: 9000, MaxConnectionAge: 10 * time.Second, MaxConnectionAgeGrace: 5 * time.Second}},
		{name: "flags first", args: []string{"pod", "--max-connection-age=1m", "pricing"}, want: Args{Workload: "pricing", MaxConnectionAge: time.Minute}},
		{name: "not a pod command", args: []string{"load", "pricing"}, wantErr: true},
		{name: "no workload", args: []string{"pod"}, wantErr: true},
		{name: "unknown workload", args: []string{"pod", "inventory"}, wantErr: true},
		{name: "unknown flag", args: []string{"pod", "pricing", "--max-age=1s"}, wantErr: true},
		{name: "bad duration", args: []string{"pod", "pricing", "--max-connection-age=soon"}, wantErr: true},
		{name: "bad bool", args: []string{"pod", "pricing", "--orca=maybe"}, wantErr: true},
		{name: "bad port", args: []string{"pod", "pricing", "--port=70000"}, wantErr: true},
		{name: "otel metrics", args: []string{"pod", "pricing", "--metrics", "otel"}, want: Args{Workload: "pricing", Metrics: "otel"}},
		{name: "unknown metrics", args: []string{"pod", "pricing", "--metrics", "statsd"}, wantErr: true},
		{name: "delays", args: []string{"pod", "pricing", "--startup-delay=2s", "--drain-delay", "500ms"},
			want: Args{Workload: "pricing", StartupDelay: 2 * time.Second, DrainDelay: 500 * time.Millisecond}},
		{name: "negative drain delay", args: []string{"pod", "pricing", "--drain-delay=-1s"}, wantErr: true},
		{name: "negative startup delay", args: []string{"pod", "pricing", "--startup-delay=-1s"}, wantErr: true},
		{name: "service time", args: []string{"pod", "pricing", "--service-time=20ms"}, want: Args{Workload: "pricing", ServiceTime: 20 * time.Millisecond}},
		{name: "negative service time", args: []string{"pod", "pricing", "--service-time=-1ms"}, wantErr: true},
		{name: "endless service time", args: []string{"pod", "pricing", "--service-time=1h"}, wantErr: true},
		{name: "fail percent and orca", args: []string{"pod", "pricing", "--fail-percent=50", "--orca"}, want: Args{Workload: "pricing", FailPercent: 50, ORCA: true}},
		{name: "fail percent above 100", args: []string{"pod", "pricing", "--fail-percent=101"}, wantErr: true},
		{name: "negative fail percent", args: []string{"pod", "pricing", "--fail-percent=-1"}, wantErr: true},
		{name: "http port", args: []string{"pod", "pricing", "--http-port=8080"}, want: Args{Workload: "pricing", HTTPPort: 8080}},
		{name: "http port beside port", args: []string{"pod", "pricing", "--port", "9000", "--http-port", "9001"},
			want: Args{Workload: "pricing", Port: 9000, HTTPPort: 9001}},
		{name: "http port zero", args: []string{"pod", "pricing", "--http-port=0"}, wantErr: true},
		{name: "http port too big", args: []string{"pod", "pricing", "--http-port=65536"}, wantErr: true},
		{name: "http port negative", args: []string{"pod", "pricing", "--http-port=-1"}, wantErr: true},
		{name: "http port equals port", args: []string{"pod", "pricing", "--port=9000", "--http-port=9000"}, wantErr: true},
		{name: "http port not a number", args: []string{"pod", "pricing", "--http-port=http"}, wantErr: true},
		{name: "metrics port", args: []string{"pod", "pricing", "--metrics-port=9090"}, want: Args{Workload: "pricing", MetricsPort: 9090}},
		{name: "metrics port zero", args: []string{"pod", "pricing", "--metrics-port=0"}, wantErr: true},
		{name: "metrics port equals port", args: []string{"pod", "pricing", "--port=9000", "--metrics-port=9000"}, wantErr: true},
		{name: "metrics port equals http port", args: []string{"pod", "pricing", "--http-port=9001", "--metrics-port=9001"}, wantErr: true},
		// grpc-go panics in its jitter below 10ns (issue 15).
		{name: "age 1ns", args: []string{"pod", "pricing", "--max-connection-age", "1ns"}, wantErr: true},
		{name: "age 9ns", args: []string{"pod", "pricing", "--max-connection-age=9ns"}, wantErr: true},
		{name: "age 10ns", args: []string{"pod", "pricing", "--max-connection-age=10ns"}, want: Args{Workload: "pricing", MaxConnectionAge: 10}},
		{name: "age above 1000 days", args: []string{"pod", "pricing", "--max-connection-age=24001h"}, wantErr: true},
		{name: "negative grace", args: []string{"pod", "pricing", "--max-connection-age-grace=-1s"}, wantErr: true},
		{name: "grace 1ns", args: []string{"pod", "pricing", "--max-connection-age-grace=1ns"}, want: Args{Workload: "pricing", MaxConnectionAgeGrace: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseArgs(tt.args)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseArgs(%q) error = %v, want error %v", tt.args, err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); !tt.wantErr && diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestFlagError: a flag's bad value is reported as what the flag wants.
func TestFlagError(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"pod", "pricing", "--orca=maybe"}, `pod: --orca "maybe": want true or false`},
		{[]string{"pod", "pricing", "--service-time", "fast"}, `pod: --service-time "fast": want a duration such as 500ms, 2s or 1m30s`},
		{[]string{"pod", "pricing", "--fail-percent=half"}, `pod: --fail-percent "half": want a whole number`},
		{[]string{"pod", "pricing", "--orcas"}, `pod: unknown flag: --orcas`},
	}
	for _, tt := range tests {
		_, err := ParseArgs(tt.args)
		if err == nil || err.Error() != tt.want {
			t.Errorf("%q: error %v, want %s", tt.args, err, tt.want)
		}
	}
}
