package cli

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/machinetest"
	"golang.org/x/sys/unix"
)

// asPinlab makes this test binary run pinlab's Main when started by
// pinlabProcess, so that tests can send it real signals.
const asPinlab = "PINLAB_CLI_TEST_AS_PINLAB"

func TestMain(m *testing.M) {
	if os.Getenv(asPinlab) == "1" {
		os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	// The CLI's tests start labs: they hold the machine against the other
	// lab-heavy test binaries, the scenario tests above all.
	release := machinetest.Hold()
	code := m.Run()
	release()
	os.Exit(code)
}

// interruptLimit is how long pinlab may take from SIGINT to its exit while
// it reads its input (issue 15: 5-10 s and more, or never).
const interruptLimit = time.Second

// process is pinlab started as a process by startPinlab.
type process struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer
	done   chan error // receives Wait's result
}

func startPinlab(t *testing.T, stdin io.Reader, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(os.Args[0], args...), done: make(chan error, 1)}
	p.cmd.Env = append(os.Environ(), asPinlab+"=1")
	p.cmd.Stdin, p.cmd.Stderr = stdin, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait waits up to limit for the process to exit and returns its exit
// code.
func (p *process) wait(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case err := <-p.done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(limit):
		t.Fatalf("pinlab %q still running after %v; stderr %q", p.cmd.Args[1:], limit, p.stderr.String())
		return 0
	}
}

// interrupt sends SIGINT and checks that pinlab exits 130 within
// interruptLimit, saying it was interrupted.
func (p *process) interrupt(t *testing.T) {
	t.Helper()
	p.signal(t, os.Interrupt)
}

// signal sends sig and expects pinlab to end as interrupted, in time.
func (p *process) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, interruptLimit); code != ExitInterrupted || !strings.Contains(p.stderr.String(), "interrupted") {
		t.Errorf("exit %d, stderr %q; want %d and an interruption", code, p.stderr.String(), ExitInterrupted)
	}
}

// hasOpen reports whether process pid has path open.
func hasOpen(pid int, path string) bool {
	fds, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "fd", "*"))
	for _, fd := range fds {
		if target, err := os.Readlink(fd); err == nil && target == path {
			return true
		}
	}
	return false
}

func mkfifo(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "scenario.yaml")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	return path
}

// openWriter opens the FIFO's write end once pinlab has it open for
// reading.
func openWriter(t *testing.T, path string) *os.File {
	t.Helper()
	var w *os.File
	labtest.WaitFor(t, 10*time.Second, "pinlab to open the FIFO", func() bool {
		var err error
		w, err = os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0) // ENXIO until a reader has it
		return err == nil
	})
	t.Cleanup(func() { w.Close() })
	return w
}

// drained waits until pinlab has read everything written to w, so that
// it is waiting for more.
func drained(t *testing.T, w *os.File) {
	t.Helper()
	labtest.WaitFor(t, 10*time.Second, "pinlab to read what was written", func() bool {
		n, err := unix.IoctlGetInt(int(w.Fd()), unix.TIOCINQ) // FIONREAD
		return err == nil && n == 0
	})
}

// TestInterruptWhileReading: Ctrl-C stops pinlab while it waits for its
// input, whatever the input is, with exit 130 (issue 15: a FIFO blocked
// forever, and SIGINT was ignored).
func TestInterruptWhileReading(t *testing.T) {
	for _, verb := range [][]string{{"lab", "run"}, {"lab", "up", "--control", "127.0.0.1:0", "-f"}} {
		t.Run(verb[1]+" FIFO with no writer", func(t *testing.T) {
			path := mkfifo(t)
			p := startPinlab(t, nil, append(verb, path)...)
			labtest.WaitFor(t, 10*time.Second, "pinlab to open the FIFO", func() bool { return hasOpen(p.cmd.Process.Pid, path) })
			p.interrupt(t)
		})
		t.Run(verb[1]+" FIFO that never ends", func(t *testing.T) {
			path := mkfifo(t)
			p := startPinlab(t, nil, append(verb, path)...)
			w := openWriter(t, path)
			io.WriteString(w, "apiVersion: v1\nkind: Namespace\n")
			drained(t, w)
			p.interrupt(t)
		})
	}
	t.Run("run FIFO with no writer, terminal closed (SIGHUP)", func(t *testing.T) {
		path := mkfifo(t)
		p := startPinlab(t, nil, "lab", "run", path)
		labtest.WaitFor(t, 10*time.Second, "pinlab to open the FIFO", func() bool { return hasOpen(p.cmd.Process.Pid, path) })
		p.signal(t, syscall.SIGHUP)
	})
	t.Run("run standard input that never ends", func(t *testing.T) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		p := startPinlab(t, r, "lab", "run", "-")
		r.Close()
		io.WriteString(w, "apiVersion: v1\nkind: Namespace\n")
		drained(t, w)
		p.interrupt(t)
	})
	t.Run("up standard input that never ends", func(t *testing.T) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		p := startPinlab(t, r, "lab", "up", "--control", "127.0.0.1:0", "-f", "-")
		r.Close()
		io.WriteString(w, "apiVersion: v1\nkind: Namespace\n")
		drained(t, w)
		p.interrupt(t)
	})
}

