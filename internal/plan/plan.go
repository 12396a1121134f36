// Package plan is the contract between the stages of a lab run: a scenario
// file, once loaded and checked (package scenario), becomes a Plan; the
// runner runs a Plan's variants on labs; the verdict stage reads a Plan and
// what was measured; the report renders them. A Plan is fully resolved (every
// reference to a workload, Service, client or step is looked up, every
// default is applied, every overlay and patch is applied per variant) and
// immutable: no stage writes into it, and nothing in it points back at the
// file it came from.
package plan

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pinlab/pinlab/internal/stats"
	"k8s.io/apimachinery/pkg/runtime"
)

// Plan is a scenario, resolved and checked.
type Plan struct {
	// Name is the scenario's metadata.name; Source the file it came from
	// (a path, or "builtin:<name>").
	Name, Source string
	Description  string
	// Duration is how long load runs in each variant.
	Duration time.Duration
	// Windows are the measurement windows, in the file's order; one
	// window "run" over the whole run when the file names none.
	Windows []stats.Window
	// Timeline describes the steps, in order, for reports.
	Timeline []string
	// Variants are run on the same timeline, each in its own lab; one
	// variant "base" when the file names none.
	Variants []Variant
	// MinResolutionInterval is grpc-go's minimum time between DNS
	// resolutions of one channel; process-wide in grpc-go, so shared by
	// every variant.
	MinResolutionInterval time.Duration
	// DNS configures every variant's cluster DNS.
	DNS DNS
	// Sequential runs the variants one after another (spec.sequential).
	Sequential bool
}

// DNS is the cluster DNS configuration.
type DNS struct {
	// TTL of answers (whole seconds); 0 turns caching off. Default 5s, as
	// CoreDNS's kubernetes plugin.
	TTL time.Duration
	// FixedOrder keeps A records in a stable order (no per-answer shuffle).
	FixedOrder bool
	// Pods is the pods mode: "disabled", "insecure" or "verified".
	Pods string
	// Cache is CoreDNS's cache plugin in front of the cluster DNS; nil
	// means none, the kubernetes plugin alone (answers always current).
	Cache *DNSCache
}

// DNSCache is CoreDNS's cache plugin (see clusterdns.CacheConfig): zero
// fields take the plugin's defaults.
type DNSCache struct {
	// Success caches positive answers, Denial NXDOMAIN and NODATA.
	Success, Denial DNSCacheClass
	// KeepTTL serves the stored TTL instead of counting it down.
	KeepTTL bool
}

// DNSCacheClass is the "success" or "denial" line of the plugin, with its
// "disable" line.
type DNSCacheClass struct {
	// Capacity is how many answers are kept; 0 means 10000.
	Capacity int
	// MaxTTL caps how long an answer is kept (whole seconds); 0 means
	// 3600s for success, 1800s for denial.
	MaxTTL time.Duration
	// MinTTL is the least time an answer is kept (whole seconds); 0
	// means 5s, negative none.
	MinTTL time.Duration
	// Disable lists the zones where no answer is kept ("disable success
	// ZONES" or "disable denial ZONES"); nil keeps every zone's.
	Disable []string
}

// String is the cache in Corefile form, such as "cache 30",
// "cache 30 { disable success cluster.local; disable denial cluster.local }"
// or "cache { success 10000 3600 5; denial 10000 30 5; keepttl }".
func (c *DNSCache) String() string {
	if c == nil {
		return "none"
	}
	head, parts := "cache", []string(nil)
	short := c.Success.MaxTTL == c.Denial.MaxTTL && c.Success.Capacity == 0 && c.Denial.Capacity == 0 &&
		c.Success.MinTTL == 0 && c.Denial.MinTTL == 0 && !c.KeepTTL
	if short && c.Success.MaxTTL != 0 {
		head = fmt.Sprintf("cache %d", int(c.Success.MaxTTL/time.Second))
	}
	for _, cl := range []struct {
		name   string
		class  DNSCacheClass
		defMax time.Duration
	}{{"success", c.Success, time.Hour}, {"denial", c.Denial, 30 * time.Minute}} {
		if !short {
			parts = append(parts, cl.class.line(cl.name, cl.defMax))
		}
		if len(cl.class.Disable) > 0 {
			parts = append(parts, "disable "+cl.name+" "+strings.Join(cl.class.Disable, " "))
		}
	}
	if c.KeepTTL {
		parts = append(parts, "keepttl")
	}
	if len(parts) == 0 {
		return head
	}
	return head + " { " + strings.Join(parts, "; ") + " }"
}

