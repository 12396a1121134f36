package pod_test

import (
	"net/netip"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/podtest"
)

// inNetnsEnv makes the test binary run a test as the child of
// TestContainerWildcardHang, in a network namespace of its own.
const inNetnsEnv = "PINLAB_POD_TEST_IN_NETNS"

// TestContainerWildcardHang: a container's server listening on every
// address (0.0.0.0, which Go makes a dual-stack [::] listener) hangs and
// recovers, for IPv4 and IPv6 clients alike. It runs in a network
// namespace of its own (root only), where listening on every address
// reaches nothing beyond it.
func TestContainerWildcardHang(t *testing.T) {
	if os.Getenv(inNetnsEnv) == "" {
		if os.Geteuid() != 0 {
			if os.Getenv("PINLAB_REQUIRE_NETNS") == "1" {
				t.Fatal("needs root for a network namespace")
			}
			t.Skip("needs root for a network namespace")
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestContainerWildcardHang$", "-test.v")
		cmd.Env = append(os.Environ(), inNetnsEnv+"=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("in a network namespace: %v\n%s", err, out)
		}
		return
	}
	loUp(t)
	p := pod.NewProcess(pod.ProcessConfig{GRPC: pod.Config{Name: "pricing-0", Addr: netip.MustParseAddrPort("0.0.0.0:8471"), Netns: pod.ContainerNetns{}}})
	if err := p.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	for _, addr := range []string{"127.0.0.1:8471", "[::1]:8471"} {
		if got := podtest.ConnectInNetns(addr); got != "connected" {
			t.Fatalf("connect to %s before the hang: %s", addr, got)
		}
	}
	if err := p.Hang(t.Context(), true); err != nil {
		t.Fatalf("Hang: %v", err)
	}
	for _, addr := range []string{"127.0.0.1:8471", "[::1]:8471"} {
		if got := podtest.ConnectInNetns(addr); got != "timeout" {
			t.Errorf("connect to %s while hung: %s, want timeout", addr, got)
		}
	}
	if err := p.Hang(t.Context(), false); err != nil {
		t.Fatalf("Hang(false): %v", err)
	}
	if got := podtest.ConnectInNetns("127.0.0.1:8471"); got != "connected" {
		t.Errorf("connect after the hang: %s", got)
	}
}

// loUp brings the namespace's lo up.
func loUp(t *testing.T) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		t.Fatal(err)
	}
	ifr.SetUint16(unix.IFF_UP | unix.IFF_LOOPBACK | unix.IFF_RUNNING)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		t.Fatalf("lo up: %v", err)
	}
}