// TestLabUpFileLimit: lab up refuses, before starting, manifests whose
// pods would use up the process's file descriptors (issue 15's tester:
// with ulimit -n 200, 594 pods failed and lab up said "starting" forever).
// The command runs without CAP_SYS_RESOURCE, with which it would raise
// the limit instead.
func TestLabUpFileLimit(t *testing.T) {
	args := []string{"sh", "-c", `ulimit -n 200 && exec "$0" "$@"`, os.Args[0], "lab", "up", "-f", "big-headless", "--control", "127.0.0.1:0"}
	if os.Geteuid() == 0 {
		setpriv, err := exec.LookPath("setpriv")
		if err != nil {
			t.Skip("as root, the test needs setpriv (util-linux) to drop CAP_SYS_RESOURCE")
		}
		args = append([]string{setpriv, "--bounding-set", "-sys_resource", "--"}, args...)
	}
	p := &process{cmd: exec.Command(args[0], args[1:]...), done: make(chan error, 1)}
	p.cmd.Env = append(os.Environ(), asPinlab+"=1")
	p.cmd.Stderr = &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	if code := p.wait(t, 30*time.Second); code != ExitError || !strings.Contains(p.stderr.String(), "file descriptors before any client connects") {
		t.Errorf("exit %d, stderr %q; want %d and the file descriptor figures", code, p.stderr.String(), ExitError)
	}
}

// TestEndlessInput: a file that never ends is refused once it passes the
// size cap, quickly and without growing (issue 15: /dev/zero ran out of
// memory at 3.7 GB): its peak RSS stays within endlessGrowth of the same
// command refusing a one-line file. Measured under -race: 96-98 MB and
// 136-137 MB on an idle machine; a fixed bound of 300 MB failed in a CI
// run at 310 MB, with another package's tests beside it (the collector
// falls behind on a busy machine), so the bound is wide: it is there to
// catch reading without a cap, which took gigabytes.
func TestEndlessInput(t *testing.T) {
	small := filepath.Join(t.TempDir(), "small.yaml")
	if err := os.WriteFile(small, []byte("kind: Nothing\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const endlessGrowth = 256 << 20
	for _, args := range [][]string{{"lab", "run", "FILE"}, {"lab", "up", "--control", "127.0.0.1:0", "-f", "FILE"}} {
		t.Run(args[1], func(t *testing.T) {
			peak := func(file, want string) int64 {
				a := slices.Clone(args)
				a[len(a)-1] = file
				p := startPinlab(t, nil, a...)
				if code := p.wait(t, 30*time.Second); code != ExitError || !strings.Contains(p.stderr.String(), want) {
					t.Errorf("%s: exit %d, stderr %q; want %d and %q", file, code, p.stderr.String(), ExitError, want)
				}
				return p.cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10
			}
			base := peak(small, small)
			rss := peak("/dev/zero", "file too large: more than 3 MiB")
			t.Logf("peak RSS: %d MB reading /dev/zero, %d MB refusing a one-line file", rss>>20, base>>20)
			if rss > base+endlessGrowth {
				t.Errorf("peak RSS %d MB reading /dev/zero, against %d MB refusing a one-line file (at most %d MB more)", rss>>20, base>>20, endlessGrowth>>20)
			}
		})
	}
}