// line is the class's "NAME CAPACITY TTL MINTTL", its zero fields the
// plugin's defaults (defMax the class's cap).
func (cl DNSCacheClass) line(name string, defMax time.Duration) string {
	capacity, maxTTL, minTTL := cl.Capacity, cl.MaxTTL, cl.MinTTL
	if capacity == 0 {
		capacity = 10000
	}
	if maxTTL == 0 {
		maxTTL = defMax
	}
	if minTTL == 0 {
		minTTL = 5 * time.Second
	}
	return fmt.Sprintf("%s %d %d %d", name, capacity, int(maxTTL/time.Second), max(int(minTTL/time.Second), 0))
}

// Cluster is a variant's dataplane and kubelet settings.
type Cluster struct {
	// ProxyMode is kube-proxy's mode: iptables, nftables or ipvs.
	ProxyMode string
	// DeadAddress is what a connect to a deleted pod's address gets:
	// "refuse" or "blackhole".
	DeadAddress string
	// RestartBackoff is the kubelet's first crash-loop back-off.
	RestartBackoff time.Duration
}

// Variant is one variant of the scenario, ready to run.
type Variant struct {
	Name, Description string
	// Index is the variant's position in the file (0-based).
	Index int
	// Objects are the Kubernetes objects, after the variant's patches and
	// server overlays. They are shared and must not be changed: use
	// CopyObjects to get objects to create.
	Objects []runtime.Object
	// Groups are the client groups and Clients the clients, in order.
	Groups  []Group
	Clients []Client
	// Steps is the timeline, sorted by offset, resolved for this variant
	// (a configureClient step carries this variant's clients' new
	// settings).
	Steps []Step
	// Servers describes the server overlays ("pricing: MaxConnectionAge
	// 10s, grace 5s"); Patches the object patches ("Deployment
	// shop/pricing (strategic)").
	Servers, Patches string
	Cluster          Cluster
	// Expect lists the expectations that apply to this variant.
	Expect []Expectation
	// PeakPods is the most pods the variant runs at once (every workload
	// at its largest replica count over the timeline); OfferedLoad the
	// calls per second its clients offer together.
	PeakPods    int
	OfferedLoad float64
}

// CopyObjects returns deep copies of the variant's objects.
func (v Variant) CopyObjects() []runtime.Object {
	out := make([]runtime.Object, len(v.Objects))
	for i, o := range v.Objects {
		out[i] = o.DeepCopyObject()
	}
	return out
}

// Group returns the client group called name.
func (v Variant) Group(name string) (Group, bool) {
	i := slices.IndexFunc(v.Groups, func(g Group) bool { return g.Name == name })
	if i < 0 {
		return Group{}, false
	}
	return v.Groups[i], true
}

// Services returns the target Services of the variant's groups, each once,
// in the groups' order.
func (v Variant) Services() []Target {
	var out []Target
	for _, g := range v.Groups {
		if !slices.ContainsFunc(out, func(t Target) bool { return t.Key() == g.Target.Key() }) {
			out = append(out, g.Target)
		}
	}
	return out
}

// Select returns the plan with only the named variants, in the order
// given; no names keeps every variant. A name the plan does not have, or
// one given twice, is an error.
func (p *Plan) Select(names []string) (*Plan, error) {
	if len(names) == 0 {
		return p, nil
	}
	out := *p
	out.Variants = nil
	for _, n := range names {
		i := slices.IndexFunc(p.Variants, func(v Variant) bool { return v.Name == n })
		switch {
		case i < 0:
			return nil, fmt.Errorf("no variant %q (variants: %s)", n, strings.Join(p.VariantNames(), ", "))
		case slices.ContainsFunc(out.Variants, func(v Variant) bool { return v.Name == n }):
			return nil, fmt.Errorf("variant %q selected twice", n)
		}
		out.Variants = append(out.Variants, p.Variants[i])
	}
	return &out, nil
}

// VariantNames lists the plan's variants.
func (p *Plan) VariantNames() []string {
	out := make([]string, len(p.Variants))
	for i, v := range p.Variants {
		out[i] = v.Name
	}
	return out
}
