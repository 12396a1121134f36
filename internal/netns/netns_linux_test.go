package netns

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/pinlab/pinlab/internal/loopback"
)

// helperEnv names the helper a re-executed test binary runs instead of
// its tests (see helpers).
const helperEnv = "NETNS_TEST_HELPER"

func TestMain(m *testing.M) {
	if name := os.Getenv(helperEnv); name != "" {
		h, ok := helpers[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "no helper %q\n", name)
			os.Exit(2)
		}
		os.Exit(h())
	}
	goleak.VerifyTestMain(m)
}

// helpers run in a child that Run started (a test binary with helperEnv
// set); each returns its exit code. fd 3, when given, is how a helper
// talks to its test.
var helpers = map[string]func() int{
	"exit7": func() int { return 7 },
	// run calls Run (to run "exit7" in a namespace) and prints its
	// error, or "ok": the test that started it checks what Run said where
	// the kernel refuses namespaces.
	"run": func() int {
		code, err := Run(context.Background(), Config{Env: append(os.Environ(), helperEnv+"=exit7")})
		if err != nil {
			fmt.Println(err)
			if errors.Is(err, ErrUnavailable) {
				fmt.Println("ErrUnavailable")
			}
			return 0
		}
		fmt.Println("ok", code)
		return 0
	},
	// inside checks the namespace, sets it up and serves on a pod
	// address, dialling itself from another pod address.
	"inside": func() int {
		if !Inside() {
			return fail("Inside() = false in the child")
		}
		if err := Setup(PodPrefix, ServicePrefix); err != nil {
			return fail("%v", err)
		}
		ln, err := loopback.Listen(context.Background(), "10.244.0.2:0")
		if err != nil {
			return fail("%v", err)
		}
		defer ln.Close()
		go func() {
			if c, err := ln.Accept(); err == nil {
				fmt.Fprintf(c, "peer %s\n", c.RemoteAddr())
				c.Close()
			}
		}()
		d := loopback.Dialer{Source: netip.MustParseAddr("10.244.0.3"), Timeout: 5 * time.Second}
		c, err := d.DialContext(context.Background(), ln.Addr().String())
		if err != nil {
			return fail("%v", err)
		}
		defer c.Close()
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "peer 10.244.0.3:") {
			return fail("read %q, %v; want the server to see peer 10.244.0.3", line, err)
		}
		if err := loopback.CheckIP(netip.MustParseAddr("10.245.0.1")); err == nil {
			return fail("CheckIP(10.245.0.1) = nil inside, want refusal outside the set-up prefixes")
		}
		return 0
	},
	// accept takes one connection on the listener the parent passed as
	// fd 3 and greets it.
	"accept": func() int {
		ln, err := net.FileListener(os.NewFile(3, "listener"))
		if err != nil {
			return fail("%v", err)
		}
		defer ln.Close()
		c, err := ln.Accept()
		if err != nil {
			return fail("%v", err)
		}
		defer c.Close()
		fmt.Fprintln(c, "hello from the namespace")
		return 0
	},
	// signals says "ready" on fd 3, then exits 40+N on signal N.
	"signals": func() int {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
		ready := os.NewFile(3, "ready")
		fmt.Fprintln(ready, "ready")
		ready.Close()
		select {
		case s := <-sigs:
			return 40 + int(s.(syscall.Signal))
		case <-time.After(30 * time.Second):
			return fail("no signal in 30 s")
		}
	},
	// serve sets up the namespace, serves on 10.244.0.2:8080, says
	// "ready" on fd 3 and runs until fd 4 (a pipe) reaches EOF.
	"serve": func() int {
		if err := Setup(PodPrefix); err != nil {
			return fail("%v", err)
		}
		ln, err := loopback.Listen(context.Background(), "10.244.0.2:8080")
		if err != nil {
			return fail("%v", err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				fmt.Fprintln(c, "served in the namespace")
				c.Close()
			}
		}()
		ready := os.NewFile(3, "ready")
		fmt.Fprintln(ready, "ready")
		ready.Close()
		_, _ = io.Copy(io.Discard, os.NewFile(4, "stop"))
		return 0
	},
	// dial prints what 10.244.0.2:8080 says; Command runs it.
	"dial": func() int {
		if err := sealed(); err != nil {
			return fail("%v", err)
		}
		c, err := net.DialTimeout("tcp", "10.244.0.2:8080", 5*time.Second)
		if err != nil {
			return fail("%v", err)
		}
		defer c.Close()
		_, _ = io.Copy(os.Stdout, c)
		return 0
	},
}

