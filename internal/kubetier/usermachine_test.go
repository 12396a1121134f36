package kubetier

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/pinlab/pinlab/internal/cli"
	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/labtest"
	"github.com/pinlab/pinlab/internal/load"
	"github.com/pinlab/pinlab/internal/netns"
)

// userEnv makes the test binary run as the user's machine (userMain)
// instead of the tests: its value is the JSON of a userJob.
const userEnv = "PINLAB_KUBETIER_USER"

// userJob is what the user's machine runs: pinlab with Args, after
// checking that Pod (a pod's IP:port) cannot be dialled from there.
type userJob struct {
	Args   []string
	Pod    string
	NodeIP string
	Link   string
	Self   string // the user's machine's address on Link
}

// The addresses of the link between the lab's namespace and the user's.
const (
	userLink   = "pinlab-user0" // the lab's end
	userPeer   = "pinlab-user1" // the user's end
	userSelfIP = "10.250.0.2"
)

// TestDiagnoseFromUserMachine: pinlab diagnose run the way a user's laptop
// runs it. Its process is in a network namespace of its own whose only
// way out is a veth into the lab's namespace with one route, to the node's
// address, where the API server listens as a real cluster's does (no
// default route, no route to the pods or Services: a dial to a pod fails
// there). Its kubeconfig names the API server at the node's address; the
// pods, serving no channelz, are reached only through the API server:
// first through exec (--no-agent), then the agents' output through
// pods/log, after the permission check. The verdict is pinned both times,
// as from inside the lab.
func TestDiagnoseFromUserMachine(t *testing.T) {
	ns := "laptop"
	ctx := setUp(t, ns, 2, "--no-channelz")
	_, ips := readyPods(t, ctx, ns)
	source, err := clientIP()
	if err != nil {
		t.Fatal(err)
	}
	stop := startLoad(t, ns, source)
	defer stop()

	node := lab.NodeIP(netns.PodPrefix)
	u, err := url.Parse(cp.URL())
	if err != nil {
		t.Fatal(err)
	}
	userKubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := cp.WriteKubeconfig(userKubeconfig, "https://"+net.JoinHostPort(node.String(), u.Port())); err != nil {
		t.Fatal(err)
	}
	// First through exec (no agent yet), then with the agents.
	job := userJob{
		Args: []string{"diagnose", "pricing", "-n", ns, "--kubeconfig", userKubeconfig, "--window", "3s", "--no-agent"},
		Pod:  net.JoinHostPort(ips[0], "8471"), NodeIP: node.String(), Link: userPeer, Self: userSelfIP,
	}
	code, stdout, stderr := runOnUserMachine(t, ctx, job)
	if code != cli.ExitPinned || !strings.Contains(stdout, "read through exec") || !strings.Contains(stdout, "VERDICT PINNED") {
		t.Errorf("pinlab diagnose --no-agent on the user's machine: exit %d, want %d, pinned from exec's connections\nstdout:\n%s\nstderr:\n%s", code, cli.ExitPinned, stdout, stderr)
	}
	job.Args = []string{"diagnose", "pricing", "-n", ns, "--kubeconfig", userKubeconfig, "--window", "3s",
		"--agent-image", "registry.example/tools/pinlab-agent:test", "--yes"}
	code, stdout, stderr = runOnUserMachine(t, ctx, job)
	t.Logf("the user's machine: exit %d\nstderr:\n%s\nstdout (head):\n%s", code, stderr, head(stdout, 12))
	if code != cli.ExitPinned || !strings.Contains(stdout, "from API server https://"+net.JoinHostPort(node.String(), u.Port())) ||
		!strings.Contains(stdout, "BYTES/S") || !strings.Contains(stdout, "VERDICT PINNED") {
		t.Errorf("pinlab diagnose on the user's machine: exit %d, want %d, pinned through the API server at the node's address\nstdout:\n%s\nstderr:\n%s", code, cli.ExitPinned, stdout, stderr)
	}
	if !strings.Contains(stderr, "user machine: dialling pod "+job.Pod+": ") || !strings.Contains(stderr, "unreachable") {
		t.Errorf("the user's machine could dial a pod, or said nothing of it:\n%s", stderr)
	}
}

// startLoad calls ns's ClusterIP Service pricing from source with one
// pick_first client at 50 calls/s, once its calls arrive, until the
// returned func is called.
func startLoad(t testing.TB, ns string, source netip.Addr) func() error {
	t.Helper()
	calls := &podCalls{}
	c, err := load.New(load.Config{Name: "order-0", Source: source, Policy: "pick_first", Rate: 50, Observer: calls,
		Target: fmt.Sprintf("dns://%s/pricing.%s.svc.cluster.local:8471", theLab.DNSAddr(), ns)})
	if err != nil {
		t.Fatal(err)
	}
	stop := labtest.Run(t, c.Run)
	labtest.WaitFor(t, 30*time.Second, "the client's calls", func() bool { return len(calls.pods()) == 1 })
	return stop
}

