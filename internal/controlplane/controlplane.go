// Package controlplane starts and stops a real Kubernetes control plane
// as child processes: etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler (the versions build/controlplane/build.sh builds; BinDir
// finds them). Every component listens on 127.0.0.1 only. It runs in the
// caller's network namespace: pinlab calls it inside a private one
// (package netns), where the pod and Service ranges are local.
//
// The flags follow what was measured on v1.37.2 (../shared notes, kept in
// NOTES.md): etcd without fsync, an API server bound to 127.0.0.1 with the
// endpoint reconciler off (it refuses a loopback address for the kubernetes
// Service's endpoints), token authentication with an admin in
// system:masters, RBAC, no ServiceAccount admission (pods run without a
// default ServiceAccount), serving certificates self-generated under
// --cert-dir; leader election off.
package controlplane

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/pinlab/pinlab/internal/loopback"
	"github.com/pinlab/pinlab/internal/pki"
)

// DefaultControllers are the kube-controller-manager controllers Start
// enables when Config.Controllers is nil (1.37 names; older names without
// the -controller suffix are refused).
var DefaultControllers = []string{
	"deployment-controller",
	"replicaset-controller",
	"statefulset-controller",
	"endpointslice-controller",
	"namespace-controller",
	"garbage-collector-controller",
	"node-lifecycle-controller",
}

// Defaults for Config's zero fields.
var (
	DefaultServiceCIDR      = netip.MustParsePrefix("10.96.0.0/16")
	DefaultAdvertiseAddress = netip.MustParseAddr("10.244.255.254")
)

// DefaultReadyTimeout bounds Start's wait for the API server's /readyz
// and the other components' /healthz when Config.ReadyTimeout is zero.
const DefaultReadyTimeout = 60 * time.Second

// WellKnownPorts are the components' usual ports, for a private network
// namespace where nothing else listens.
var WellKnownPorts = Ports{APIServer: 6443, EtcdClient: 2379, EtcdPeer: 2380, ControllerManager: 10257, Scheduler: 10259}

// Ports are the components' TCP ports on 127.0.0.1; a zero field picks a
// free port (bound on 127.0.0.1:0 and released just before the component
// starts).
type Ports struct {
	APIServer, EtcdClient, EtcdPeer, ControllerManager, Scheduler int
}

// Config says how to start the control plane. The zero value works when
// BinDir finds the binaries.
type Config struct {
	// BinDir holds the binaries (see Commands); "" means BinDir().
	BinDir string
	// Dir is the state directory, created 0700 if missing: etcd's data,
	// the API server's certificates, the token file, kubeconfigs and one
	// log file per component (NAME.log). "" means a temporary directory
	// that Close removes; a given Dir is kept.
	Dir string
	// ServiceCIDR is the API server's --service-cluster-ip-range; the
	// zero value means 10.96.0.0/16.
	ServiceCIDR netip.Prefix
	// AdvertiseAddress is the API server's --advertise-address (its
	// address as other members see it; nothing listens there). It must
	// not be a loopback address; the zero value means 10.244.255.254.
	AdvertiseAddress netip.Addr
	// Controllers are kube-controller-manager's --controllers; nil means
	// DefaultControllers.
	Controllers []string
	// Ports are the components' ports; zero fields pick free ones.
	Ports Ports
	// ReadyTimeout bounds the wait for every component to answer healthy;
	// zero means DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// Logger receives a line per component started, stopped or failed;
	// nil discards them.
	Logger *slog.Logger
}

// Timings are how long Start took, from its call.
type Timings struct {
	// APIServerReady is until kube-apiserver's /readyz first answered ok.
	APIServerReady time.Duration
	// Ready is until the controller-manager's and scheduler's /healthz
	// answered ok too (Start's return).
	Ready time.Duration
}

// ControlPlane is a running control plane; Close stops it. Its methods are
// safe for concurrent use.
type ControlPlane struct {
	cfg    Config
	tmpDir bool // Dir was made by Start; Close removes it
	// keepLogs makes Close keep the logs of a temporary Dir (KeepLogs).
	keepLogs bool
	host     string
	token    string
	ca       []byte  // the API server's self-signed serving certificate
	cluster  *pki.CA // signs the kubelet API's certificates (KubeletCA)
	timings  Timings

	mu      sync.Mutex
	procs   []*process // in start order
	closing bool
	failed  error
	done    chan struct{} // closed on the first unexpected exit
	once    sync.Once
}

