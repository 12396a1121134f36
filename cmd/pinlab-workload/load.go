package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"

	"github.com/pinlab/pinlab/internal/loadpod"
	"github.com/pinlab/pinlab/internal/pod"
)

// runLoad runs the load command (package loadpod) until it ends or a
// signal arrives on sig, and returns the exit code.
func runLoad(args []string, getenv func(string) string, sig <-chan os.Signal, stdout, stderr io.Writer) int {
	if slices.Contains(args, "--help") || slices.Contains(args, "-h") {
		fmt.Fprintln(stdout, usage)
		return 0
	}
	o, err := loadpod.Parse(args, hostEnv(getenv))
	if err != nil {
		fmt.Fprintf(stderr, "pinlab %v\n%s\n", err, usage)
		return 2
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	go func() {
		select {
		case s := <-sig:
			cancel(errors.New(s.String()))
		case <-ctx.Done():
		}
	}()
	return loadpod.Run(ctx, o, loadpod.Host{Stdout: stdout, Stderr: stderr})
}

// hostEnv is getenv with $HOSTNAME, when unset, the host's name, as a
// container's runtime sets it to the pod's.
func hostEnv(getenv func(string) string) func(string) string {
	return func(k string) string {
		v := getenv(k)
		if k == "HOSTNAME" && v == "" {
			v, _ = os.Hostname()
		}
		return v
	}
}

// serveHTTP serves h on addr, with timeouts and a header limit, until the
// returned stop is called.
func serveHTTP(addr string, h http.Handler) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return pod.ServeEndpoint(ln, h), nil
}
