package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"

	"github.com/pinlab/pinlab/internal/control"
	"github.com/pinlab/pinlab/internal/exit"
	"github.com/pinlab/pinlab/internal/netns"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// NewCmdLabExec returns `pinlab lab exec`.
func NewCmdLabExec(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	o := &CtlOptions{Out: stdout, Err: stderr}
	cmd := &cobra.Command{
		Use:   "exec [--control ADDR] -- CMD [ARGS...]",
		Short: "Run a command inside the network namespace of a lab on a real control plane",
		Long: `Run CMD inside the private network namespace of a running
` + "`pinlab lab up --control-plane kubernetes`" + `, where its pod IPs, ClusterIPs
and cluster DNS are local addresses (outside it they are not reachable, and
pinlab never sends traffic to them). For example:

  pinlab lab exec -- dig @10.96.0.10 kube-dns.kube-system.svc.cluster.local
  pinlab lab exec -- pinlab lab load pricing:50051 -n default
  pinlab lab exec -- pinlab diagnose pricing --lab

The command's exit code is lab exec's; a SIGINT, SIGTERM or SIGHUP sent to
lab exec alone is passed on to it. A lab on the embedded control plane
needs no exec: its addresses are on the host's loopback.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 || cmd.ArgsLenAtDash() != 0 {
				return exit.UsageError(fmt.Errorf("expected -- CMD [ARGS...], e.g. %s lab exec -- dig -b 10.244.254.1 @10.96.0.10 kubernetes.default.svc.cluster.local (-b: a pod address, which the real kube-proxy needs)", selfName()))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return labExec(cmd.Context(), o, stdin, args)
		},
	}
	o.flags(cmd)
	cmd.Flags().MarkHidden("namespace")
	return cmd
}

// labExec asks the lab (through its control API, with its token) which
// process holds its namespace, and runs args there with this process's
// standard streams.
func labExec(ctx context.Context, o *CtlOptions, stdin io.Reader, args []string) error {
	info, err := o.client().Info(ctx)
	if err != nil {
		return err
	}
	if info.NetnsPID == 0 {
		return fmt.Errorf("the lab at %s runs on the host's loopback (no --control-plane kubernetes): run %s directly", o.Control, args[0])
	}
	c := netns.Command(info.NetnsPID, args[0], args[1:]...)
	c.Stdin, c.Stdout, c.Stderr = stdin, o.Out, o.Err
	// A pinlab run there may then use the namespace's ranges (it checks
	// that the namespace has no way out, loopback.Sealed, before it does).
	c.Env = append(os.Environ(), netns.MarkerEnv+"=1")
	// Signals are caught from before the command starts (see below).
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	if err := c.Start(); err != nil {
		return fmt.Errorf("lab exec: %w", err)
	}
	// lab exec waits for the command rather than leave it behind, and
	// passes on each SIGINT, SIGTERM and SIGHUP it gets, but for the ones
	// a terminal sends its whole foreground process group (Ctrl-C, a
	// hang-up), which reached the command already.
	waited := make(chan struct{})
	forwarded := make(chan struct{})
	go func() {
		defer close(forwarded)
		for {
			select {
			case s := <-sigs:
				if s != syscall.SIGTERM && terminalForeground() {
					continue
				}
				c.Process.Signal(s)
			case <-waited:
				return
			}
		}
	}()
	err = c.Wait()
	close(waited)
	<-forwarded
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if code := ee.ExitCode(); code > 0 {
			return exit.Code(code)
		}
		return exit.Interrupted
	}
	if err != nil {
		return fmt.Errorf("lab exec: %w", err)
	}
	return nil
}

// reachable refuses, with the command that works, to run what as a client
// of a lab whose pods are in its own network namespace (lab up
// --control-plane kubernetes) from outside that namespace: their 10.244
// addresses exist only inside it.
// The command it gives is this one as the user typed it (os.Args), run by
// lab exec with c's control address and token file.
func reachable(info control.Info, what string, c *control.Client) error {
	if info.NetnsPID == 0 || netns.Inside() {
		return nil
	}
	self, tokenFile := selfName(), c.TokenFile
	if tokenFile == "" {
		tokenFile, _ = control.TokenPath(c.Addr)
	}
	cmd := shellJoin(append([]string{self}, os.Args[1:]...))
	return fmt.Errorf("%s: this lab runs on a real control plane in its own network namespace, where its pod and Service addresses (%s, %s) are; run it there: %s lab exec%s -- %s", what, info.PodCIDR, info.ServiceCIDR, self, controlFlags(c.Addr, tokenFile), cmd)
}

// shellJoin joins args into a command line a POSIX shell reads back as
// args: words of only safe characters as they are, others single-quoted.
func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		safe := a != ""
		for _, r := range a {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,@+%", r)) {
				safe = false
				break
			}
		}
		if safe {
			out[i] = a
		} else {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}

// terminalForeground reports whether this process is in the foreground
// process group of the terminal on its standard input, where the
// terminal's Ctrl-C and hang-up signals reach every process of the group.
func terminalForeground() bool {
	pgrp, err := unix.IoctlGetInt(int(os.Stdin.Fd()), unix.TIOCGPGRP)
	return err == nil && pgrp == unix.Getpgrp()
}
