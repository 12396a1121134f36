package coredns

import (
	"bytes"
	"net/netip"
	"text/template"
)

// corefile holds what the Corefile says; String renders it.
type corefile struct {
	Addr       netip.AddrPort // where DNS is served (bind and the server block's port)
	Health     netip.AddrPort // health plugin's listener
	Ready      netip.AddrPort // ready plugin's listener
	Metrics    netip.AddrPort // prometheus plugin's listener
	Zone       string         // the cluster domain, without the trailing dot
	TTL        int            // the kubernetes plugin's ttl, seconds
	Lameduck   string         // health's lameduck ("5s"); "" means none
	Kubeconfig string         // the kubernetes plugin's kubeconfig file
	Log        bool           // the log plugin: a line per query
	Pods       string         // the kubernetes plugin's pods option
	Cache      string         // the cache plugin's lines, indented; "" for none
	FixedOrder bool           // no loadbalance plugin
	Dnstap     string         // the dnstap plugin's unix socket; "" for none
}

// corefileTemplate is kubeadm v1.37.2's Corefile with the changes listed
// in the package comment (bind, loopback listeners, kubeconfig, no
// forward, loop or reload) and the settings of Config (pods, cache,
// loadbalance, log, dnstap).
var corefileTemplate = template.Must(template.New("Corefile").Parse(`.:{{.Addr.Port}} {
    bind {{.Addr.Addr}}
    errors
{{- if .Lameduck}}
    health {{.Health}} {
       lameduck {{.Lameduck}}
    }
{{- else}}
    health {{.Health}}
{{- end}}
    ready {{.Ready}}
{{- if .Log}}
    log
{{- end}}
{{- if .Dnstap}}
    dnstap unix://{{.Dnstap}} full
{{- end}}
    kubernetes {{.Zone}} in-addr.arpa ip6.arpa {
       kubeconfig {{.Kubeconfig}} coredns
       pods {{.Pods}}
       fallthrough in-addr.arpa ip6.arpa
       ttl {{.TTL}}
    }
    prometheus {{.Metrics}}
{{- if .Cache}}
{{.Cache}}
{{- end}}
{{- if not .FixedOrder}}
    loadbalance
{{- end}}
}
`))

// String returns the Corefile's text.
func (c corefile) String() string {
	var b bytes.Buffer
	if err := corefileTemplate.Execute(&b, c); err != nil {
		panic("coredns: Corefile template: " + err.Error()) // only a bug in the template gets here
	}
	return b.String()
}