// The components, in start order.
const (
	etcdName      = "etcd"
	apiserverName = "kube-apiserver"
	kcmName       = "kube-controller-manager"
	schedulerName = "kube-scheduler"
)

// Start starts etcd and kube-apiserver, waits for /readyz, then starts
// kube-controller-manager and kube-scheduler and waits for their /healthz,
// within cfg.ReadyTimeout and ctx. On failure it stops what it started and
// returns an error naming the component, its flags, its ports and its
// log's last lines; a temporary Dir then keeps the components' logs, and
// the error says where (unless ctx ended first). ctx bounds only the
// start; Close stops the components.
func Start(ctx context.Context, cfg Config) (cp *ControlPlane, err error) {
	begin := time.Now()
	cp = &ControlPlane{done: make(chan struct{})}
	if err := cp.configure(cfg); err != nil {
		return nil, err
	}
	parent := ctx // a timeout of its own below is a failure; parent's end is not
	defer func() {
		if err != nil {
			if cp.tmpDir && parent.Err() == nil {
				// A component failed: its log, which err names, is
				// worth reading; the rest (etcd's data, keys, tokens)
				// goes.
				cp.KeepLogs()
				err = fmt.Errorf("%w\n(the components' logs are kept in %s; remove it when done)", err, cp.cfg.Dir)
			}
			_ = cp.Close()
			cp = nil
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, cp.cfg.ReadyTimeout)
	defer cancel()
	if err := cp.writeSecrets(); err != nil {
		return cp, err
	}
	etcd, err := cp.start(etcdName, cp.etcdArgs(), "http://127.0.0.1:"+strconv.Itoa(cp.cfg.Ports.EtcdClient)+" (client), :"+strconv.Itoa(cp.cfg.Ports.EtcdPeer)+" (peer)")
	if err != nil {
		return cp, err
	}
	api, err := cp.start(apiserverName, cp.apiserverArgs(), cp.host)
	if err != nil {
		return cp, err
	}
	if err := cp.waitAPIServer(ctx, api, etcd); err != nil {
		return cp, err
	}
	cp.timings.APIServerReady = time.Since(begin)
	if err := cp.writeComponentKubeconfigs(); err != nil {
		return cp, err
	}
	var others []*process
	for _, name := range []string{kcmName, schedulerName} {
		p, err := cp.start(name, cp.componentArgs(name), cp.componentURL(name))
		if err != nil {
			return cp, err
		}
		others = append(others, p)
	}
	for _, p := range others {
		if err := cp.waitHealthz(ctx, p, cp.componentURL(p.name)+"/healthz"); err != nil {
			return cp, err
		}
	}
	cp.timings.Ready = time.Since(begin)
	cp.logger().Info("control plane ready", "apiserver", cp.host, "readyz", cp.timings.APIServerReady, "ready", cp.timings.Ready, "dir", cp.cfg.Dir)
	return cp, nil
}

// configure fills cfg's defaults, checks it and prepares the state
// directory and ports.
func (cp *ControlPlane) configure(cfg Config) error {
	if cfg.BinDir == "" {
		d, err := BinDir()
		if err != nil {
			return err
		}
		cfg.BinDir = d
	}
	if !cfg.ServiceCIDR.IsValid() {
		cfg.ServiceCIDR = DefaultServiceCIDR
	}
	if !cfg.AdvertiseAddress.IsValid() {
		cfg.AdvertiseAddress = DefaultAdvertiseAddress
	}
	if cfg.AdvertiseAddress.IsLoopback() || cfg.AdvertiseAddress.IsUnspecified() {
		return fmt.Errorf("controlplane: advertise address %s: the API server refuses a loopback or unspecified one; use an address of the namespace's pod range", cfg.AdvertiseAddress)
	}
	if cfg.Controllers == nil {
		cfg.Controllers = DefaultControllers
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = DefaultReadyTimeout
	}
	if cfg.Dir == "" {
		d, err := os.MkdirTemp("", "pinlab-controlplane-")
		if err != nil {
			return fmt.Errorf("controlplane: %w", err)
		}
		cfg.Dir, cp.tmpDir = d, true
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return fmt.Errorf("controlplane: state directory: %w", err)
	}
	if err := os.Chmod(cfg.Dir, 0o700); err != nil {
		return fmt.Errorf("controlplane: state directory: %w", err)
	}
	ports, err := freePorts(cfg.Ports)
	if err != nil {
		return err
	}
	cfg.Ports = ports
	cp.cfg = cfg
	cp.host = "https://127.0.0.1:" + strconv.Itoa(ports.APIServer)
	return nil
}

// freePorts fills p's zero fields with ports free on 127.0.0.1 now.
func freePorts(p Ports) (Ports, error) {
	fields := []*int{&p.APIServer, &p.EtcdClient, &p.EtcdPeer, &p.ControllerManager, &p.Scheduler}
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for _, f := range fields {
		if *f != 0 {
			continue
		}
		l, err := loopback.Listen(context.Background(), "127.0.0.1:0")
		if err != nil {
			return p, fmt.Errorf("controlplane: finding a free port: %w", err)
		}
		held = append(held, l)
		*f = l.Addr().(*net.TCPAddr).Port
	}
	return p, nil
}

// path returns the state directory's file name.
func (cp *ControlPlane) path(name string) string { return filepath.Join(cp.cfg.Dir, name) }

// logger returns cfg.Logger or a discarding one.
func (cp *ControlPlane) logger() *slog.Logger {
	if cp.cfg.Logger != nil {
		return cp.cfg.Logger.With("component", "controlplane")
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// Token users: the admin, the controller-manager, the scheduler and
// kube-proxy, all in system:masters (the controller-manager runs every
// controller under its own identity, --use-service-account-credentials=false).
var tokenUsers = []string{"admin", "system:kube-controller-manager", "system:kube-scheduler", "system:kube-proxy"}

// writeSecrets writes the token file (one random token per user in
// tokenUsers, 0600) and the service-account signing key.
func (cp *ControlPlane) writeSecrets() error {
	var b strings.Builder
	for i, user := range tokenUsers {
		tok, err := randomToken()
		if err != nil {
			return err
		}
		if i == 0 {
			cp.token = tok
		}
		fmt.Fprintf(&b, "%s,%s,%s,system:masters\n", tok, user, user)
	}
	if err := os.WriteFile(cp.path("tokens.csv"), []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("controlplane: token file: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("controlplane: service account key: %w", err)
	}
	// The signing key as SEC1 and its public half as PKIX: the API server's
	// --service-account-key-file does not read a PKCS #8 private key.
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("controlplane: service account key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return fmt.Errorf("controlplane: service account key: %w", err)
	}
	for name, b := range map[string]*pem.Block{"sa.key": {Type: "EC PRIVATE KEY", Bytes: der}, "sa.pub": {Type: "PUBLIC KEY", Bytes: pub}} {
		if err := os.WriteFile(cp.path(name), pem.EncodeToMemory(b), 0o600); err != nil {
			return fmt.Errorf("controlplane: service account key: %w", err)
		}
	}
	return cp.writeKubeletPKI()
}

// kubeletClientUser is the user the API server is to the kubelet API
// (kubeadm's name for its certificate); in system:masters as the lab's
// other users, so the kubelet's SubjectAccessReview allows it.
const kubeletClientUser = "kube-apiserver-kubelet-client"

// writeKubeletPKI makes the cluster CA and the API server's client
// certificate for the kubelet API (0600): the API server verifies the
// kubelet's serving certificate with the CA (--kubelet-certificate-authority)
// and the kubelet accepts the client certificate the CA signed.
func (cp *ControlPlane) writeKubeletPKI() error {
	ca, err := pki.NewCA("pinlab-cluster-ca")
	if err != nil {
		return fmt.Errorf("controlplane: %w", err)
	}
	if err := ca.WriteFiles(cp.cfg.Dir); err != nil {
		return fmt.Errorf("controlplane: %w", err)
	}
	crt, key, err := ca.Issue(pki.Leaf{CommonName: kubeletClientUser, Organization: []string{"system:masters"}})
	if err != nil {
		return fmt.Errorf("controlplane: %w", err)
	}
	for name, b := range map[string][]byte{"kubelet-client.crt": crt, "kubelet-client.key": key} {
		if err := os.WriteFile(cp.path(name), b, 0o600); err != nil {
			return fmt.Errorf("controlplane: kubelet client certificate: %w", err)
		}
	}
	cp.cluster = ca
	return nil
}

// KubeletCA returns the cluster CA: the kubelet API's serving certificate
// must be signed by it (the API server verifies it), and it signed the
// client certificate the API server presents to the kubelet API.
func (cp *ControlPlane) KubeletCA() *pki.CA { return cp.cluster }

// componentToken returns the token of tokenUsers[i] from the token file.
func (cp *ControlPlane) componentToken(user string) (string, error) {
	b, err := os.ReadFile(cp.path("tokens.csv"))
	if err != nil {
		return "", fmt.Errorf("controlplane: token file: %w", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Split(l, ",")
		if len(f) >= 2 && f[1] == user {
			return f[0], nil
		}
	}
	return "", fmt.Errorf("controlplane: no token for %s", user)
}

// randomToken returns 32 random bytes in hex.
func randomToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("controlplane: token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// start starts a component and records it for Close.
func (cp *ControlPlane) start(name string, args []string, listen string) (*process, error) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	p, err := startProcess(cp.cfg.BinDir, name, args, cp.path(name+".log"), listen, cp.exited)
	if err != nil {
		return nil, err
	}
	cp.procs = append(cp.procs, p)
	cp.logger().Info("started", "process", name, "pid", p.cmd.Process.Pid, "listen", listen)
	return p, nil
}

// exited records p's exit when Close did not ask for it.
func (cp *ControlPlane) exited(p *process) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.closing {
		return
	}
	cp.logger().Error("exited", "process", p.name, "err", p.err)
	cp.once.Do(func() {
		cp.failed = p.exitFailure("while running")
		close(cp.done)
	})
}

// Done is closed when a component exits before Close asked it to; Err
// then says which and why.
func (cp *ControlPlane) Done() <-chan struct{} { return cp.done }

// Err returns nil while every component runs, else the first unexpected
// exit with the component's log tail.
func (cp *ControlPlane) Err() error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.failed
}

// Close stops the components in reverse order of start (the scheduler and
// the controller-manager together, then the API server, then etcd): SIGTERM,
// then SIGKILL after 10 s; it returns when all have exited. It removes a
// temporary state directory. It is safe to call more than once.
func (cp *ControlPlane) Close() error {
	cp.mu.Lock()
	cp.closing = true
	procs, keepLogs := cp.procs, cp.keepLogs
	cp.procs = nil
	cp.mu.Unlock()
	var clients, servers []*process
	for _, p := range procs {
		if p.name == kcmName || p.name == schedulerName {
			clients = append(clients, p)
		} else {
			servers = append(servers, p)
		}
	}
	stopAll(clients)
	for i := len(servers) - 1; i >= 0; i-- {
		servers[i].stop()
	}
	for _, p := range procs {
		cp.logger().Info("stopped", "process", p.name, "exit", p.err)
	}
	if cp.tmpDir {
		if err := RemoveState(cp.cfg.Dir, keepLogs); err != nil {
			return fmt.Errorf("controlplane: removing %s: %w", cp.cfg.Dir, err)
		}
	}
	return nil
}

// KeepLogs makes Close leave the components' logs (NAME.log) in a
// temporary state directory and remove the rest (etcd's data, keys,
// tokens, kubeconfigs): for a control plane whose failure the caller
// reports, naming a log. A given Dir is the caller's either way.
func (cp *ControlPlane) KeepLogs() {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.keepLogs = true
}

// RemoveState removes a control plane's state directory, or, with
// keepLogs, everything in it but the components' logs (*.log at any
// depth), directories left empty included (dir too when no log is left).
func RemoveState(dir string, keepLogs bool) error {
	if !keepLogs {
		return os.RemoveAll(dir)
	}
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir():
			dirs = append(dirs, p)
			return nil
		case filepath.Ext(p) == ".log":
			return nil
		}
		return os.Remove(p)
	})
	for i := len(dirs) - 1; i >= 0; i-- { // deepest first; those with logs stay
		os.Remove(dirs[i])
	}
	return err
}

