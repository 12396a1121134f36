package workload

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/pflag"
)

// DefaultPort is the port the pricing workload's gRPC server listens on
// when neither the command line (--port) nor the pod spec (a TCP
// containerPort) names one.
const DefaultPort = 8471

// Names lists the workload names a pod command line may name.
var Names = []string{"pricing"}

// Args is a parsed pod command line, the container args of a pod whose image
// is pinlab: `pod <workload> [--port N] [--http-port N] [--metrics-port N]
// [--max-connection-age D] [--max-connection-age-grace D] [--startup-delay D]
// [--drain-delay D] [--service-time D] [--fail-percent N] [--orca]
// [--no-channelz] [--metrics FAMILY]`,
// durations as Go's
// time.ParseDuration reads them. The kubelet turns it into the config of the
// servers of package pod (pod.Config, pod.WebConfig).
type Args struct {
	// Workload names what the pod serves; only "pricing" exists.
	Workload string
	// Port is the TCP port to listen on; 0 means the pod's first declared
	// containerPort, else DefaultPort.
	Port int
	// HTTPPort, if not zero, is the TCP port of the pod's HTTP/1.1 and
	// WebSocket server (pod.WebServer), served beside the gRPC server by the
	// same process. Zero means the pod's containerPort named "http",
	// if it declares one, else no HTTP server (For resolves this).
	HTTPPort int
	// MetricsPort, if not zero, is the TCP port of the pod's Prometheus
	// metrics server (GET /metrics; see pod.Config.MetricsAddr). Zero means
	// the pod's containerPort named "metrics", if it declares one, else no
	// metrics server (For resolves this).
	MetricsPort int
	// MaxConnectionAge is grpc-go's keepalive.ServerParameters.MaxConnectionAge:
	// after about this long (grpc-go adds +/-10% jitter) the server sends
	// GOAWAY. Zero means never; otherwise MinConnectionAge to
	// MaxConnectionAgeLimit (see CheckConnectionAge).
	MaxConnectionAge time.Duration
	// MaxConnectionAgeGrace is how long calls may continue after that GOAWAY
	// before the connection is closed. Zero means forever; any positive
	// value works (1ns closes the connection right after the GOAWAY).
	MaxConnectionAgeGrace time.Duration
	// StartupDelay is how long the process initialises before it listens;
	// connects are refused until then. Zero means it listens at once.
	StartupDelay time.Duration
	// DrainDelay is how long the server keeps serving normally after
	// SIGTERM (health NOT_SERVING, listener open) before its graceful
	// stop, as apps that sleep in their SIGTERM handler do. Zero means the
	// graceful stop begins at once.
	DrainDelay time.Duration
	// ServiceTime is how long each call (gRPC GetPrice, HTTP request,
	// WebSocket message) takes to serve, as an application's own work;
	// zero answers at once. It lets calls overlap, which is what makes an
	// HTTP/1.1 keep-alive pool open several connections.
	ServiceTime time.Duration
	// FailPercent is the share of GetPrice calls, 0 to 100, that the pod
	// fails with INTERNAL after its service time, each call drawn
	// independently from a source seeded by the pod's name, as a pod with
	// a broken dependency behind some of its calls.
	FailPercent int
	// ORCA makes the pod report its load (gRFC A51): in every GetPrice
	// answer's trailer and, to clients that ask, out of band (grpc-go's
	// orca service). It reports the calls it answered per second and its
	// application utilization: the time its calls spent serving per
	// second of the last one, which a slower pod's is higher.
	ORCA bool
	// NoChannelz leaves grpc.channelz.v1 out of the server, as most
	// production servers are built: diagnose must then read the pod's
	// connections another way (pinlab-agent).
	NoChannelz bool
	// Metrics is the family of the metrics served on MetricsPort: one of
	// MetricsFamilies (package pod says what each exports); empty means
	// the first.
	Metrics string
}

