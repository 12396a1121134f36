// Command pinlab-agent prints which clients hold TCP connections to the
// serving ports of the network namespace it runs in, and how many bytes
// each has carried. pinlab diagnose starts it as an ephemeral container in
// a server pod, whose network namespace it shares, so that it sees a
// server in any language without channelz, and reads its output through
// the API server's pods/log.
//
// It reads the namespace's TCP sockets through the kernel's sock_diag with
// tcp_info, as `ss -ti` does; with --proc, or when sock_diag is refused,
// from /proc/net/tcp and tcp6, which have no byte counts. It keeps the
// ESTABLISHED sockets whose local port is a --port, or without --port a
// port with a LISTEN socket: the server side of client connections, not
// the pod's own outbound ones.
//
// It prints one JSON line a reading on stdout (internal/agent.Reading),
// the first at once and then one an --interval: about 100 bytes plus about
// 120 a connection, so the kubelet's log rotation (containerLogMaxSize,
// 10 MiB by default) bounds what it leaves on the node.
//
// It needs no privileges: any user, no capabilities, a read-only root
// filesystem (the kernel lists a network namespace's TCP sockets to any
// process in it). It never listens and writes nowhere but stdout (and a
// bad flag's message to stderr).
//
// Usage:
//
//	pinlab-agent [--port N[,N...]]... [--interval 1s] [--count N] [--proc]
//	pinlab-agent --version
//
// It exits 0 on SIGTERM or SIGINT and after --count readings, 1 when
// stdout fails, and 2 on a bad flag.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/pinlab/pinlab/internal/agent"
)

const usage = "usage: pinlab-agent [--port N[,N...]]... [--interval 1s] [--count N] [--proc] [--version]\n"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the command, its exit code returned.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, version, err := agent.ParseArgs(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage)
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "pinlab-agent: %v\n%s", err, usage)
		return 2
	case version:
		fmt.Fprintln(stdout, versionLine())
		return 0
	}
	if err := agent.Run(ctx, stdout, o); err != nil {
		fmt.Fprintf(stderr, "pinlab-agent: %v\n", err)
		return 1
	}
	return 0
}

// versionLine names the build and the output format (agent.Reading.V).
func versionLine() string {
	v := "(unknown)"
	if bi, ok := debug.ReadBuildInfo(); ok {
		v = bi.Main.Version
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				v += " " + s.Value
			}
		}
	}
	return "pinlab-agent " + v + ", output format v1"
}