// stopAll stops ps at the same time and waits for all.
func stopAll(ps []*process) {
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(p.stop)
	}
	wg.Wait()
}

// Timings returns how long Start took.
func (cp *ControlPlane) Timings() Timings { return cp.timings }

// Dir returns the state directory.
func (cp *ControlPlane) Dir() string { return cp.cfg.Dir }

// URL returns the API server's URL, https://127.0.0.1:PORT.
func (cp *ControlPlane) URL() string { return cp.host }

// PIDs returns each running component's process id by name.
func (cp *ControlPlane) PIDs() map[string]int {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	pids := make(map[string]int, len(cp.procs))
	for _, p := range cp.procs {
		if !p.exited() {
			pids[p.name] = p.cmd.Process.Pid
		}
	}
	return pids
}

// RSS returns each running component's resident set size in bytes, read
// from /proc/PID/status.
func (cp *ControlPlane) RSS() (map[string]int64, error) {
	out := map[string]int64{}
	for name, pid := range cp.PIDs() {
		n, err := rss(pid)
		if err != nil {
			return nil, err
		}
		out[name] = n
	}
	return out, nil
}

// tlsServerName is a name in the API server's self-signed certificate
// (it lists kubernetes, kubernetes.default, ... and the bind address): a
// client that reaches the API server through another address (a
// forwarder) still verifies it.
const tlsServerName = "kubernetes"

