package coredns

import (
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
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/miekg/dns"
	"github.com/pinlab/pinlab/internal/clusterdns"
	"github.com/pinlab/pinlab/internal/controlplane"
	"github.com/pinlab/pinlab/internal/loopback"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Defaults of Config's zero fields.
const (
	// DefaultZone is the cluster domain (kubelet's and kubeadm's default).
	DefaultZone = "cluster.local"
	// DefaultTTL is the kubernetes plugin's ttl in kubeadm's Corefile.
	DefaultTTL = 30 * time.Second
	// DefaultReadyTimeout bounds Start's wait for /ready.
	DefaultReadyTimeout = 30 * time.Second
)

// stopGrace bounds how long Close waits after SIGTERM, beyond the
// lameduck, before SIGKILL.
const stopGrace = 10 * time.Second

// pollInterval is how often Start asks /ready.
const pollInterval = 50 * time.Millisecond

// logTailLines is how many lines of CoreDNS's log an error quotes.
const logTailLines = 20

// Config says how to run CoreDNS. REST and Addr are required.
type Config struct {
	// BinDir holds the coredns binary; "" means BinDir().
	BinDir string
	// REST reaches the API server as a user allowed to create RBAC objects
	// and ServiceAccount tokens (the control plane's admin, in
	// system:masters). Start creates kubeadm's ServiceAccount
	// kube-system/coredns, ClusterRole and ClusterRoleBinding
	// system:coredns if missing, and gives CoreDNS a 24-hour token of that
	// ServiceAccount; CoreDNS reaches the API at REST.Host, verifying it
	// with REST's CA and server name.
	REST *rest.Config
	// Addr is where CoreDNS serves DNS, UDP and TCP. The IP must pass
	// loopback.CheckIP (a loopback address, or one in a range allowed
	// inside pinlab's private network namespace); the port must not be
	// zero. There is no default: a lab's DNS address is pinlab's own
	// server's.
	Addr netip.AddrPort
	// Zone is the cluster domain, with or without a trailing dot; ""
	// means DefaultZone.
	Zone string
	// TTL is the kubernetes plugin's ttl, in whole seconds (truncated);
	// zero means DefaultTTL (kubeadm's 30s; the plugin's own default is
	// 5s); negative means 0.
	TTL time.Duration
	// Lameduck is how long health's lameduck keeps CoreDNS serving after
	// SIGTERM, delaying Close by as much; zero means none (kubeadm: 5s).
	Lameduck time.Duration
	// Log adds the log plugin: one line per query in the log file. Off by
	// default, as in kubeadm's Corefile.
	Log bool
	// Pods is the kubernetes plugin's pods option: "insecure", "verified"
	// or "disabled" (clusterdns.PodMode's values mean the same); ""
	// means "insecure", kubeadm's.
	Pods clusterdns.PodMode
	// FixedOrder leaves out the loadbalance plugin, which shuffles the
	// address records of every answer (kubeadm's Corefile has it): the
	// records then come in the kubernetes plugin's order. That order is
	// not clusterdns's FixedOrder (EndpointSlice name, then list order);
	// it is whatever the plugin's index returns, stable while the objects
	// do not change.
	FixedOrder bool
	// Cache is the cache plugin's block, written from clusterdns's model
	// of it: "cache { success CAPACITY TTL MINTTL; denial CAPACITY TTL
	// MINTTL; disable success|denial ZONES; keepttl }", zero fields the
	// plugin's defaults. Nil means kubeadm v1.37.2's "cache 30 { disable
	// success ZONE; disable denial ZONE }". A TTL that is not at least a
	// whole second, or a negative capacity, is an error.
	Cache *clusterdns.CacheConfig
	// NoCache leaves the cache plugin out (Cache is then ignored): every
	// answer reflects the API objects of the moment.
	NoCache bool
	// QueryLog, if not nil, receives one event per answer CoreDNS sends,
	// the same event pinlab's DNS gives its own QueryLog (name, type,
	// rcode, answers as sent, truncation, client, time of the query).
	// Start adds the dnstap plugin ("dnstap unix://Dir/dnstap.sock full")
	// and reads the socket it listens on (the binary must have the plugin:
	// build.sh builds it in). Events come from one goroutine, in the order
	// CoreDNS answered, and up to about a second late (the plugin flushes
	// its buffer every second); SyncQueryLog waits for them. Answers still
	// in CoreDNS's buffer when Close stops it may be lost. Start's own
	// readiness queries and SyncQueryLog's markers are not passed on.
	QueryLog func(clusterdns.QueryEvent)
	// Dir holds the Corefile, the kubeconfig (0600) and coredns.log; it is
	// created 0700 if missing and kept. "" means a temporary directory
	// that Close removes.
	Dir string
	// ReadyTimeout bounds the wait for /ready; zero means
	// DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// Logger receives a line when CoreDNS starts and stops; nil discards.
	Logger *slog.Logger
}

// Server is a running CoreDNS process; Close stops it.
type Server struct {
	cfg     Config
	tmpDir  bool
	ready   string // the /ready URL
	zone    string // the cluster domain, without the trailing dot
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited
	err     error         // cmd.Wait's error, set before done is closed
	closed  chan struct{} // closed by Close before it signals
	tap     *tapReader    // reads the dnstap socket, if Config.QueryLog is set
}

// Start writes the Corefile and kubeconfig (see the package comment),
// starts CoreDNS and returns once its /ready answers 200 (the kubernetes
// plugin has listed the API's objects) and it answers a DNS query, within
// cfg.ReadyTimeout and ctx. On failure it stops CoreDNS and returns an
// error with the command, the Corefile's path and the log's last lines.
// ctx bounds only the start.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	s, cf, err := prepare(cfg)
	if err != nil {
		return nil, err
	}
	if err := s.run(ctx, cf); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// prepare checks cfg, fills its defaults, makes Dir and picks the
// loopback ports.
func prepare(cfg Config) (*Server, corefile, error) {
	if cfg.REST == nil {
		return nil, corefile{}, errors.New("coredns: Config.REST is required")
	}
	switch cfg.Pods {
	case "":
		cfg.Pods = clusterdns.PodsInsecure
	case clusterdns.PodsInsecure, clusterdns.PodsVerified, clusterdns.PodsDisabled:
	default:
		return nil, corefile{}, fmt.Errorf("coredns: pods %q: want insecure, verified or disabled", cfg.Pods)
	}
	if !cfg.Addr.IsValid() || cfg.Addr.Port() == 0 {
		return nil, corefile{}, fmt.Errorf("coredns: Config.Addr %q needs an IP and a port", cfg.Addr)
	}
	if err := loopback.CheckIP(cfg.Addr.Addr()); err != nil {
		return nil, corefile{}, fmt.Errorf("coredns: %w", err)
	}
	if cfg.BinDir == "" {
		d, err := BinDir()
		if err != nil {
			return nil, corefile{}, err
		}
		cfg.BinDir = d
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = DefaultReadyTimeout
	}
	s := &Server{cfg: cfg, done: make(chan struct{}), closed: make(chan struct{})}
	if s.cfg.Dir == "" {
		d, err := os.MkdirTemp("", "pinlab-coredns-")
		if err != nil {
			return nil, corefile{}, fmt.Errorf("coredns: %w", err)
		}
		s.cfg.Dir, s.tmpDir = d, true
	} else if err := os.MkdirAll(s.cfg.Dir, 0o700); err != nil {
		return nil, corefile{}, fmt.Errorf("coredns: %w", err)
	}
	cf, err := s.corefile()
	if err != nil {
		s.removeDir()
		return nil, corefile{}, err
	}
	s.ready, s.zone = "http://"+cf.Ready.String()+"/ready", cf.Zone
	s.logPath = filepath.Join(s.cfg.Dir, "coredns.log")
	return s, cf, nil
}

// corefile returns the Corefile's settings for s.cfg, with free ports on
// 127.0.0.1 for health, ready and prometheus.
func (s *Server) corefile() (corefile, error) {
	ports, err := freePorts(3)
	if err != nil {
		return corefile{}, err
	}
	lo := netip.MustParseAddr("127.0.0.1")
	zone := strings.TrimSuffix(s.cfg.Zone, ".")
	if zone == "" {
		zone = DefaultZone
	}
	ttl := DefaultTTL
	if s.cfg.TTL != 0 {
		ttl = max(s.cfg.TTL, 0)
	}
	cache, err := cacheBlock(s.cfg.Cache, s.cfg.NoCache, zone)
	if err != nil {
		return corefile{}, err
	}
	cf := corefile{
		Addr:   s.cfg.Addr,
		Health: netip.AddrPortFrom(lo, ports[0]), Ready: netip.AddrPortFrom(lo, ports[1]), Metrics: netip.AddrPortFrom(lo, ports[2]),
		Zone: zone, TTL: int(ttl / time.Second), Kubeconfig: filepath.Join(s.cfg.Dir, "kubeconfig"), Log: s.cfg.Log,
		Pods: string(s.cfg.Pods), Cache: cache, FixedOrder: s.cfg.FixedOrder,
	}
	if s.cfg.QueryLog != nil {
		cf.Dnstap = filepath.Join(s.cfg.Dir, "dnstap.sock")
	}
	if s.cfg.Lameduck > 0 {
		cf.Lameduck = s.cfg.Lameduck.String()
	}
	return cf, nil
}

// freePorts returns n distinct free TCP ports on 127.0.0.1, found by
// binding port 0 and releasing it (another process may take one before
// CoreDNS binds it; Start then fails with CoreDNS's log).
func freePorts(n int) ([]uint16, error) {
	var ports []uint16
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("coredns: free port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, uint16(ln.Addr().(*net.TCPAddr).Port))
	}
	return ports, nil
}

// run grants CoreDNS its identity, writes its files, starts it and waits
// for /ready.
func (s *Server) run(ctx context.Context, cf corefile) error {
	client, err := kubernetes.NewForConfig(s.cfg.REST)
	if err != nil {
		return fmt.Errorf("coredns: %w", err)
	}
	token, err := grant(ctx, client)
	if err != nil {
		return err
	}
	if err := writeKubeconfig(cf.Kubeconfig, s.cfg.REST, token); err != nil {
		return err
	}
	conf := filepath.Join(s.cfg.Dir, "Corefile")
	if err := os.WriteFile(conf, []byte(cf.String()), 0o600); err != nil {
		return fmt.Errorf("coredns: Corefile: %w", err)
	}
	if cf.Dnstap != "" {
		if err := s.listenTap(cf.Dnstap); err != nil {
			return err
		}
	}
	if err := s.start(conf); err != nil {
		return err
	}
	s.logger().Info("started", "pid", s.cmd.Process.Pid, "addr", s.cfg.Addr.String(), "dir", s.cfg.Dir)
	return s.waitReady(ctx)
}

// listenTap checks that the binary has the dnstap plugin, then listens on
// path for it.
func (s *Server) listenTap(path string) error {
	if err := CheckDnstap(s.cfg.BinDir); err != nil {
		return err
	}
	os.Remove(path) // a socket left by a CoreDNS run in a kept Dir
	var err error
	s.tap, err = listenTap(path, s.cfg.QueryLog)
	return err
}

// CheckDnstap returns an error, saying how to rebuild, if the coredns
// binary in dir lacks the dnstap plugin that Config.QueryLog needs (a
// build from before build/coredns/main.go imported it). It runs
// "coredns -plugins".
func CheckDnstap(dir string) error {
	out, err := exec.Command(filepath.Join(dir, binary), "-plugins").Output()
	if err != nil {
		return fmt.Errorf("coredns: %s -plugins: %w", filepath.Join(dir, binary), err)
	}
	if !slices.Contains(strings.Fields(string(out)), "dnstap") {
		return fmt.Errorf("coredns: the binary in %s has no dnstap plugin, which the lab's query log needs: run %s again (it builds it in)", dir, BuildCommand)
	}
	return nil
}

// SyncQueryLog returns once every answer CoreDNS had sent before the call
// has reached Config.QueryLog (at once without a QueryLog): it asks CoreDNS
// a marker query and waits for its dnstap message, twice (an answer's
// message is queued just after the answer is written, and can follow the
// first marker's), each up to about a second, CoreDNS's flush interval.
func (s *Server) SyncQueryLog(ctx context.Context) error {
	if s.tap == nil {
		return nil
	}
	return s.tap.sync(ctx, s.cfg.Addr.String())
}

// start starts the process, its output appended to the log file.
func (s *Server) start(conf string) error {
	f, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("coredns: %w", err)
	}
	defer f.Close()
	s.cmd = exec.Command(filepath.Join(s.cfg.BinDir, binary), "-conf", conf)
	s.cmd.Stdout, s.cmd.Stderr = f, f
	s.cmd.SysProcAttr = sysProcAttr()
	if err := s.cmd.Start(); err != nil {
		s.cmd = nil
		return s.failure(fmt.Sprintf("could not start: %v", err))
	}
	go func() {
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	return nil
}

// waitReady polls /ready until it answers 200, CoreDNS exits, or the
// ready timeout or ctx ends.
func (s *Server) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ReadyTimeout)
	defer cancel()
	c := &http.Client{Timeout: time.Second}
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	said := "no answer yet"
	for {
		if code, body, err := get(ctx, c, s.ready); err != nil {
			said = err.Error()
		} else if code != http.StatusOK {
			said = fmt.Sprintf("%d %s", code, body)
		} else if err := s.answers(); err != nil {
			said = "200, but DNS: " + err.Error()
		} else {
			return nil
		}
		select {
		case <-s.done:
			return s.failure(fmt.Sprintf("exited (%v) before it was ready", s.err))
		case <-ctx.Done():
			return s.failure(fmt.Sprintf("not ready (%s said: %s): %v", s.ready, said, context.Cause(ctx)))
		case <-t.C:
		}
	}
}

