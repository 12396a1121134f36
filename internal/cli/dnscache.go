package cli

import (
	"github.com/spf13/pflag"
)

// addDNSCacheFlags adds lab up's flags for CoreDNS's cache plugin, which
// follow its Corefile syntax:
//
//	cache [TTL] { success CAPACITY [TTL [MINTTL]]; denial CAPACITY [TTL [MINTTL]]; keepttl }
func addDNSCacheFlags(f *pflag.FlagSet, opts *LabUpOptions) {
	f.StringVar(&opts.DNSCache, "dns-cache", "off", "CoreDNS's cache plugin in front of the DNS: off, kubeadm (kubeadm v1.32 and later: cache 30 { disable success cluster.local; disable denial cluster.local }, answers in the cluster zone not kept), kubeadm-1.31 (kubeadm v1.31 and before: cache 30, every zone kept), coredns (cache: the plugin's defaults) or a TTL cap such as 30s (cache 30)")
	f.StringVar(&opts.DNSCacheSuccess, "dns-cache-success", "", "the cache's success line, CAPACITY[,TTL[,MINTTL]] such as 9984,30s,5s (needs --dns-cache)")
	f.StringVar(&opts.DNSCacheDenial, "dns-cache-denial", "", "the cache's denial line, CAPACITY[,TTL[,MINTTL]] (needs --dns-cache)")
	f.BoolVar(&opts.DNSCacheKeepTTL, "dns-cache-keepttl", false, "serve cached answers with the TTL they were stored with instead of counting it down (needs --dns-cache)")
}
