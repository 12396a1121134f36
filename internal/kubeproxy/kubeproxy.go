// Package kubeproxy runs the real kube-proxy (the binary
// build/controlplane/build.sh builds beside the control plane; see
// controlplane.BinDir) as a child process against an API server, in the
// caller's network namespace: pinlab calls it inside the private one of
// package netns, where the pod and Service ranges are local on lo and
// nothing has a route out.
//
// The flags are the ones verified on v1.37.2 (the shared notes,
// "Verified end to end"): --proxy-mode nftables or iptables,
// --hostname-override the node's name, --cluster-cidr the pod range (a
// connection from any other source is marked for masquerade, which fails
// on lo: clients must connect from pod addresses, as real pods do), the
// conntrack sysctls left alone (--conntrack-max-per-core=0 and the two TCP
// timeouts 0: a network namespace may not own them), and /healthz and
// /metrics on free 127.0.0.1 ports.
//
// Rules reads what kube-proxy programmed back from the kernel (nft list
// table ip kube-proxy, or iptables-save -t nat), as a person checking
// kube-proxy would.
package kubeproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pinlab/pinlab/internal/controlplane"
	"github.com/pinlab/pinlab/internal/loopback"
)

// Mode is kube-proxy's --proxy-mode.
type Mode string

// The modes Start runs.
const (
	ModeNFTables Mode = "nftables"
	ModeIPTables Mode = "iptables"
)

// DefaultReadyTimeout bounds Start's wait when Config.ReadyTimeout is zero.
const DefaultReadyTimeout = 30 * time.Second

// Config says how to run kube-proxy. BinDir, Kubeconfig, NodeName and
// ClusterCIDR are required.
type Config struct {
	// BinDir holds the kube-proxy binary (controlplane.BinDir()).
	BinDir string
	// Kubeconfig is the path of kube-proxy's kubeconfig
	// (controlplane.ControlPlane.KubeProxyKubeconfig).
	Kubeconfig string
	// Mode is --proxy-mode; "" means ModeNFTables.
	Mode Mode
	// NodeName is --hostname-override: the Node whose EndpointSlice
	// topology kube-proxy serves (the lab's kubelet registers it).
	NodeName string
	// ClusterCIDR is --cluster-cidr, the pod range: connections to a
	// ClusterIP from other sources are masqueraded.
	ClusterCIDR netip.Prefix
	// Log is the file kube-proxy's stdout and stderr are appended to; ""
	// means kube-proxy.log in a temporary directory Close removes.
	Log string
	// ReadyTimeout bounds the wait for /healthz and the first sync; zero
	// means DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// Logger receives a line when kube-proxy starts, stops or fails; nil
	// discards them.
	Logger *slog.Logger
}

// KubeProxy is a running kube-proxy; Close stops it.
type KubeProxy struct {
	cfg             Config
	tmpDir          string
	healthz, metric int // ports on 127.0.0.1
	cmd             *exec.Cmd
	args            []string
	done            chan struct{} // closed when the process has exited
	err             error         // cmd.Wait's, set before done closes
}

// Start starts kube-proxy and waits until its /healthz answers 200 and
// its metrics show a completed sync of the rules
// (kubeproxy_sync_proxy_rules_last_timestamp_seconds above zero), within
// cfg.ReadyTimeout and ctx. On failure it stops kube-proxy and returns an
// error naming its command line, ports and log's last lines.
func Start(ctx context.Context, cfg Config) (*KubeProxy, error) {
	k, err := configure(cfg)
	if err != nil {
		return nil, err
	}
	if err := k.start(); err != nil {
		k.removeTmp()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, k.cfg.ReadyTimeout)
	defer cancel()
	if err := k.waitSynced(ctx); err != nil {
		k.Close()
		return nil, err
	}
	k.logger().Info("kube-proxy synced", "mode", k.cfg.Mode, "pid", k.cmd.Process.Pid, "healthz", k.healthz, "metrics", k.metric)
	return k, nil
}

// configure checks cfg, fills its defaults and picks the two ports.
func configure(cfg Config) (*KubeProxy, error) {
	switch {
	case cfg.BinDir == "" || cfg.Kubeconfig == "" || cfg.NodeName == "" || !cfg.ClusterCIDR.IsValid():
		return nil, errors.New("kubeproxy: Config needs BinDir, Kubeconfig, NodeName and ClusterCIDR")
	case cfg.Mode == "":
		cfg.Mode = ModeNFTables
	case cfg.Mode != ModeNFTables && cfg.Mode != ModeIPTables:
		return nil, fmt.Errorf("kubeproxy: mode %q: expected %s or %s", cfg.Mode, ModeNFTables, ModeIPTables)
	}
	if err := Available(cfg.Mode); err != nil {
		return nil, err
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = DefaultReadyTimeout
	}
	k := &KubeProxy{cfg: cfg, done: make(chan struct{})}
	if cfg.Log == "" {
		d, err := os.MkdirTemp("", "pinlab-kube-proxy-")
		if err != nil {
			return nil, fmt.Errorf("kubeproxy: %w", err)
		}
		k.tmpDir, k.cfg.Log = d, filepath.Join(d, "kube-proxy.log")
	}
	ports, err := freePorts(2)
	if err != nil {
		k.removeTmp()
		return nil, err
	}
	k.healthz, k.metric = ports[0], ports[1]
	return k, nil
}

