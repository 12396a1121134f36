package kubelet

import (
	"fmt"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/pinlab/pinlab/internal/podshell"
)

// Shell returns what `kubectl exec` into pod namespace/name's container
// sees (package podshell): the pod, its network namespace (nil when pods
// share the node's) and its /etc/resolv.conf. Errors wrap ErrNoPod, or
// ErrNotRunning when the container does not run.
func (k *Kubelet) Shell(namespace, name, container string) (podshell.Pod, error) {
	w, err := k.worker(namespace, name)
	if err != nil {
		return podshell.Pod{}, err
	}
	if _, err := w.running(); err != nil {
		return podshell.Pod{}, err
	}
	p, _ := w.latest()
	sp := podshell.Pod{Pod: p, Container: container, ResolvConf: k.resolvConf(p)}
	if sb := w.netns.Load(); sb != nil {
		sp.Netns = sb
	}
	return sp, nil
}

// resolvConf is the pod's /etc/resolv.conf as the kubelet writes it
// (pkg/kubelet/network/dns, v1.37), for the main cases: for dnsPolicy
// ClusterFirst (the default; a hostNetwork pod's is Default unless
// ClusterFirstWithHostNet; Default too when the node has no cluster DNS)
// the cluster DNS with the pod's namespace's search path, then the node's
// search domains, and ndots:5; for Default the node's file's nameservers
// and search domains; for None nothing but spec.dnsConfig, which the other
// policies add to (nameservers and searches after theirs, options
// overriding). Duplicates go; at most 3 nameservers and 32 search
// domains are kept. The node's own options are not carried over.
func (k *Kubelet) resolvConf(p *corev1.Pod) string {
	policy := p.Spec.DNSPolicy
	if policy == "" {
		policy = corev1.DNSClusterFirst
	}
	if (p.Spec.HostNetwork && policy == corev1.DNSClusterFirst) || (policy != corev1.DNSNone && policy != corev1.DNSDefault && !k.cfg.ClusterDNS.IsValid()) {
		policy = corev1.DNSDefault
	}
	hostServers, hostSearches := hostResolv()
	var servers, searches []string
	options := map[string]string{}
	var order []string
	setOpt := func(name, value string) {
		if _, ok := options[name]; !ok {
			order = append(order, name)
		}
		options[name] = value
	}
	switch policy {
	case corev1.DNSClusterFirst, corev1.DNSClusterFirstWithHostNet:
		servers = append(servers, k.cfg.ClusterDNS.String())
		d := ClusterDomain
		searches = append(searches, p.Namespace+".svc."+d, "svc."+d, d)
		searches = append(searches, hostSearches...)
		setOpt("ndots", "5")
	case corev1.DNSDefault:
		servers, searches = hostServers, hostSearches
	}
	if c := p.Spec.DNSConfig; c != nil {
		servers = append(servers, c.Nameservers...)
		searches = append(searches, c.Searches...)
		for _, o := range c.Options {
			v := ""
			if o.Value != nil {
				v = *o.Value
			}
			setOpt(o.Name, v)
		}
	}
	servers, searches = first(unique(servers), 3), first(unique(searches), 32)
	var b strings.Builder
	if len(searches) > 0 {
		fmt.Fprintf(&b, "search %s\n", strings.Join(searches, " "))
	}
	for _, s := range servers {
		fmt.Fprintf(&b, "nameserver %s\n", s)
	}
	if len(order) > 0 {
		opts := make([]string, 0, len(order))
		for _, name := range order {
			if v := options[name]; v != "" {
				opts = append(opts, name+":"+v)
			} else {
				opts = append(opts, name)
			}
		}
		fmt.Fprintf(&b, "options %s\n", strings.Join(opts, " "))
	}
	return b.String()
}

// hostResolv is the node's /etc/resolv.conf: nameservers and search
// domains.
func hostResolv() (servers, searches []string) {
	b, _ := os.ReadFile("/etc/resolv.conf")
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && f[0] == "nameserver":
			servers = append(servers, f[1])
		case len(f) >= 2 && f[0] == "search":
			searches = f[1:] // the last search line counts
		}
	}
	return servers, searches
}

// unique drops repeated strings, keeping the first of each.
func unique(list []string) []string {
	seen := map[string]bool{}
	out := list[:0:0]
	for _, s := range list {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// first is at most n strings of list.
func first(list []string, n int) []string {
	if len(list) > n {
		return list[:n]
	}
	return list
}
