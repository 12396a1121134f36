package cli

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/control"
	"github.com/pinlab/pinlab/internal/labtest"
)

// needDig returns dig's path; without dig the test is skipped, unless
// PINLAB_REQUIRE_DIG is set (CI installs dnsutils and sets it).
func needDig(t *testing.T) string {
	path, err := exec.LookPath("dig")
	if err != nil {
		if os.Getenv("PINLAB_REQUIRE_DIG") != "" {
			t.Fatal("dig is required (PINLAB_REQUIRE_DIG is set) but not installed")
		}
		t.Skip("dig not installed (apt-get install -y dnsutils)")
	}
	return path
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// upLab runs `pinlab lab up -f name` until the test ends and returns a
// client of its control API and its DNS address.
func upLab(t *testing.T, name string) (*control.Client, string) {
	u := startLabUp(t, name)
	return u.client, u.dns
}

// labUpRun is a `pinlab lab up` that a test started.
type labUpRun struct {
	opts   *LabUpOptions
	out    *signalBuffer
	client *control.Client // with the lab's token file
	dns    string
	// stop ends lab up and returns its error; the test's cleanup calls it
	// too.
	stop func() error
}

// startLabUp runs `pinlab lab up -f name`, its token in a file of the test,
// and waits until it prints that the lab is up.
func startLabUp(t *testing.T, name string, edit ...func(*LabUpOptions)) *labUpRun {
	t.Helper()
	u := &labUpRun{out: &signalBuffer{on: "stop with Ctrl-C", seen: make(chan struct{})}}
	errb := &labtest.Buffer{}
	u.opts = &LabUpOptions{File: name, Control: freeAddr(t), TokenFile: filepath.Join(t.TempDir(), "token"), LogLevel: "off", Pods: "insecure", Out: u.out, Err: errb}
	for _, e := range edit {
		e(u.opts)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done, exited := make(chan error, 1), make(chan struct{})
	go func() {
		done <- labUp(ctx, u.opts)
		close(exited)
	}()
	u.stop = sync.OnceValue(func() error {
		cancel()
		return <-done
	})
	t.Cleanup(func() {
		if err := u.stop(); err != nil {
			t.Errorf("lab up: %v", err)
		}
	})
	select {
	case <-u.out.seen:
	case <-exited:
		t.Fatalf("lab up stopped: %v\n%s", u.stop(), errb)
	case <-labtest.Context(t, 60*time.Second).Done():
		t.Fatalf("lab up not up after 60s\n%s", errb)
	}
	u.client = &control.Client{Addr: u.opts.Control, TokenFile: u.opts.TokenFile}
	info, err := u.client.Info(context.Background())
	if err != nil {
		t.Fatalf("lab up is up but its API: %v", err)
	}
	u.dns = info.DNS
	return u
}

// signalBuffer is a labtest.Buffer that closes seen once on has been written.
type signalBuffer struct {
	labtest.Buffer
	on   string
	seen chan struct{}
	once sync.Once
}

func (s *signalBuffer) Write(p []byte) (int, error) {
	n, err := s.Buffer.Write(p)
	if strings.Contains(s.String(), s.on) {
		s.once.Do(func() { close(s.seen) })
	}
	return n, err
}

// digger runs dig against one DNS server.
type digger struct {
	t          *testing.T
	path, host string
	port       string
}

func newDigger(t *testing.T, dns string) digger {
	host, port, err := net.SplitHostPort(dns)
	if err != nil {
		t.Fatal(err)
	}
	return digger{t: t, path: needDig(t), host: host, port: port}
}

// run returns dig's full output for args.
func (d digger) run(args ...string) string {
	d.t.Helper()
	all := append([]string{"@" + d.host, "-p", d.port, "+time=2", "+tries=1"}, args...)
	out, err := exec.Command(d.path, all...).CombinedOutput()
	if err != nil {
		d.t.Fatalf("dig %v: %v\n%s", all, err, out)
	}
	return string(out)
}

// answers returns the sorted data of dig +short.
func (d digger) answers(args ...string) []string {
	d.t.Helper()
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(d.run(append(args, "+short")...)), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	sort.Strings(out)
	return out
}

// eventually retries cond until it holds or 20s pass.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	var state string
	held := func() (ok bool) {
		ok, state = cond()
		return ok
	}
	if labtest.Poll(labtest.Context(t, 20*time.Second), 100*time.Millisecond, held) != nil {
		t.Fatalf("timed out waiting for %s; last: %s", what, state)
	}
}

var (
	flagsRE  = regexp.MustCompile(`;; flags: ([a-z ]+);`)
	answerRE = regexp.MustCompile(`ANSWER: (\d+),`)
	statusRE = regexp.MustCompile(`status: (\w+),`)
)

func header(t *testing.T, out string) (flags string, answers int, status string) {
	t.Helper()
	f, a, s := flagsRE.FindStringSubmatch(out), answerRE.FindStringSubmatch(out), statusRE.FindStringSubmatch(out)
	if f == nil || a == nil || s == nil {
		t.Fatalf("cannot read dig output:\n%s", out)
	}
	fmt.Sscan(a[1], &answers)
	return f[1], answers, s[1]
}

// TestLabUpDNSWithDig starts `pinlab lab up -f dns-demo` and checks with
// real dig what seed 002 says a headless Service gives a client.
func TestLabUpDNSWithDig(t *testing.T) {
	ctl, dns := upLab(t, "dns-demo")
	d := newDigger(t, dns)
	objs, err := ctl.Objects(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ips := map[string]string{}
	for _, p := range objs.Pods {
		ips[p.Name] = p.Status.PodIP
	}
	all := []string{ips["db-0"], ips["db-1"], ips["db-2"]}
	sort.Strings(all)

	if got := d.answers("db.data.svc.cluster.local", "A"); strings.Join(got, ",") != strings.Join(all, ",") {
		t.Errorf("headless A = %v, want one per ready pod %v", got, all)
	}
	if got := d.answers("db-1.db.data.svc.cluster.local"); len(got) != 1 || got[0] != ips["db-1"] {
		t.Errorf("db-1 per-pod name = %v, want %s", got, ips["db-1"])
	}
	srv := d.run("_pg._tcp.db.data.svc.cluster.local", "SRV")
	for i := range 3 {
		if !strings.Contains(srv, fmt.Sprintf("SRV\t0 33 5432 db-%d.db.data.svc.cluster.local.", i)) {
			t.Errorf("SRV lacks db-%d as target with priority 0, weight 33, port 5432:\n%s", i, srv)
		}
	}
	if _, n, _ := header(t, srv); n != 3 {
		t.Errorf("SRV: %d answers, want 3:\n%s", n, srv)
	}
	for i := range 3 {
		glue := fmt.Sprintf("db-%d.db.data.svc.cluster.local.\t5 IN\tA\t%s", i, ips[fmt.Sprintf("db-%d", i)])
		if !strings.Contains(srv, glue) {
			t.Errorf("SRV reply lacks the glue %q:\n%s", glue, srv)
		}
	}
	if got := d.answers("legacy.data.svc.cluster.local"); strings.Join(got, ",") != "192.0.2.10,192.0.2.11" {
		t.Errorf("selector-less headless = %v, want the hand-written 192.0.2.10, 192.0.2.11", got)
	}
	if got := d.answers("payments.data.svc.cluster.local"); len(got) != 1 || got[0] != "payments.example.com." {
		t.Errorf("ExternalName = %v, want CNAME payments.example.com.", got)
	}
	// Port and protocol labels under an ExternalName name nothing (CoreDNS).
	if _, _, st := header(t, d.run("_pg._tcp.payments.data.svc.cluster.local", "A")); st != "NXDOMAIN" {
		t.Errorf("_pg._tcp under an ExternalName: %s, want NXDOMAIN", st)
	}
	if _, _, st := header(t, d.run("nosuch.data.svc.cluster.local")); st != "NXDOMAIN" {
		t.Errorf("unknown Service: %s, want NXDOMAIN", st)
	}
	// The pod backs three Services: one PTR each, the per-pod name through
	// the governing Service, dashed-IP names through the others.
	dashed := strings.ReplaceAll(ips["db-1"], ".", "-")
	wantPTR := []string{dashed + ".db-peers.data.svc.cluster.local.", dashed + ".db-rw.data.svc.cluster.local.", "db-1.db.data.svc.cluster.local."}
	if got := d.answers("-x", ips["db-1"]); strings.Join(got, ",") != strings.Join(wantPTR, ",") {
		t.Errorf("PTR of db-1's IP = %v, want %v", got, wantPTR)
	}
	podName := strings.ReplaceAll(ips["db-1"], ".", "-") + ".data.pod.cluster.local"
	if got := d.answers(podName); len(got) != 1 || got[0] != ips["db-1"] {
		t.Errorf("pods insecure: %s = %v, want %s", podName, got, ips["db-1"])
	}

	// A pod marked not ready leaves the headless answer but stays in
	// db-peers, which publishes not-ready addresses.
	if err := ctl.SetReady(context.Background(), "data", "db-2", false); err != nil {
		t.Fatal(err)
	}
	eventually(t, "db-2 out of the db answer", func() (bool, string) {
		got := d.answers("db.data.svc.cluster.local")
		return len(got) == 2, fmt.Sprint(got)
	})
	if got := d.answers("db-peers.data.svc.cluster.local"); len(got) != 3 {
		t.Errorf("db-peers (publishNotReadyAddresses) = %v, want all 3 pods", got)
	}

	// A restarted StatefulSet pod keeps its name; its IP changes.
	old := ips["db-0"]
	if err := ctl.DeletePod(context.Background(), "data", "db-0"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "db-0 back under its name at a new IP", func() (bool, string) {
		got := d.answers("db-0.db.data.svc.cluster.local")
		return len(got) == 1 && got[0] != old, fmt.Sprint(got)
	})
}

// TestLabUpBigHeadlessWithDig checks the 300-pod headless Service: the UDP
// answer is truncated with TC, the TCP answer has all 300.
func TestLabUpBigHeadlessWithDig(t *testing.T) {
	_, dns := upLab(t, "big-headless")
	d := newDigger(t, dns)
	name := "catalog.data.svc.cluster.local"
	flags, n, _ := header(t, d.run("+noedns", "+ignore", name))
	if !strings.Contains(flags, "tc") || n != 29 {
		t.Errorf("UDP without EDNS0: flags %q, %d answers; want tc and the 29 A records that fit 512 bytes", flags, n)
	}
	flags, n, _ = header(t, d.run("+bufsize=1232", "+ignore", name))
	if !strings.Contains(flags, "tc") || n != 73 {
		t.Errorf("UDP, EDNS0 1232: flags %q, %d answers; want tc and 73", flags, n)
	}
	flags, n, _ = header(t, d.run("+tcp", name))
	if strings.Contains(flags, "tc") || n != 300 {
		t.Errorf("TCP: flags %q, %d answers; want all 300 without tc", flags, n)
	}
}