// fail reports a helper's failure on stderr and returns exit code 3.
func fail(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "helper: "+format+"\n", args...)
	return 3
}

// helperConfig runs helper name in the child.
func helperConfig(name string, files ...*os.File) Config {
	return Config{Env: append(os.Environ(), helperEnv+"="+name), ExtraFiles: files}
}

// run calls Run and skips the test when namespaces are unavailable here.
func run(t *testing.T, ctx context.Context, cfg Config) int {
	t.Helper()
	code, err := Run(ctx, cfg)
	if errors.Is(err, ErrUnavailable) && os.Getenv("PINLAB_REQUIRE_NETNS") != "1" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return code
}

func TestRunExitCode(t *testing.T) {
	if got := run(t, context.Background(), helperConfig("exit7")); got != 7 {
		t.Fatalf("Run = %d, want the child's exit code 7", got)
	}
}

func TestRunInsidePrivateNamespace(t *testing.T) {
	if Inside() {
		t.Fatal("Inside() = true in the test process, want false on the host")
	}
	if got := run(t, context.Background(), helperConfig("inside")); got != 0 {
		t.Fatalf("helper inside exited %d, want 0 (its stderr says why)", got)
	}
}

func TestRunPassesHostListener(t *testing.T) {
	ln, err := loopback.Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	codes := make(chan int, 1)
	go func() {
		code, _ := Run(context.Background(), helperConfig("accept", f))
		codes <- code
	}()
	// The parent's listener and the child's copy share one queue: close
	// ours so the connection can only be accepted in the namespace.
	ln.Close()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("reading from the child: %v (exit code %d)", err, <-codes)
	}
	if diff := cmp.Diff("hello from the namespace\n", line); diff != "" {
		t.Errorf("greeting (-want +got):\n%s", diff)
	}
	if code := <-codes; code != 0 {
		t.Errorf("child exited %d", code)
	}
}

func TestRunForwardsSignals(t *testing.T) {
	tests := []struct {
		name   string
		signal func(cancel context.CancelFunc)
		want   int
	}{
		{name: "SIGINT to the parent", signal: func(context.CancelFunc) { _ = syscall.Kill(os.Getpid(), syscall.SIGINT) }, want: 40 + int(syscall.SIGINT)},
		{name: "SIGHUP to the parent", signal: func(context.CancelFunc) { _ = syscall.Kill(os.Getpid(), syscall.SIGHUP) }, want: 40 + int(syscall.SIGHUP)},
		{name: "ctx cancelled", signal: func(cancel context.CancelFunc) { cancel() }, want: 40 + int(syscall.SIGTERM)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			go func() {
				// EOF (no child) ends the wait without a signal.
				if line, _ := bufio.NewReader(r).ReadString('\n'); line == "ready\n" {
					tt.signal(cancel)
				}
			}()
			cfg := helperConfig("signals", w)
			cfg.Started = func(int) { w.Close() }
			if got := run(t, ctx, cfg); got != tt.want {
				t.Fatalf("child exited %d, want %d (it exits 40+signal)", got, tt.want)
			}
		})
	}
}

func TestCommandRunsInNamespace(t *testing.T) {
	readyR, readyW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer readyR.Close()
	stopR, stopW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stopW.Close()
	pids := make(chan int, 1)
	cfg := helperConfig("serve", readyW, stopR)
	cfg.Started = func(pid int) {
		readyW.Close()
		stopR.Close()
		pids <- pid
	}
	codes := make(chan int, 1)
	errs := make(chan error, 1)
	go func() {
		code, err := Run(context.Background(), cfg)
		codes <- code
		errs <- err
	}()
	if line, _ := bufio.NewReader(readyR).ReadString('\n'); line != "ready\n" {
		stopW.Close()
		<-codes
		if err := <-errs; errors.Is(err, ErrUnavailable) {
			t.Skip(err)
		}
		t.Fatalf("the serving child did not get ready (said %q)", line)
	}
	cmd := Command(<-pids, os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"=dial")
	out, err := cmd.CombinedOutput()
	stopW.Close()
	if err != nil {
		t.Fatalf("%v: %v: %s", cmd.Args, err, out)
	}
	if diff := cmp.Diff("served in the namespace\n", string(out)); diff != "" {
		t.Errorf("output of the command run in the namespace (-want +got):\n%s", diff)
	}
	if code := <-codes; code != 0 {
		t.Errorf("serving child exited %d", code)
	}
}