// answers asks CoreDNS a marker query (see markerZone; it answers
// SERVFAIL) over UDP: /ready answers 200 once the kubernetes plugin has
// synced, a little before CoreDNS binds its DNS port (the plugins'
// startup, which includes the wait for the API, comes first), so a 200
// alone does not mean it serves. The marker keeps the probes out of the
// query log.
func (s *Server) answers() error {
	m := new(dns.Msg)
	m.SetQuestion("ready."+markerZone, dns.TypeTXT)
	c := &dns.Client{Timeout: time.Second}
	_, _, err := c.Exchange(m, s.cfg.Addr.String())
	return err
}

// get GETs url and returns the status and the body's first 2 KB.
func get(ctx context.Context, c *http.Client, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
	return resp.StatusCode, strings.TrimSpace(string(b)), nil
}

// Addr returns where CoreDNS serves DNS (Config.Addr).
func (s *Server) Addr() netip.AddrPort { return s.cfg.Addr }

// Dir returns the directory holding the Corefile, the kubeconfig and the
// log (removed by Close when Start made it).
func (s *Server) Dir() string { return s.cfg.Dir }

// Log returns the path of CoreDNS's log file (in Dir).
func (s *Server) Log() string { return s.logPath }

// LogTail returns the last n lines of CoreDNS's log.
func (s *Server) LogTail(n int) string { return controlplane.Tail(s.logPath, n) }

