// Package remote runs a plan's variants on a real cluster, the one a
// user's kubeconfig names (`pinlab cluster run`): a runner.Backend whose
// Cluster is that cluster's API, seen through one namespace per variant
// that it creates, labels and deletes. The scenario's pinlab pods run the
// pinlab image (Config.Image, built by `pinlab image build`), its load
// clients run as pods too (one StatefulSet per client group, so that each
// pod is one client by name), and what only a node can do to a pod (make
// it unready or unhealthy, hang it, kill it) goes to the pod's own admin
// endpoint. Every call to a pod goes through the API server's
// port-forward, as kubectl port-forward, authenticated with the run's
// token, which a Secret in each namespace holds.
//
// Nothing of the lab runs: no DNS log, no connection log of a dataplane,
// no server-side observers. The tables come from the clients' calls,
// which name the pod that answered.
package remote

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Labels and names of what a run creates. Every object carries RunLabel;
// `pinlab cluster clean` deletes the namespaces that carry it.
const (
	// RunLabel's value is the run's ID (NewRunID).
	RunLabel = "pinlab.dev/run"
	// VariantLabel's value is the variant's name, on its namespace.
	VariantLabel = "pinlab.dev/variant"
	// ClientLabel's value is a client group's name, on its pods.
	ClientLabel = "pinlab.dev/client"
	// TokenSecret is the Secret, in each namespace, whose TokenKey holds
	// the run's token ($PINLAB_TOKEN of every pod).
	TokenSecret = "pinlab-run"
	TokenKey    = "token"
	// AdminPort is where pinlab pods serve their admin endpoint
	// ($PINLAB_ADMIN_PORT); EventsPort where load client pods serve their
	// events. Both are pod ports, reached only through port-forward.
	AdminPort  = 9481
	EventsPort = 9480
)

// Config configures a Backend.
type Config struct {
	// REST reaches the API server (the kubeconfig's context); Clientset
	// is a client of it. Both required.
	REST      *rest.Config
	Clientset kubernetes.Interface
	// Run is the run's ID (NewRunID): the value of RunLabel and a part of
	// every namespace's name. Required.
	Run string
	// Image is the pinlab image the pods run, best pinned by digest
	// ("REPO@sha256:..."). Required.
	Image string
	// Token authenticates the runner to the pods' admin endpoints and
	// event feeds; at least pod.MinTokenLength characters. NewToken makes
	// one. Required.
	Token string
	// Keep leaves each variant's namespace when its run ends, for
	// inspection; `pinlab cluster clean` removes it later.
	Keep bool
	// PullTimeout bounds how long a pod may wait for its image
	// (ErrImagePull, ImagePullBackOff) before the variant fails naming it;
	// 0 is DefaultPullTimeout.
	PullTimeout time.Duration
	// LoadDuration is how long each load client pod calls (its
	// --duration): the variant's setup and the plan's duration, with
	// room. Required.
	LoadDuration time.Duration
	// LeaseRenew is how often the run renews each namespace's Lease
	// (LeaseName); a renewal holds for three of them. 0 is
	// DefaultLeaseRenew.
	LeaseRenew time.Duration
	// Logger receives what the backend does; nil discards it.
	Logger *slog.Logger
}

// DefaultPullTimeout is Config.PullTimeout's default: a real kubelet
// retries a failed pull after 10 s, 20 s, 40 s..., so 45 s have seen
// three attempts, and it ends well before a variant's setup timeout, so
// that the error names the pod.
const DefaultPullTimeout = 45 * time.Second

// NewRunID returns a new run ID: 8 lowercase hex digits, usable in
// namespace names and label values.
func NewRunID() string { return randomHex(4) }

// NewToken returns a new token for Config.Token: 32 hex digits.
func NewToken() string { return randomHex(16) }

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// Namespace is the namespace variant index runs in, for run:
// "pinlab-RUN-INDEX". Names of variants are not used: they need not be
// valid DNS labels.
func Namespace(run string, index int) string {
	return fmt.Sprintf("pinlab-%s-%d", strings.ToLower(run), index)
}

func (c Config) check() error {
	switch {
	case c.REST == nil || c.Clientset == nil:
		return fmt.Errorf("remote: no API server")
	case c.Run == "":
		return fmt.Errorf("remote: no run ID")
	case c.Image == "":
		return fmt.Errorf("remote: no image")
	case c.LoadDuration <= 0:
		return fmt.Errorf("remote: no load duration")
	case len(c.Token) < 16:
		return fmt.Errorf("remote: a token of %d characters; want at least 16", len(c.Token))
	}
	return nil
}

func (c Config) logger() *slog.Logger {
	if c.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return c.Logger
}
