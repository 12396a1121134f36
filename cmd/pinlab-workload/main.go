// Command pinlab-workload is the process of the pinlab container image
// (`pinlab image build`): the workload side of pinlab, which a real
// cluster's pods run. The image holds it as /pinlab, its entrypoint, so a
// pod spec written for the lab (image pinlab, args [pod, pricing, ...])
// runs unchanged on a cluster once its image names the built one.
//
// Usage:
//
//	pinlab pod <workload> [--port N] [--http-port N] [--metrics-port N]
//	    [--max-connection-age D] [--max-connection-age-grace D]
//	    [--startup-delay D] [--drain-delay D] [--service-time D]
//	    [--no-channelz] [--metrics FAMILY]
//	pinlab load --target TARGET --rate R --duration D [--name N]
//	    [--policy pick_first|round_robin] [--timeout D]
//	    [--resolver grpc|kubernetes] [--health-check] [--wait-for-ready]
//	    [--stream [--stream-length D]] [--min-resolution-interval D]
//	    [--retry-max-attempts N [--retry-initial-backoff D]
//	    [--retry-max-backoff D] [--retry-backoff-multiplier F]
//	    [--retry-codes 14,...]] [--events-port N]
//	pinlab xds serve [--listen ADDR] [--advertise ADDR] [--namespace NS]
//	    [--bootstrap FILE]
//
// The pod command is the lab's pod (package workload reads the args, as
// the lab's kubelet does; package pod serves): a grpc-go server of the
// pricing workload with gRPC health and channelz, and the HTTP/1.1 and
// metrics servers when their ports are given. Ports are the flags' or
// workload.DefaultPort for gRPC; the process does not see its pod spec,
// so a containerPort named "http" or "metrics" starts no server without
// its flag. The servers listen on every address of the pod's network
// namespace, or on $PINLAB_LISTEN_IP alone when it is set. $POD_NAME and
// $POD_NAMESPACE (the downward API's metadata.name and
// metadata.namespace) name the pod in replies; without them the host name
// (a pod's name) and "default".
//
// The load command (package loadpod, which the lab's kubelet runs too) is
// a load client of package load in a cluster's pod
// (load.Config.InCluster): an open-loop grpc-go channel calling GetPrice
// at --rate for --duration (at most 24 h), resolving the target as any
// client in the pod would (the "kubernetes" resolver with the pod's
// service account). It serves what it observes (every call, connection
// and schedule lag, package loadfeed) on --events-port (9480; 0: off) to
// holders of $PINLAB_TOKEN, from the start until it is stopped: after the
// load it waits, serving, so the last events can be read. It prints a
// line when it starts and one with its calls by pod when the load ends.
//
// With $PINLAB_ADMIN_PORT (and $PINLAB_TOKEN), the pod also serves
// pod.AdminHandler there: readiness (pod.ReadinessService), health, a hang
// and SIGKILL, for the runner of a real cluster, through port-forward.
//
// SIGTERM or SIGINT stops the pod as the kubelet's SIGTERM stops a lab
// pod: health NOT_SERVING, the --drain-delay, then a graceful stop that
// lasts until the calls in flight end or the container runtime's SIGKILL.
// It exits 0 once drained, 1 when the servers could not start or ended
// on their own, 2 on bad args. The load command exits 0 when stopped
// (early or after the load), 1 when it could not start, 2 on bad args.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"syscall"

	"github.com/pinlab/pinlab/internal/loadpod"
	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/workload"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	os.Exit(run(os.Args[1:], os.Getenv, sig, os.Stdout, os.Stderr))
}

// usage is the synopsis printed with a usage error.
const usage = `usage: pinlab pod <workload> [flags]
       pinlab load --target TARGET --rate R --duration D [flags]
       pinlab xds serve [flags]
(docs/image.md lists the flags)`