// RESTConfig returns a client configuration for the admin user (in
// system:masters): the API server's URL, its bearer token and the API
// server's self-signed certificate as the CA. The caller may change the
// copy it gets (QPS, Burst, Timeout).
func (cp *ControlPlane) RESTConfig() *rest.Config {
	return &rest.Config{
		Host:            cp.host,
		BearerToken:     cp.token,
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.ca, ServerName: tlsServerName},
		// client-go's default (5 requests/s, bursts of 10) would hold a
		// lab's kubelet back: a scale-out writes each pod's status a few
		// times. This API server serves one lab alone.
		QPS:   500,
		Burst: 1000,
	}
}

// WriteKubeconfig writes a kubeconfig for the admin user to path (mode
// 0600): context, cluster and user named "pinlab", the CA and the token
// inline, tls-server-name set so that any server address verifies. server
// "" means the API server's own URL; give a forwarder's URL
// (https://127.0.0.1:PORT on the host) to reach it from elsewhere.
func (cp *ControlPlane) WriteKubeconfig(path, server string) error {
	if server == "" {
		server = cp.host
	}
	return writeKubeconfig(path, server, "pinlab", cp.token, cp.ca)
}

// writeKubeconfig writes a kubeconfig with one context, named name.
func writeKubeconfig(path, server, name, token string, ca []byte) error {
	c := clientcmdapi.NewConfig()
	c.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca, TLSServerName: tlsServerName}
	c.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	c.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	c.CurrentContext = name
	b, err := clientcmd.Write(*c)
	if err != nil {
		return fmt.Errorf("controlplane: kubeconfig: %w", err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("controlplane: kubeconfig: %w", err)
	}
	// WriteFile keeps an existing file's mode.
	if err := os.Chmod(path, 0o600); err != nil {
		return fmt.Errorf("controlplane: kubeconfig: %w", err)
	}
	return nil
}