// MetricsFamilies are the metrics a pod can export (--metrics): the
// grpc-ecosystem go-grpc-middleware provider's (the default), or grpc-go's
// OpenTelemetry plugin's through the OpenTelemetry Prometheus exporter.
var MetricsFamilies = []string{"go-grpc", "otel"}

// ParseArgs parses container args such as
// ["pod", "pricing", "--max-connection-age=10s"], with GNU-style flags
// (spf13/pflag: --flag=v or --flag v, flags before or after the workload
// name). Errors start with "pod: " and name the bad argument: --port must
// be 0 to 65535, --http-port and --metrics-port, when given, 1 to 65535
// and different from --port and from each other; the connection ages must
// pass CheckConnectionAge; the delays must not be negative,
// --service-time must be at most 10s and --fail-percent 0 to 100.
func ParseArgs(args []string) (Args, error) {
	if len(args) == 0 || args[0] != "pod" {
		return Args{}, errors.New(`pod: args must start with "pod", e.g. [pod, pricing]`)
	}
	fs := pflag.NewFlagSet("pod", pflag.ContinueOnError)
	fs.SetOutput(discard{})
	var a Args
	fs.IntVar(&a.Port, "port", 0, "TCP port to listen on")
	fs.IntVar(&a.HTTPPort, "http-port", 0, "TCP port of the HTTP/1.1 and WebSocket server")
	fs.IntVar(&a.MetricsPort, "metrics-port", 0, "TCP port of the Prometheus metrics server")
	fs.DurationVar(&a.MaxConnectionAge, "max-connection-age", 0, "grpc-go MaxConnectionAge")
	fs.DurationVar(&a.MaxConnectionAgeGrace, "max-connection-age-grace", 0, "grpc-go MaxConnectionAgeGrace")
	fs.DurationVar(&a.StartupDelay, "startup-delay", 0, "time before the server listens")
	fs.DurationVar(&a.DrainDelay, "drain-delay", 0, "time serving after SIGTERM before the graceful stop")
	fs.DurationVar(&a.ServiceTime, "service-time", 0, "time each call takes to serve")
	fs.IntVar(&a.FailPercent, "fail-percent", 0, "share of calls, 0-100, the pod fails with INTERNAL")
	fs.BoolVar(&a.ORCA, "orca", false, "report load (ORCA) per call and out of band")
	fs.BoolVar(&a.NoChannelz, "no-channelz", false, "serve no grpc.channelz.v1")
	fs.StringVar(&a.Metrics, "metrics", "", "the metrics' family: go-grpc (the default) or otel")
	if err := fs.Parse(args[1:]); err != nil {
		return Args{}, fmt.Errorf("pod: %w", FlagError(err))
	}
	rest := fs.Args()
	if len(rest) != 1 {
		return Args{}, fmt.Errorf("pod: want exactly one workload name after \"pod\" (one of %v), got %q", Names, rest)
	}
	a.Workload = rest[0]
	if a.Workload != "pricing" {
		return Args{}, fmt.Errorf("pod: unknown workload %q, want one of %v", a.Workload, Names)
	}
	if a.Port < 0 || a.Port > 65535 {
		return Args{}, fmt.Errorf("pod: --port %d is not a TCP port (1-65535)", a.Port)
	}
	if fs.Changed("http-port") && (a.HTTPPort < 1 || a.HTTPPort > 65535) {
		return Args{}, fmt.Errorf("pod: --http-port %d is not a TCP port (1-65535)", a.HTTPPort)
	}
	if fs.Changed("metrics-port") && (a.MetricsPort < 1 || a.MetricsPort > 65535) {
		return Args{}, fmt.Errorf("pod: --metrics-port %d is not a TCP port (1-65535)", a.MetricsPort)
	}
	if a.MetricsPort != 0 && (a.MetricsPort == a.Port || a.MetricsPort == a.HTTPPort) {
		return Args{}, fmt.Errorf("pod: --metrics-port %d is also the gRPC --port or the --http-port; the servers need different ports", a.MetricsPort)
	}
	if a.Metrics != "" && !slices.Contains(MetricsFamilies, a.Metrics) {
		return Args{}, fmt.Errorf("pod: --metrics %q: want one of %v", a.Metrics, MetricsFamilies)
	}
	if a.HTTPPort != 0 && a.HTTPPort == a.Port {
		return Args{}, fmt.Errorf("pod: --http-port %d is also the gRPC --port; the two servers need different ports", a.HTTPPort)
	}
	if err := CheckConnectionAge(a.MaxConnectionAge, a.MaxConnectionAgeGrace); err != nil {
		return Args{}, fmt.Errorf("pod: %w", err)
	}
	if a.StartupDelay < 0 || a.DrainDelay < 0 || a.ServiceTime < 0 {
		return Args{}, errors.New("pod: --startup-delay, --drain-delay and --service-time must not be negative")
	}
	if a.ServiceTime > 10*time.Second {
		return Args{}, fmt.Errorf("pod: --service-time %v: expected at most 10s", a.ServiceTime)
	}
	if a.FailPercent < 0 || a.FailPercent > 100 {
		return Args{}, fmt.Errorf("pod: --fail-percent %d: expected 0 to 100", a.FailPercent)
	}
	return a, nil
}