func TestSetupRefusesOnTheHost(t *testing.T) {
	t.Setenv(MarkerEnv, "1")
	if Inside() {
		t.Skip("this machine has no interface but lo")
	}
	err := Setup(PodPrefix)
	if err == nil || !strings.Contains(err.Error(), "refusing to set up") {
		t.Fatalf("Setup on the host = %v, want a refusal before any change", err)
	}
	if err := loopback.CheckIP(netip.MustParseAddr("10.244.0.2")); err == nil {
		t.Fatal("10.244.0.2 allowed on the host after a refused Setup")
	}
}

func TestNsenterArgs(t *testing.T) {
	tests := []struct {
		name     string
		sameUser bool
		want     []string
	}{
		{name: "root", sameUser: true, want: []string{"-t", "42", "-n", "--", "dig", "x"}},
		{name: "unprivileged", want: []string{"-t", "42", "-U", "--preserve-credentials", "-n", "--", "dig", "x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, nsenterArgs(42, tt.sameUser, "dig", []string{"x"})); diff != "" {
				t.Errorf("nsenterArgs (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStartError(t *testing.T) {
	tests := []struct {
		name        string
		err         error
		uid         int
		unavailable bool
		says        string
	}{
		{name: "userns disabled", err: &os.PathError{Op: "fork/exec", Err: syscall.EPERM}, uid: 1000, unavailable: true, says: "or run pinlab as root"},
		{name: "max_user_namespaces 0", err: &os.PathError{Op: "fork/exec", Err: syscall.ENOSPC}, uid: 1000, unavailable: true, says: "user.max_user_namespaces"},
		{name: "root without CAP_SYS_ADMIN", err: &os.PathError{Op: "fork/exec", Err: syscall.EPERM}, uid: 0, unavailable: true, says: "CAP_SYS_ADMIN"},
		{name: "missing executable", err: &os.PathError{Op: "fork/exec", Err: syscall.ENOENT}, uid: 1000, says: "starting the child"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := startError(tt.err, tt.uid)
			if errors.Is(err, ErrUnavailable) != tt.unavailable {
				t.Errorf("startError = %v, want ErrUnavailable %v", err, tt.unavailable)
			}
			if !strings.Contains(err.Error(), tt.says) {
				t.Errorf("startError = %q, want it to say %q", err, tt.says)
			}
		})
	}
}

func TestWithMarker(t *testing.T) {
	got := withMarker([]string{"A=1", MarkerEnv + "=0", "B=2"})
	if diff := cmp.Diff([]string{"A=1", "B=2", MarkerEnv + "=1"}, got); diff != "" {
		t.Errorf("withMarker (-want +got):\n%s", diff)
	}
}

// TestUnavailableForReal: where the kernel refuses a namespace, Run says
// so with ErrUnavailable and what to change, on this kernel rather than
// with a made-up errno (TestStartError): root without CAP_SYS_ADMIN (a
// bounding set without it, as some containers run), and an unprivileged
// user whose user namespaces are capped at 0 (user.max_user_namespaces,
// set to 0 in a user namespace of the test's own, which caps every
// namespace below it and leaves the machine's setting alone). Needs root
// and setpriv (util-linux).
func TestUnavailableForReal(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to drop capabilities and map users")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("no setpriv (util-linux)")
	}
	// The test binary, where user 65534 can run it.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "netns.test")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	uids := []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 65536}}
	tests := []struct {
		name string
		cmd  func(ctx context.Context) *exec.Cmd
		says string
	}{
		{name: "root without CAP_SYS_ADMIN", says: "CAP_SYS_ADMIN", cmd: func(ctx context.Context) *exec.Cmd {
			return exec.CommandContext(ctx, setpriv, "--bounding-set", "-sys_admin", bin)
		}},
		{name: "user namespaces capped at 0", says: "user.max_user_namespaces", cmd: func(ctx context.Context) *exec.Cmd {
			c := exec.CommandContext(ctx, "sh", "-c", `echo 0 > /proc/sys/user/max_user_namespaces && exec "$0" --reuid 65534 --regid 65534 --clear-groups "$1"`, setpriv, bin)
			c.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER, UidMappings: uids, GidMappings: uids, GidMappingsEnableSetgroups: true}
			return c
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c := tt.cmd(ctx)
			c.Env = append(os.Environ(), helperEnv+"=run")
			out, err := c.CombinedOutput()
			if err != nil {
				t.Fatalf("%v: %v\n%s", c.Args, err, out)
			}
			t.Logf("%s", out)
			if !strings.Contains(string(out), "ErrUnavailable") || !strings.Contains(string(out), tt.says) {
				t.Errorf("Run where the kernel refuses: %q; want ErrUnavailable saying %q", out, tt.says)
			}
		})
	}
}