// Tools are the commands each mode needs on PATH (or in /usr/sbin, /sbin),
// besides conntrack for the lab's connection table.
var Tools = map[Mode][]string{
	ModeNFTables: {"nft"},
	ModeIPTables: {"iptables", "iptables-save", "iptables-restore"},
}

// Available reports whether mode's tools are installed; its error names
// the missing ones and the Debian packages that hold them.
func Available(mode Mode) error {
	var missing []string
	for _, t := range Tools[mode] {
		if _, err := LookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("kubeproxy: %s mode needs %s, not found on PATH, /usr/sbin or /sbin (Debian: apt-get install nftables iptables)", mode, strings.Join(missing, ", "))
}

// LookPath finds a command on PATH, else in /usr/sbin or /sbin, which are
// often not on a user's PATH.
func LookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin"} {
		if p := filepath.Join(d, name); isExec(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("kubeproxy: %s not found", name)
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// freePorts returns n ports free on 127.0.0.1 now (bound and released).
func freePorts(n int) ([]int, error) {
	var out []int
	for range n {
		l, err := loopback.Listen(context.Background(), "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("kubeproxy: finding a free port: %w", err)
		}
		defer l.Close()
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// Args returns kube-proxy's flags.
func (k *KubeProxy) Args() []string {
	return []string{
		"--kubeconfig=" + k.cfg.Kubeconfig,
		"--proxy-mode=" + string(k.cfg.Mode),
		"--hostname-override=" + k.cfg.NodeName,
		"--cluster-cidr=" + k.cfg.ClusterCIDR.String(),
		"--conntrack-max-per-core=0",
		"--conntrack-tcp-timeout-established=0",
		"--conntrack-tcp-timeout-close-wait=0",
		"--healthz-bind-address=127.0.0.1:" + strconv.Itoa(k.healthz),
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(k.metric),
		"--profiling=false",
	}
}

// start starts the process, with the tools' directories on its PATH.
func (k *KubeProxy) start() error {
	f, err := os.OpenFile(k.cfg.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("kubeproxy: log: %w", err)
	}
	defer f.Close()
	k.args = k.Args()
	k.cmd = exec.Command(filepath.Join(k.cfg.BinDir, "kube-proxy"), k.args...)
	k.cmd.Stdout, k.cmd.Stderr = f, f
	k.cmd.Env = append(os.Environ(), "PATH="+os.Getenv("PATH")+":/usr/sbin:/sbin")
	// Its own process group (a Ctrl-C reaches pinlab, which stops it), and
	// killed if pinlab dies first.
	k.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := k.cmd.Start(); err != nil {
		return k.failure(fmt.Sprintf("could not start: %v", err))
	}
	k.logger().Info("kube-proxy started", "pid", k.cmd.Process.Pid, "mode", k.cfg.Mode)
	go func() {
		k.err = k.cmd.Wait()
		close(k.done)
	}()
	return nil
}

// pollInterval is how often Start asks kube-proxy whether it has synced.
const pollInterval = 100 * time.Millisecond

// waitSynced polls /healthz and /metrics until both say synced.
func (k *KubeProxy) waitSynced(ctx context.Context) error {
	client := &http.Client{Timeout: 2 * time.Second}
	defer client.CloseIdleConnections()
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	last := "no answer yet"
	for {
		select {
		case <-k.done:
			return k.failure(fmt.Sprintf("exited (%v) before it synced", k.err))
		default:
		}
		ok, said := k.synced(ctx, client)
		if ok {
			return nil
		}
		last = said
		select {
		case <-ctx.Done():
			return k.failure(fmt.Sprintf("did not sync (%v); last: %s", context.Cause(ctx), last))
		case <-k.done:
		case <-t.C:
		}
	}
}

// syncMetric is the gauge kube-proxy sets after each successful sync.
const syncMetric = "kubeproxy_sync_proxy_rules_last_timestamp_seconds"

// synced asks /healthz, then /metrics, and says what is missing.
func (k *KubeProxy) synced(ctx context.Context, c *http.Client) (bool, string) {
	code, body, err := get(ctx, c, "http://127.0.0.1:"+strconv.Itoa(k.healthz)+"/healthz")
	switch {
	case err != nil:
		return false, "/healthz: " + err.Error()
	case code != http.StatusOK:
		return false, fmt.Sprintf("/healthz: %d %s", code, body)
	}
	ts, err := k.LastSync(ctx)
	if err != nil {
		return false, err.Error()
	}
	if ts.IsZero() {
		return false, "/metrics: no sync yet"
	}
	return true, "synced"
}

// LastSync returns when kube-proxy last synced its rules
// (kubeproxy_sync_proxy_rules_last_timestamp_seconds); zero before the
// first sync.
func (k *KubeProxy) LastSync(ctx context.Context) (time.Time, error) {
	c := &http.Client{Timeout: 2 * time.Second}
	defer c.CloseIdleConnections()
	code, body, err := getAll(ctx, c, "http://127.0.0.1:"+strconv.Itoa(k.metric)+"/metrics")
	if err != nil || code != http.StatusOK {
		return time.Time{}, fmt.Errorf("kubeproxy: /metrics: %d %v", code, err)
	}
	return parseLastSync(body)
}

// parseLastSync reads syncMetric from a Prometheus text exposition: the
// earliest of its per-IP-family samples (labelled ip_family="IPv4" and
// "IPv6" in a dual-stack kube-proxy), so that every family has synced;
// zero when a family has not.
func parseLastSync(body string) (time.Time, error) {
	var oldest time.Time
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), syncMetric)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		v := rest[strings.LastIndexByte(rest, ' ')+1:]
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("kubeproxy: %s %q: %w", syncMetric, v, err)
		}
		if f <= 0 {
			return time.Time{}, nil
		}
		if t := time.Unix(0, int64(f*1e9)); oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
	}
	return oldest, nil
}