// runOnUserMachine runs job in a new network namespace joined to the
// lab's (this process's) by a veth pair: the child sets its end up with
// Self and one route, to NodeIP; this end gets a route back to Self. It
// returns the child's exit code and output, within 2 min; the link goes
// with the child.
func runOnUserMachine(t *testing.T, ctx context.Context, job userJob) (int, string, string) {
	t.Helper()
	return startOnUserMachine(t, ctx, job, 2*time.Minute).wait(t)
}

// userRun is a job running on the user's machine.
type userRun struct {
	cmd            *exec.Cmd
	cancel         context.CancelFunc
	stdout, stderr *lockedBuffer
}

// startOnUserMachine starts job as runOnUserMachine does, killed after
// timeout; wait for it with wait.
func startOnUserMachine(t *testing.T, ctx context.Context, job userJob, timeout time.Duration) *userRun {
	t.Helper()
	spec, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	cmd := exec.CommandContext(cctx, os.Args[0], "-test.run=^$")
	// Not the lab's marker: the user's machine is not inside a lab.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, netns.MarkerEnv+"=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, userEnv+"="+string(spec))
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	r := &userRun{cmd: cmd, cancel: cancel, stdout: &lockedBuffer{}, stderr: &lockedBuffer{}}
	cmd.Stdout, cmd.Stderr = r.stdout, r.stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Skipf("a network namespace for the user's machine: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		cmd.Wait()
		if l, err := netlink.LinkByName(userLink); err == nil {
			netlink.LinkDel(l)
		}
	})
	if err := joinUserMachine(cmd.Process.Pid); err != nil {
		cmd.Process.Kill()
		t.Fatalf("joining the user's machine to the lab: %v", err)
	}
	fmt.Fprintln(in, "go")
	in.Close()
	return r
}

// wait returns the job's exit code and output once it ended.
func (r *userRun) wait(t *testing.T) (int, string, string) {
	t.Helper()
	err := r.cmd.Wait()
	r.cancel()
	code := r.cmd.ProcessState.ExitCode()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("the user's machine: %v\n%s", err, r.stderr.String())
	}
	if l, err := netlink.LinkByName(userLink); err == nil {
		netlink.LinkDel(l)
	}
	return code, r.stdout.String(), r.stderr.String()
}

// lockedBuffer is a bytes.Buffer safe for a writer and a reader at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// joinUserMachine makes the veth pair, moves its peer into the
// namespace of pid and routes the peer's address to this end.
func joinUserMachine(pid int) error {
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: userLink}, PeerName: userPeer}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("adding %s: %w", userLink, err)
	}
	peer, err := netlink.LinkByName(userPeer)
	if err != nil {
		return err
	}
	if err := netlink.LinkSetNsPid(peer, pid); err != nil {
		return fmt.Errorf("moving %s: %w", userPeer, err)
	}
	link, err := netlink.LinkByName(userLink)
	if err != nil {
		return err
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return err
	}
	self := netip.MustParseAddr(userSelfIP)
	return netlink.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Scope: netlink.SCOPE_LINK,
		Dst: &net.IPNet{IP: self.AsSlice(), Mask: net.CIDRMask(32, 32)}})
}

// userMain is the user's machine: it waits for its link, sets it up,
// shows that a pod cannot be dialled, then runs pinlab.
func userMain(spec string) int {
	var job userJob
	if err := json.Unmarshal([]byte(spec), &job); err != nil {
		fmt.Fprintf(os.Stderr, "user machine: %v\n", err)
		return 1
	}
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Fprintf(os.Stderr, "user machine: waiting for the link: %v\n", err)
		return 1
	}
	if err := userLinkUp(job); err != nil {
		fmt.Fprintf(os.Stderr, "user machine: %v\n", err)
		return 1
	}
	if job.Pod != "" {
		conn, err := net.DialTimeout("tcp", job.Pod, 2*time.Second)
		if err == nil {
			conn.Close()
			err = errors.New("connected")
		}
		fmt.Fprintf(os.Stderr, "user machine: dialling pod %s: %v\n", job.Pod, err)
	}
	return cli.Main(job.Args, os.Stdout, os.Stderr)
}

// userLinkUp sets lo and the link up, gives the link Self and routes
// NodeIP, and only it, through the link.
func userLinkUp(job userJob) error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return err
	}
	link, err := netlink.LinkByName(job.Link)
	if err != nil {
		return err
	}
	self, node := netip.MustParseAddr(job.Self), netip.MustParseAddr(job.NodeIP)
	if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: &net.IPNet{IP: self.AsSlice(), Mask: net.CIDRMask(32, 32)}}); err != nil {
		return err
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return err
	}
	return netlink.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Scope: netlink.SCOPE_LINK,
		Dst: &net.IPNet{IP: node.AsSlice(), Mask: net.CIDRMask(32, 32)}})
}

// head is s's first n lines.
func head(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	return strings.Join(lines[:min(n, len(lines))], "")
}
