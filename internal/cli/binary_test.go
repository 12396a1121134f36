package cli

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/controlplane"
	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/labtest"
)

// buildPinlab builds the pinlab command into a temporary directory and
// returns its path.
func buildPinlab(t *testing.T) string { return labtest.BuildPinlab(t) }

// requireControlPlane returns the control plane's binaries, after checking
// that the dataplanes given can run here: without them the test skips,
// or fails under PINLAB_REQUIRE_CONTROL_PLANE=1. It skips in -short mode:
// such tests build pinlab and start control planes.
func requireControlPlane(t *testing.T, dataplanes ...lab.Dataplane) string {
	t.Helper()
	bin, err := controlplane.BinDir()
	for _, d := range dataplanes {
		if err == nil {
			err = d.Check()
		}
	}
	if err != nil {
		if os.Getenv("PINLAB_REQUIRE_CONTROL_PLANE") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	if testing.Short() {
		t.Skip("builds pinlab and starts a control plane")
	}
	return bin
}

// upProcess is a `pinlab lab up` the test started: its output lines as
// they come, its stderr, and its exit.
type upProcess struct {
	cmd    *exec.Cmd
	lines  chan string
	exited chan struct{} // closed once err holds Wait's answer
	err    error
	stderr *labtest.Buffer
}

// startLabUpBinary starts pinlab lab up with args; the test's cleanup
// stops it with Ctrl-C (SIGINT), then kills it after a minute.
func startLabUpBinary(t *testing.T, pinlab string, args ...string) *upProcess {
	t.Helper()
	return startLabUpEnv(t, pinlab, nil, args...)
}

// startLabUpEnv is startLabUpBinary with env added to pinlab's environment.
func startLabUpEnv(t *testing.T, pinlab string, env []string, args ...string) *upProcess {
	t.Helper()
	u := &upProcess{cmd: exec.Command(pinlab, append([]string{"lab", "up"}, args...)...), lines: make(chan string, 100), exited: make(chan struct{}), stderr: &labtest.Buffer{}}
	u.cmd.Env = append(os.Environ(), env...)
	stdout, err := u.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	u.cmd.Stderr = u.stderr // written by exec's copying goroutine
	if err := u.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			u.lines <- sc.Text()
		}
		close(u.lines)
		u.err = u.cmd.Wait()
		close(u.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-u.exited:
		default:
			u.cmd.Process.Signal(syscall.SIGINT)
			select {
			case <-u.exited:
			case <-time.After(time.Minute):
				u.cmd.Process.Kill()
			}
		}
	})
	return u
}

// waitUp reads lab up's output until a line has the prefix until (on a
// real control plane, "  export KUBECONFIG="), and returns what it read,
// that line included; then it drains the rest.
func (u *upProcess) waitUp(ctx context.Context, t *testing.T, until string) string {
	t.Helper()
	var out strings.Builder
	for {
		select {
		case l, ok := <-u.lines:
			if !ok {
				<-u.exited
				t.Fatalf("lab up ended before it was up: %v\nstderr:\n%s", u.err, u.stderr.String())
			}
			out.WriteString(l + "\n")
			if strings.HasPrefix(l, until) {
				go func() {
					for range u.lines {
					}
				}()
				return out.String()
			}
		case <-ctx.Done():
			t.Fatalf("lab up not up in time; stderr:\n%s", u.stderr.String())
		}
	}
}

// stop sends Ctrl-C and checks that lab up ends with exit 0 within 90 s
// and leaves no process naming its control plane's state directory.
func (u *upProcess) stop(t *testing.T) {
	t.Helper()
	u.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-u.exited:
		if u.err != nil {
			t.Errorf("lab up after Ctrl-C: %v\nstderr:\n%s", u.err, u.stderr.String())
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("lab up still running 90 s after Ctrl-C")
	}
	state := regexp.MustCompile(`state and logs in (\S+)\)`).FindStringSubmatch(u.stderr.String())
	if state == nil {
		t.Errorf("lab up did not say where its control plane's state is:\n%s", u.stderr.String())
	} else if left := processesWith(state[1]); len(left) > 0 {
		t.Errorf("processes left after lab up stopped: %v", left)
	}
}

// kubectlOn returns a runner of the control plane's kubectl (in bin) with
// kubeconfig, bounded by ctx, that fails t on an error and returns the
// output.
func kubectlOn(ctx context.Context, t *testing.T, bin, kubeconfig string) func(args ...string) string {
	return func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "kubectl"), args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
}

// labExecOn returns a runner of `pinlab lab exec -- ARGS` (the pinlab
// binary, on the lab at ctl with tokenFile), bounded by ctx, returning the
// combined output and the error.
func labExecOn(ctx context.Context, pinlab, ctl, tokenFile string) func(args ...string) (string, error) {
	return func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, pinlab, append([]string{"lab", "exec", "--control", ctl, "--token-file", tokenFile, "--"}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
}

// kubeconfigOf is the kubeconfig path lab up printed (its "export
// KUBECONFIG=" line); it fails t without one.
func kubeconfigOf(t *testing.T, printed string) string {
	t.Helper()
	m := regexp.MustCompile(`export KUBECONFIG=(\S+)`).FindStringSubmatch(printed)
	if m == nil {
		t.Fatalf("lab up printed no KUBECONFIG:\n%s", printed)
	}
	return m[1]
}