// get GETs url and returns the status and the body's first 2 KB.
func get(ctx context.Context, c *http.Client, url string) (int, string, error) {
	return fetch(ctx, c, url, 2048)
}

// getAll GETs url and returns the status and up to 8 MB of body.
func getAll(ctx context.Context, c *http.Client, url string) (int, string, error) {
	return fetch(ctx, c, url, 8<<20)
}

func fetch(ctx context.Context, c *http.Client, url string, limit int64) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, limit))
	return resp.StatusCode, strings.TrimSpace(string(b)), nil
}

// Done is closed when kube-proxy has exited; Err then says why.
func (k *KubeProxy) Done() <-chan struct{} { return k.done }

// Err is nil while kube-proxy runs, else its exit with the log's tail.
func (k *KubeProxy) Err() error {
	select {
	case <-k.done:
		return k.failure(fmt.Sprintf("exited (%v)", k.err))
	default:
		return nil
	}
}

// Mode returns the proxy mode kube-proxy runs in.
func (k *KubeProxy) Mode() Mode { return k.cfg.Mode }

// Log returns the path of kube-proxy's log file.
func (k *KubeProxy) Log() string { return k.cfg.Log }

// stopGrace bounds how long Close waits after SIGTERM before SIGKILL.
const stopGrace = 10 * time.Second

// Close stops kube-proxy (SIGTERM, then SIGKILL after 10 s) and waits for
// it; it removes a temporary log directory. kube-proxy leaves its rules in
// the kernel, as it does on a node; they go with the network namespace.
// Safe to call more than once.
func (k *KubeProxy) Close() error {
	if k.cmd != nil && k.cmd.Process != nil {
		select {
		case <-k.done:
		default:
			_ = k.cmd.Process.Signal(syscall.SIGTERM)
			t := time.NewTimer(stopGrace)
			select {
			case <-k.done:
			case <-t.C:
				_ = k.cmd.Process.Kill()
				<-k.done
			}
			t.Stop()
			k.logger().Info("kube-proxy stopped", "exit", k.err)
		}
	}
	k.removeTmp()
	return nil
}

func (k *KubeProxy) removeTmp() {
	if k.tmpDir != "" {
		os.RemoveAll(k.tmpDir)
		k.tmpDir = ""
	}
}

func (k *KubeProxy) logger() *slog.Logger {
	if k.cfg.Logger != nil {
		return k.cfg.Logger.With("component", "kube-proxy")
	}
	return slog.New(slog.DiscardHandler)
}

// logTailLines is how many lines of the log an error quotes.
const logTailLines = 20

// failure returns an error saying what went wrong, with kube-proxy's
// command line, ports and log tail.
func (k *KubeProxy) failure(what string) error {
	return fmt.Errorf("kubeproxy: kube-proxy %s\n  command: %s %s\n  healthz 127.0.0.1:%d, metrics 127.0.0.1:%d\n  log %s, last lines:\n%s",
		what, filepath.Join(k.cfg.BinDir, "kube-proxy"), strings.Join(k.args, " "), k.healthz, k.metric, k.cfg.Log, controlplane.Indent(controlplane.Tail(k.cfg.Log, logTailLines)))
}