// Bounds of a MaxConnectionAge other than zero (never).
const (
	// MinConnectionAge is the least age grpc-go v1.85 can take: it draws
	// the +/-10% jitter with rand.Int64N(2*(age/10)), which panics
	// ("invalid argument to Int64N") unless age/10 is at least 1ns
	// (internal/transport/http2_server.go, getJitter).
	MinConnectionAge = 10 * time.Nanosecond
	// MaxConnectionAgeLimit is the largest age taken: 1000 days, what
	// grpc-java treats as infinite (AS_LARGE_AS_INFINITE in
	// NettyServerBuilder). Far above it, from about 2,329,000h, grpc-go's
	// age plus jitter overflows and every connection gets its GOAWAY at
	// once.
	MaxConnectionAgeLimit = 1000 * 24 * time.Hour
)

// CheckConnectionAge reports a MaxConnectionAge or MaxConnectionAgeGrace
// that grpc-go cannot take: negative values, and an age other than zero
// outside MinConnectionAge to MaxConnectionAgeLimit. The grace has no
// floor: grpc-go only arms a timer with it. The error has no prefix; the
// caller says whose ages they are.
func CheckConnectionAge(age, grace time.Duration) error {
	switch {
	case age < 0 || grace < 0:
		return errors.New("connection ages must not be negative")
	case age > 0 && age < MinConnectionAge:
		return fmt.Errorf("max connection age %v: expected 0 (never) or at least %v; grpc-go draws a +/-10%% jitter from age/10 and panics below %v", age, MinConnectionAge, MinConnectionAge)
	case age > MaxConnectionAgeLimit:
		return fmt.Errorf("max connection age %v: expected at most %v (1000 days, what grpc-java takes as infinite); use 0 for never", age, MaxConnectionAgeLimit)
	}
	return nil
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// FlagError rewrites pflag's error for a flag's bad value ("invalid
// argument "maybe" for "--orca" flag: strconv.ParseBool: parsing "maybe":
// invalid syntax") as what the flag wants: `--orca "maybe": want true or
// false`. Other errors are returned as they are.
func FlagError(err error) error {
	var ive *pflag.InvalidValueError
	if !errors.As(err, &ive) {
		return err
	}
	f := ive.GetFlag()
	want := "a " + f.Value.Type()
	switch f.Value.Type() {
	case "bool":
		want = "true or false"
	case "duration":
		want = "a duration such as 500ms, 2s or 1m30s"
	case "int", "int32", "int64", "uint", "uint32", "uint64":
		want = "a whole number"
	case "float64", "float32":
		want = "a number"
	}
	return fmt.Errorf("--%s %q: want %s", f.Name, ive.GetValue(), want)
}
