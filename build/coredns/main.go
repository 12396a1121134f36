// Command coredns is CoreDNS v1.15.0 with only the plugins the Corefile of a
// kubeadm cluster uses (errors, health, ready, kubernetes, cache,
// loadbalance, log, prometheus, and bind, so that it listens on one
// address rather than every one; dnstap, through which the lab reads
// every answer CoreDNS sends), built the way CoreDNS documents for custom
// builds: import the plugins, set core/dnsserver.Directives in their
// plugin.cfg order, call coremain.Run. Fewer plugins than the stock binary
// (which links every cloud backend) keep the cold build short; the
// plugins it has are CoreDNS's own code, unchanged. build.sh builds it.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/dnstap"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
)

// directives is the plugin chain's order: plugin.cfg of v1.15.0 with only
// the plugins imported above, in the same relative order (the order of
// the lines in a Corefile does not matter; this list decides).
var directives = []string{
	"bind",
	"ready",
	"health",
	"prometheus",
	"errors",
	"log",
	"dnstap",
	"loadbalance",
	"cache",
	"kubernetes",
}

func init() {
	dnsserver.Directives = directives
}

func main() {
	coremain.Run()
}