// PID returns CoreDNS's process id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Done is closed when the process has exited.
func (s *Server) Done() <-chan struct{} { return s.done }

// Err is nil while CoreDNS runs, else its exit with the log's last lines.
func (s *Server) Err() error {
	select {
	case <-s.done:
		return s.failure(fmt.Sprintf("exited (%v)", s.err))
	default:
		return nil
	}
}

// Close stops CoreDNS (SIGTERM; SIGKILL after the lameduck and 10 s more),
// waits for it, then for the dnstap reader to read what CoreDNS sent (at
// most 2 s more) and stop, and removes a temporary Dir. It returns an error, with the
// log's last lines, if CoreDNS had exited by itself before Close. Calling
// Close twice is an error.
func (s *Server) Close() error {
	select {
	case <-s.closed:
		return errors.New("coredns: already closed")
	default:
	}
	close(s.closed)
	defer s.removeDir()
	if s.cmd == nil {
		return s.closeTap()
	}
	select {
	case <-s.done:
		return errors.Join(s.failure(fmt.Sprintf("exited (%v) before Close", s.err)), s.closeTap())
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(s.cfg.Lameduck + stopGrace)
	defer t.Stop()
	select {
	case <-s.done:
	case <-t.C:
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.logger().Info("stopped", "pid", s.cmd.Process.Pid, "exit", fmt.Sprint(s.err))
	return s.closeTap()
}

// tapGrace bounds how long Close waits, once CoreDNS has exited, for the
// dnstap frames it sent to be read.
const tapGrace = 2 * time.Second

// closeTap stops the dnstap reader, if any, and waits for it.
func (s *Server) closeTap() error {
	if s.tap == nil {
		return nil
	}
	return s.tap.close(tapGrace)
}

// removeDir removes Dir if Start made it.
func (s *Server) removeDir() {
	if s.tmpDir {
		os.RemoveAll(s.cfg.Dir)
	}
}

// failure returns an error saying what went wrong, with the command, the
// address and the log's last lines.
func (s *Server) failure(what string) error {
	return fmt.Errorf("coredns: %s\n  command: %s -conf %s\n  serves: %s\n  log %s, last lines:\n%s",
		what, filepath.Join(s.cfg.BinDir, binary), filepath.Join(s.cfg.Dir, "Corefile"), s.cfg.Addr, s.logPath,
		controlplane.Indent(controlplane.Tail(s.logPath, logTailLines)))
}

// logger returns cfg.Logger with a component attribute, or a discarding one.
func (s *Server) logger() *slog.Logger {
	if s.cfg.Logger != nil {
		return s.cfg.Logger.With("component", "coredns")
	}
	return slog.New(slog.DiscardHandler)
}