// kubeProxyName names kube-proxy's kubeconfig; Start does not run
// kube-proxy (package kubeproxy does, against KubeProxyKubeconfig).
const kubeProxyName = "kube-proxy"

// KubeProxyKubeconfig returns the path of the kubeconfig Start wrote for
// kube-proxy (its own token user, system:kube-proxy, in system:masters;
// the API server's own URL, reachable in this network namespace only).
func (cp *ControlPlane) KubeProxyKubeconfig() string { return cp.path(kubeProxyName + ".kubeconfig") }

// BinDir returns the directory the components' binaries (and kube-proxy's)
// were started from.
func (cp *ControlPlane) BinDir() string { return cp.cfg.BinDir }

// writeComponentKubeconfigs writes the controller-manager's, the
// scheduler's and kube-proxy's kubeconfigs (each its own token user).
func (cp *ControlPlane) writeComponentKubeconfigs() error {
	for name, user := range map[string]string{kcmName: tokenUsers[1], schedulerName: tokenUsers[2], kubeProxyName: tokenUsers[3]} {
		tok, err := cp.componentToken(user)
		if err != nil {
			return err
		}
		if err := writeKubeconfig(cp.path(name+".kubeconfig"), cp.host, name, tok, cp.ca); err != nil {
			return err
		}
	}
	return nil
}