// run runs the command args names, with getenv's environment, until it
// ends or a signal arrives on sig, and returns the exit code.
func run(args []string, getenv func(string) string, sig <-chan os.Signal, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == loadpod.Command {
		return runLoad(args, getenv, sig, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "xds" {
		return runXDS(args, sig, stdout, stderr)
	}
	if len(args) == 0 || args[0] != "pod" {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	if slices.Contains(args, "--help") || slices.Contains(args, "-h") {
		fmt.Fprintln(stdout, usage)
		return 0
	}
	cfg, err := podConfig(args, getenv)
	if err != nil {
		fmt.Fprintf(stderr, "pinlab %v\n%s\n", err, usage)
		return 2
	}
	admin, err := adminAddr(getenv)
	if err != nil {
		fmt.Fprintf(stderr, "pinlab %v\n%s\n", err, usage)
		return 2
	}
	return runPod(cfg, admin, getenv(pod.TokenEnv), sig, stdout, stderr)
}

// adminAddr is where the pod's admin endpoint listens: "" without
// $PINLAB_ADMIN_PORT, which needs $PINLAB_TOKEN (pod.AdminPort).
func adminAddr(getenv func(string) string) (string, error) {
	port, err := pod.AdminPort(getenv(pod.AdminPortEnv), getenv(pod.TokenEnv))
	if err != nil || port == 0 {
		if err != nil {
			err = fmt.Errorf("pod: %w", err)
		}
		return "", err
	}
	ip, err := listenIP(getenv)
	if err != nil {
		return "", fmt.Errorf("pod: %w", err)
	}
	return net.JoinHostPort(ip, strconv.Itoa(port)), nil
}

// listenIP returns $PINLAB_LISTEN_IP, "" when unset (every address),
// refusing one that is not an IP address.
func listenIP(getenv func(string) string) (string, error) {
	s := getenv("PINLAB_LISTEN_IP")
	if s == "" {
		return "", nil
	}
	if _, err := netip.ParseAddr(s); err != nil {
		return "", fmt.Errorf("$PINLAB_LISTEN_IP %q is not an IP address", s)
	}
	return s, nil
}

// killSelf is SIGKILL to this process, the admin endpoint's /kill. As a
// container's entrypoint the process is PID 1 of its PID namespace, which
// the kernel does not let signal itself to death: it then exits at once
// with 137, the code a SIGKILL gives, without running anything more.
func killSelf() {
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	os.Exit(137)
}

// podConfig reads the pod command line and environment into the config
// of the pod's process.
func podConfig(args []string, getenv func(string) string) (pod.ProcessConfig, error) {
	a, err := workload.ParseArgs(args)
	if err != nil {
		return pod.ProcessConfig{}, err
	}
	ip := netip.IPv4Unspecified()
	if s, err := listenIP(getenv); err != nil {
		return pod.ProcessConfig{}, fmt.Errorf("pod: %w", err)
	} else if s != "" {
		ip = netip.MustParseAddr(s)
	}
	host, _ := os.Hostname()
	name := cmp.Or(getenv("POD_NAME"), host, "pinlab")
	namespace := cmp.Or(getenv("POD_NAMESPACE"), "default")
	w := workload.Container{Args: a, Port: cmp.Or(a.Port, workload.DefaultPort), HTTPPort: a.HTTPPort, MetricsPort: a.MetricsPort}
	cfg := pod.ProcessConfigFor(w, namespace, name, ip)
	cfg.GRPC.Netns = pod.ContainerNetns{}
	if cfg.Web != nil {
		cfg.Web.Netns = pod.ContainerNetns{}
	}
	return cfg, nil
}

// kill is what the admin endpoint's /kill does; tests replace it.
var kill = killSelf

// runPod serves until the process ends on its own or a signal asks it
// to stop, and returns the exit code.
func runPod(cfg pod.ProcessConfig, admin, token string, sig <-chan os.Signal, stdout, stderr io.Writer) int {
	p := pod.NewProcess(cfg)
	key := cfg.GRPC.Namespace + "/" + cfg.GRPC.Name
	if err := p.Start(context.Background()); err != nil {
		fmt.Fprintf(stderr, "pinlab pod %s: cannot start: %v\n", key, err)
		return 1
	}
	if admin != "" {
		stop, err := serveHTTP(admin, pod.AdminHandler(p, token, func() { kill() }))
		if err != nil {
			p.Kill()
			fmt.Fprintf(stderr, "pinlab pod %s: admin endpoint: %v\n", key, err)
			return 1
		}
		defer stop()
		fmt.Fprintf(stdout, "pinlab pod %s: admin endpoint on %s\n", key, admin)
	}
	fmt.Fprintf(stdout, "pinlab pod %s: serving gRPC (health%s) on %s%s%s\n", key, channelzText(cfg), cfg.GRPC.Addr, portText("HTTP", cfg.Web != nil, webPort(cfg)), portText("metrics", cfg.GRPC.MetricsAddr.IsValid(), cfg.GRPC.MetricsAddr.Port()))
	select {
	case <-p.Done():
		err := p.Err()
		fmt.Fprintf(stderr, "pinlab pod %s: ended: %v\n", key, cmp.Or(err, errors.New("the server stopped")))
		return 1
	case s := <-sig:
		fmt.Fprintf(stdout, "pinlab pod %s: %v: draining\n", key, s)
	}
	if err := p.Stop(context.Background()); err != nil {
		fmt.Fprintf(stderr, "pinlab pod %s: stop: %v\n", key, err)
		return 1
	}
	fmt.Fprintf(stdout, "pinlab pod %s: drained\n", key)
	return 0
}

func channelzText(cfg pod.ProcessConfig) string {
	if cfg.GRPC.NoChannelz {
		return ""
	}
	return ", channelz"
}

func webPort(cfg pod.ProcessConfig) uint16 {
	if cfg.Web == nil {
		return 0
	}
	return cfg.Web.Addr.Port()
}

func portText(what string, on bool, port uint16) string {
	if !on {
		return ""
	}
	return fmt.Sprintf(", %s on port %d", what, port)
}
