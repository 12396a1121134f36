package report

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/pinlab/pinlab/internal/diagnose"
)

// CauseTitles names each diagnose cause in the verdict line.
var CauseTitles = map[string]string{
	"clusterip-connection":   "connection-level balancing through a ClusterIP",
	"headless-pick-first":    "pick_first on a headless Service",
	"added-after-resolution": "pods added after the clients' last resolution",
	"few-connections":        "clients hold connections to a few pods only",
	"uneven-clients":         "clients call at uneven rates",
	"l7-proxy":               "an L7 proxy is in the path",
	"inbound-proxy":          "connections come from inbound sidecars",
	"rotating-connections":   "connections rotate: the skew is chance over a short window",
	"stale-addresses":        "clients call pods that are not ready (stale addresses)",
	"no-pods":                "no pods",
	"no-samples":             "no ready pod measured",
	"no-calls":               "no calls",
	"no-clients":             "no client connections",
	"per-pod-addressing":     "StatefulSet pods may be dialled by name",
	"unread-pods":            "some ready pods could not be read",
}

// DiagnoseJSON writes r as indented JSON: every figure, the evidence
// included (durations in nanoseconds, rates per second, shares 0-1).
func DiagnoseJSON(w io.Writer, r *diagnose.Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// DiagnoseText writes the terminal report of a diagnosis: a header, the
// three steps as tables, the verdict in plain words, the fixes, and what
// could not be collected. It prints at most MaxPodRows pods and clients;
// the JSON has them all.
func DiagnoseText(w io.Writer, r *diagnose.Result) error {
	p := &printer{w: w}
	ev := r.Evidence
	s := ev.Service
	kind := "ClusterIP " + s.ClusterIP
	if s.Headless() {
		kind = "headless"
	} else if s.Type != "ClusterIP" {
		kind = s.Type + " " + s.ClusterIP
	}
	from := ev.RatesFrom
	switch from {
	case "agent":
		from = "pinlab-agent's byte counts (both ways)"
	case "exec":
		from = "/proc/net/tcp read through exec (open connections, no traffic)"
	}
	over := fmt.Sprintf("rates from %s over %.1fs", from, ev.Window.Seconds())
	switch {
	case ev.Window == 0:
		over = "no rates: no pod was read twice (the run was stopped, or every reading failed)"
	case ev.Readings > 2:
		over += fmt.Sprintf(" (%d readings)", ev.Readings)
	}
	port := ""
	if s.Port != "" && len(s.Ports) > 1 {
		port = ", port " + s.Port
	}
	p.f("pinlab diagnose %s/%s (%s%s, %d of %d endpoints ready) from %s; %s\n\n",
		s.Namespace, s.Name, kind, port, s.Ready, s.Endpoints, ev.Source, over)
	p.diagRates(r)
	p.diagClients(r)
	p.diagPath(r)
	p.diagVerdict(r)
	return p.err
}

func (p *printer) diagRates(r *diagnose.Result) {
	rt := r.Rates
	p.f("1. Per-pod request rates\n")
	tw := tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "POD\tIP\tREADY\t%s\tSHARE\tIDLE\tCONNS\tFAILED/S\n", unitHead(rt.Unit))
	for i, pr := range rt.Pods {
		if i == MaxPodRows {
			fmt.Fprintf(tw, "... %d more (see -o json)\n", len(rt.Pods)-MaxPodRows)
			break
		}
		ready := "no"
		if pr.Ready {
			ready = "yes"
		}
		if pr.Err != "" {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t-\t-\n", pr.Name, pr.IP, ready)
			continue
		}
		idle, share := "", "-"
		if pr.Idle {
			idle = "idle"
			if pr.Newest {
				idle = "idle, new"
			}
		}
		if pr.Ready {
			share = fmt.Sprintf("%.1f%%", 100*pr.Share)
		}
		failed := "-" // an agent sees bytes, exec connections, not calls' outcomes
		if pr.Failed != nil {
			failed = fmt.Sprintf("%.1f", *pr.Failed)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f\t%s\t%s\t%d\t%s\n", pr.Name, pr.IP, ready, pr.Rate, share, idle, pr.Conns, failed)
	}
	tw.Flush()
	if rt.Counted > 0 {
		p.f("%d ready pods measured: %.0f %s, Jain's index %.2f, max/mean %.2f, %d idle (below 10%% of a fair share)\n", rt.Counted, rt.Total, cmp.Or(rt.Unit, "calls/s"), rt.Jain, rt.MaxMean, rt.Idle)
	}
	probes, on := 0.0, 0
	for _, pr := range rt.Pods {
		if pr.Probes > 0 {
			probes, on = probes+pr.Probes, on+1
		}
	}
	if on > 0 {
		p.f("left out as probes: %.1f calls/s on %d pods (calls on connections opened and closed between readings, up to %.0f/s a pod, and the node's slow connections)\n", probes, on, diagnose.ProbeRate)
	}
	p.f("\n")
}

func (p *printer) diagClients(r *diagnose.Result) {
	p.f("2. Connections per client\n")
	if len(r.Clients) == 0 {
		p.f("no client connection seen in any reading\n\n")
		return
	}
	tw := tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "CLIENT\tIP\tCONNS\t%s\tPODS\n", unitHead(r.Rates.Unit))
	for i, c := range r.Clients {
		if i == MaxPodRows {
			fmt.Fprintf(tw, "... %d more (see -o json)\n", len(r.Clients)-MaxPodRows)
			break
		}
		name := c.Name
		if c.Kind == "endpoint" {
			name = "svc/" + c.Name
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.1f\t%s\n", name, c.IP, c.Conns, c.Rate, podList(c.Pods))
	}
	tw.Flush()
	p.f("\n")
}

// unitHead is a rate column's heading: CALLS/S, BYTES/S or CONNECTIONS.
func unitHead(unit string) string {
	return strings.ToUpper(cmp.Or(unit, "calls/s"))
}

// podList names up to 3 pods.
func podList(pods []string) string {
	if len(pods) > 3 {
		return strings.Join(pods[:3], ", ") + fmt.Sprintf(" and %d more", len(pods)-3)
	}
	return strings.Join(pods, ", ")
}

func (p *printer) diagPath(r *diagnose.Result) {
	p.f("3. L7 proxy in the path\n")
	pa := r.Path
	switch pa.Kind {
	case "headless":
		p.f("Service %s is headless: no VIP; clients get the pods' addresses from DNS and balance themselves\n", r.Evidence.Service.Name)
	case "ClusterIP":
		p.f("Service %s is a ClusterIP: kube-proxy balances connections, not calls\n", r.Evidence.Service.Name)
	default:
		p.f("Service %s is of type %s\n", r.Evidence.Service.Name, pa.Kind)
	}
	if len(pa.Siblings) > 0 {
		p.f("also selecting these pods: %s\n", strings.Join(pa.Siblings, ", "))
	}
	if len(pa.Signs) == 0 {
		p.f("no sign of an L7 proxy: no sidecar container or mesh annotation on the clients' or servers' pods, no client that is another Service's endpoint (a gateway), no connection from an inbound sidecar\n")
	}
	for _, s := range pa.Signs {
		p.f("- %s\n", s)
	}
	if pa.Proxy {
		p.f("an L7 proxy is in the path: %.0f%% of the calls come through it\n", 100*pa.ProxyShare)
	}
	p.f("\n")
}

func (p *printer) diagVerdict(r *diagnose.Result) {
	title := strings.ToUpper(string(r.Verdict))
	if t := CauseTitles[r.Cause]; t != "" {
		title += ": " + t
	}
	p.f("VERDICT %s\n", title)
	p.wrap("", r.Why)
	if r.Reproduce != "" {
		p.f("reproduce it: %s\n", r.Reproduce)
	}
	if len(r.Fixes) > 0 {
		p.f("\nfixes:\n")
	}
	for i, f := range r.Fixes {
		p.f("%d. %s\n", i+1, f.Name)
		p.wrap("   ", f.How)
		p.wrap("   ", "cost: "+f.TradeOff)
		p.f("   see: %s\n", f.Scenario)
	}
	if len(r.Evidence.Problems) > 0 {
		p.f("\nnot collected (the figures above are from the rest):\n")
		for _, s := range r.Evidence.Problems {
			p.f("- %s\n", s)
		}
	}
}

// wrap prints s in lines of at most 100 columns, each starting with
// indent.
func (p *printer) wrap(indent, s string) {
	line := indent
	for _, word := range strings.Fields(s) {
		if len(line) > len(indent) && len(line)+1+len(word) > 100 {
			p.f("%s\n", line)
			line = indent
		}
		if len(line) > len(indent) {
			line += " "
		}
		line += word
	}
	if len(line) > len(indent) {
		p.f("%s\n", line)
	}
}
