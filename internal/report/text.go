package report

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"net"
	"strings"
	"text/tabwriter"

	"github.com/pinlab/pinlab/internal/stats"
	"github.com/pinlab/pinlab/internal/verdict"
)

// MaxPodRows bounds the pod rows printed per window; the JSON has them all.
const MaxPodRows = 24

// Text writes the terminal report: a header, then per variant its windows'
// pod tables and the line saying why, then a comparison across variants.
func Text(w io.Writer, r *Result) error {
	p := &printer{w: w, cluster: !podConnsSeen(r)}
	p.header(r)
	p.overloaded(r)
	for _, v := range r.Variants {
		p.variant(v, len(r.Variants) == 1, r.Duration)
	}
	if len(r.Variants) > 1 {
		p.comparison(r)
	}
	p.verdict(r)
	return p.err
}

// verdict sums up the expectation checks of all variants.
func (p *printer) verdict(r *Result) {
	if line := verdictLine(r); line != "" {
		p.f("\n%s\n", line)
	}
}

// verdictLine sums up the expectation checks of all variants: "expectations:
// 5 of 5 passed", or how many FAILED; empty without expectations.
func verdictLine(r *Result) string {
	total, failed, skipped, invalid := 0, 0, 0, 0
	for _, v := range r.Variants {
		total += len(v.Checks)
		failed += v.Failed()
		skipped += v.Skipped()
		invalid += v.Invalid()
	}
	if total == 0 {
		return ""
	}
	var notes []string
	if skipped > 0 {
		notes = append(notes, fmt.Sprintf("%d not measured", skipped))
	}
	if invalid > 0 {
		notes = append(notes, fmt.Sprintf("%d INVALID: measured while the load generator fell behind", invalid))
	}
	note := ""
	if len(notes) > 0 {
		note = " (" + strings.Join(notes, ", ") + ")"
	}
	if failed == 0 {
		return fmt.Sprintf("expectations: %d of %d passed%s", total-skipped-invalid, total, note)
	}
	return fmt.Sprintf("expectations: %d of %d FAILED%s", failed, total, note)
}

// overloaded warns, above everything else, where the load generator
// could not keep its schedule.
func (p *printer) overloaded(r *Result) {
	for _, o := range overloadLines(r) {
		p.f("  %s: %s\n", o.Label, o.Text)
	}
}

// overloadLine is one place where the load generator could not keep its
// schedule: Label OVERLOADED where the machine was (other work on its
// CPUs, a stall), BURST where the lab's own work was (pods starting,
// connections opening).
type overloadLine struct{ Label, Text string }

// overloadLines say, one per place, where the load generator could not keep
// its schedule.
func overloadLines(r *Result) []overloadLine {
	var out []overloadLine
	for _, v := range r.Variants {
		for _, o := range v.Overloaded {
			where := "the run"
			if o.Window != "" {
				where = "window " + o.Window
			}
			if o.Burst {
				out = append(out, overloadLine{"BURST", fmt.Sprintf("variant %s, %s: %s; the lab's own work, not the machine's: timing figures there include it", v.Name, where, o.Reason)})
				continue
			}
			if r.Cluster != "" {
				out = append(out, overloadLine{"OVERLOADED", fmt.Sprintf("variant %s, %s: the load clients' pods fell behind their schedule (%s); timing figures there are their nodes', not the system's", v.Name, where, o.Reason)})
				continue
			}
			out = append(out, overloadLine{"OVERLOADED", fmt.Sprintf("variant %s, %s: the machine was overloaded (%s); timing figures there are the machine's, not the system's", v.Name, where, o.Reason)})
		}
	}
	return out
}

type printer struct {
	w   io.Writer
	err error
	// cluster: a cluster run's report, whose pods' own connection counts
	// are not observed.
	cluster bool
}

// podConnsSeen says whether r's pods' connection counts were observed:
// a lab's pods are; a cluster's pods are not asked (docs/cluster.md).
func podConnsSeen(r *Result) bool { return r.Cluster == "" }

func (p *printer) f(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}

// runHow says how the variants ran: "side by side", "side by side, 4 at
// a time" or "one after another".
func runHow(r *Result) string {
	switch {
	case !r.SideBySide:
		return "one after another"
	case r.Batch > 0:
		return fmt.Sprintf("side by side, %d at a time", r.Batch)
	}
	return "side by side"
}

func (p *printer) header(r *Result) {
	if r.Cluster != "" {
		p.f("pinlab cluster run: %s (%s) on %s\n", r.Scenario, r.Source, r.Cluster)
	} else {
		p.f("pinlab lab run: %s (%s)\n", r.Scenario, r.Source)
	}
	if r.Description != "" {
		p.f("  %s\n", r.Description)
	}
	how := runHow(r)
	dns := fmt.Sprintf("DNS TTL %gs", r.DNSTTL)
	if r.DNSCache != "" {
		dns += " behind " + r.DNSCache
	}
	if r.Cluster != "" {
		dns = "DNS: the cluster's own"
	}
	p.f("  %gs per variant, %d variant(s) %s, seed %d; grpc-go min re-resolution %gs; %s\n",
		r.Duration, len(r.Variants), how, r.Seed, r.MinResolve, dns)
	if len(r.Steps) > 0 {
		p.f("  timeline: %s\n", strings.Join(r.Steps, "; "))
	}
}

func (p *printer) variant(v Variant, alone bool, duration float64) {
	p.f("\n== %s", v.Name)
	if v.Description != "" {
		p.f(": %s", v.Description)
	}
	p.f("\n")
	for _, g := range v.Groups {
		p.f("   %s: %s -> %s (%s", g.Name, plural(g.Clients, "client"), g.Target, g.ServiceKind)
		if g.ClusterIP != "" {
			p.f(" %s", g.ClusterIP)
		}
		p.f("), %s, %g calls/s each", g.Policy, g.Rate)
		if g.Settings != "" {
			p.f("; %s", g.Settings)
		}
		p.f("\n")
	}
	if v.Servers != "" {
		p.f("   servers: %s\n", v.Servers)
	}
	if v.Patches != "" {
		p.f("   patches: %s\n", v.Patches)
	}
	if v.DNS != "" {
		p.f("   cluster DNS %s", v.DNS)
		if !strings.HasSuffix(v.DNS, ":53") {
			p.f(" (port 53 could not be bound)")
		}
		p.f("\n")
	}
	if v.Dataplane != "" {
		p.f("   dataplane %s\n", v.dataplaneText())
	}
	if v.Error != "" {
		p.f("   FAILED: %s\n", v.Error)
		return
	}
	if v.State == "interrupted" {
		if v.Interrupted > 0 {
			p.f("   interrupted at %.1fs of load: windows not over by then are not reported\n", v.Interrupted)
		} else {
			p.f("   interrupted while starting: no load was sent\n")
		}
	}
	for _, w := range v.Summary.Windows {
		p.window(w)
	}
	if v.viaClusterIP() {
		stop := duration
		if v.Interrupted > 0 {
			stop = v.Interrupted
		}
		p.conntrack(v, stop)
	}
	for _, e := range v.StepErrors {
		p.f("   step failed: %s\n", e)
	}
	p.groupWindows(v)
	p.errorWindows(v)
	p.rebalance(v)
	if alone {
		p.why(v, "   why")
	}
	p.diagnoses(v)
	p.checks(v)
}

// errorWindows prints the stretches of the run with failed calls.
func (p *printer) errorWindows(v Variant) {
	ews := v.Summary.ErrorWindows
	if len(ews) == 0 {
		return
	}
	var total float64
	for _, w := range ews {
		total += w.Seconds()
	}
	p.f("   error windows: %d, %.1fs in all\n", len(ews), total)
	for i, w := range ews {
		if i == MaxPodRows {
			p.f("     ... %d more (see -o json)\n", len(ews)-i)
			break
		}
		p.f("     %s-%s (%.1fs): %d failed; %s; causes: %s\n", seconds(w.From.Seconds()), seconds(w.To.Seconds()), w.Seconds(), w.Failed,
			stats.CodeCounts(w.ByCode), stats.CodeCounts(w.ByCause))
	}
}

// rebalance prints how long pods added during the run took to get a fair
// share.
func (p *printer) rebalance(v Variant) {
	rbs := v.Summary.Rebalance
	if len(rbs) == 0 {
		return
	}
	t := stats.RebalanceSeconds(rbs)
	switch {
	case math.IsInf(t, 1):
		p.f("   time to rebalance: never (a pod added during the run never got %.0f%% of a fair share)\n", 100*stats.RebalanceFraction)
	case !math.IsNaN(t):
		which := fmt.Sprintf("slowest of %d added pods", len(rbs))
		if len(rbs) == 1 {
			which = "the one added pod"
		}
		p.f("   time to rebalance: %.1fs (%s to reach %.0f%% of a fair share)\n", t, which, 100*stats.RebalanceFraction)
	}
}

// checks prints the scenario's expectations as pass/fail lines.
func (p *printer) checks(v Variant) {
	for _, c := range v.Checks {
		verdict, where := checkVerdict(c), checkWhere(c)
		if c.Skipped {
			p.f("   %s  %s: %s, want %s: %s", verdict, c.Name, where, c.Bound, c.Note)
		} else {
			p.f("   %s  %s: %s = %s, want %s", verdict, c.Name, where, c.Shown, c.Bound)
			if c.Note != "" {
				p.f(" (%s)", c.Note)
			}
		}
		p.f("\n")
	}
}

// checkVerdict is a check's outcome: PASS, FAIL, SKIP (not measured) or
// INVALID (measured on an overloaded machine).
func checkVerdict(c verdict.Check) string {
	switch {
	case c.Skipped:
		return "SKIP"
	case c.Invalid:
		return "INVALID"
	case !c.Pass:
		return "FAIL"
	}
	return "PASS"
}

// checkWhere says what a check measured: the metric, narrowed to a code or
// cause, a pod, a group and a window.
func checkWhere(c verdict.Check) string {
	where := c.Metric
	switch {
	case c.Code != "":
		where += " (" + c.Code + ")"
	case c.Cause != "":
		where += " (cause " + c.Cause + ")"
	}
	if c.Pod != "" {
		where += " of " + c.Pod
	}
	if c.Group != "" {
		where += " for group " + c.Group
	}
	if c.Window != "" {
		where += " in " + c.Window
	}
	return where
}

func errorsIn(w stats.WindowStats) int64 {
	var n int64
	for _, c := range w.Errors {
		n += c
	}
	return n
}

func (p *printer) window(w stats.WindowStats) {
	p.f("\n   window %s (%gs-%gs): %.0f calls/s, Jain's index %s, max/mean %s, idle %d/%d, conns/client %.1f, errors %d, p50 %.2fms p99 %.2fms, schedule lag p99 %.2fms\n",
		w.Name, w.From, w.To, w.Rate, ratio(w, w.Jain), ratio(w, w.MaxMean), w.Idle, len(w.Pods), w.ConnsPerClient, errorsIn(w), w.LatencyP50, w.LatencyP99, w.LagP99)
	if len(w.Errors) > 0 {
		p.f("   errors by code: %s", stats.CodeCounts(w.Errors))
		if len(w.ErrorCauses) > 0 {
			p.f("; by cause: %s", stats.CodeCounts(w.ErrorCauses))
		}
		p.f("\n")
	}
	if w.ConnsOpened > 0 {
		p.f("   connections opened: %d (%.2f/s)\n", w.ConnsOpened, w.ConnsOpenedPerSec)
	}
	tw := tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "   %3s\tPOD\t%-15s\t%7s\t%8s\t%6s\t%5s\tSTATE\n", "#", "IP", "READY", "CALLS/S", "SHARE", "CONNS")
	for i, ps := range w.Pods {
		if i == MaxPodRows {
			fmt.Fprintf(tw, "   %3s\t... %d more (see -o json)\n", "", len(w.Pods)-i)
			break
		}
		ready := "-"
		if ps.ReadyAt != nil {
			ready = seconds(*ps.ReadyAt)
			if ps.Added {
				ready = "+" + ready
			}
		}
		conns := fmt.Sprintf("%5.1f", ps.Conns)
		if p.cluster {
			conns = "-"
		}
		fmt.Fprintf(tw, "   %3d\t%s\t%-15s\t%7s\t%8.1f\t%5.1f%%\t%5s\t%s\n", ps.Ordinal, ps.Name, ps.IP, ready, ps.Rate, 100*ps.Share, conns, podState(ps))
	}
	for i, ps := range w.OtherPods {
		if i == MaxPodRows {
			fmt.Fprintf(tw, "   %3s\t... %d more not serving (see -o json)\n", "", len(w.OtherPods)-i)
			break
		}
		fmt.Fprintf(tw, "   %3d\t%s\t%-15s\t%7s\t%8s\t%6s\t%5s\t%s (not counted)\n", ps.Ordinal, ps.Name, ps.IP, "-", "-", "-", "-", podState(ps))
	}
	if err := tw.Flush(); err != nil && p.err == nil {
		p.err = err
	}
}

func windowNamed(v Variant, name string) (stats.WindowStats, bool) {
	for _, w := range v.Summary.Windows {
		if w.Name == name {
			return w, true
		}
	}
	return stats.WindowStats{}, false
}

// seconds formats an offset to a tenth, without a negative zero.
func seconds(s float64) string {
	if math.Abs(s) < 0.05 {
		s = 0
	}
	return fmt.Sprintf("%.1fs", s)
}

// ratio formats a fairness figure, which means nothing without calls.
func ratio(w stats.WindowStats, x float64) string {
	if w.Calls == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", x)
}

func (p *printer) comparison(r *Result) {
	p.f("\n== comparison (READY +: pod added during the run; ADDED: share of calls those pods served)\n")
	tw := tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(comparisonHeader, "\t"))
	for _, row := range comparisonRows(r) {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	if err := tw.Flush(); err != nil && p.err == nil {
		p.err = err
	}
	p.runTable(r)
	p.hopCost(r)
	p.diagnoseTable(r)
	heading := "\nwhy, per variant:\n"
	for _, v := range r.Variants {
		if v.Why != "" {
			p.f("%s", heading)
			heading = ""
			p.why(v, "  "+v.Name)
		}
	}
}

// comparisonHeader heads the comparison across variants.
var comparisonHeader = []string{"WINDOW", "VARIANT", "PODS", "IDLE", "JAIN", "MAX/MEAN", "ADDED", "CONNS/CLIENT", "CALLS/S", "ERRORS", "P99"}

// comparisonRows compare the variants window by window.
func comparisonRows(r *Result) [][]string {
	var rows [][]string
	for _, ws := range r.Windows {
		for _, v := range r.Variants {
			w, ok := windowNamed(v, ws.Name)
			switch {
			case v.Error != "":
				rows = append(rows, dashes(ws.Name, v.Name, "failed"))
				continue
			case !ok:
				rows = append(rows, dashes(ws.Name, v.Name, "not reached"))
				continue
			}
			added := "-"
			if w.AddedPods > 0 {
				added = fmt.Sprintf("%.1f%%", 100*w.AddedShare)
			}
			rows = append(rows, []string{ws.Name, v.Name, fmt.Sprint(len(w.Pods)), fmt.Sprint(w.Idle), ratio(w, w.Jain), ratio(w, w.MaxMean), added,
				fmt.Sprintf("%.1f", w.ConnsPerClient), fmt.Sprintf("%.0f", w.Rate), fmt.Sprint(errorsIn(w)), fmt.Sprintf("%.2fms", w.LatencyP99)})
		}
	}
	return rows
}

// dashes is a comparison row with nothing measured: what happened, then a
// dash per figure.
func dashes(window, variant, what string) []string {
	row := []string{window, variant, what}
	for range len(comparisonHeader) - 3 {
		row = append(row, "-")
	}
	return row
}

// why prints the variant's why line, or one line per client group.
func (p *printer) why(v Variant, label string) {
	if len(v.WhyByGroup) == 0 {
		if v.Why != "" {
			p.f("%s: %s\n", label, v.Why)
		}
		return
	}
	for _, w := range v.WhyByGroup {
		p.f("%s (group %s): %s\n", label, w.Group, w.Line)
	}
}

// podState says what became of a pod in a window: its state at the end
// and the changes inside it ("ready", "not-ready 5.0s", "restarted 7.1s,
// ready 7.6s").
func podState(ps stats.PodStats) string {
	if len(ps.Changes) == 0 {
		if ps.State == "" || ps.State == stats.PodCreated {
			return "pending"
		}
		return string(ps.State)
	}
	var parts []string
	for _, c := range ps.Changes {
		parts = append(parts, fmt.Sprintf("%s %s", c.Phase, seconds(c.At.Seconds())))
	}
	return strings.Join(parts, ", ")
}

// groupWindows prints, when a variant ran several client groups, each
// group's own figures per window: its Service's pods and its own clients.
func (p *printer) groupWindows(v Variant) {
	if len(v.Summary.Groups) == 0 {
		return
	}
	p.f("\n   per client group (each on its target Service's pods, its own calls and connections):\n")
	tw := tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "   WINDOW\tGROUP\tSERVICE\tPODS\tIDLE\tJAIN\tMAX/MEAN\tCONNS/CLIENT\tCALLS/S\tERRORS\tP99\n")
	for i := range v.Summary.Windows {
		for _, g := range v.Summary.Groups {
			if i >= len(g.Windows) {
				continue
			}
			w := g.Windows[i]
			fmt.Fprintf(tw, "   %s\t%s\t%s\t%d\t%d\t%s\t%s\t%.1f\t%.0f\t%d\t%.2fms\n",
				w.Name, g.Name, g.Service, len(w.Pods), w.Idle, ratio(w, w.Jain), ratio(w, w.MaxMean), w.ConnsPerClient, w.Rate, errorsIn(w), w.LatencyP99)
		}
	}
	if err := tw.Flush(); err != nil && p.err == nil {
		p.err = err
	}
}

// runTable compares what is measured over the whole run: failed calls, error
// windows, time to rebalance and checks passed.
func (p *printer) runTable(r *Result) {
	tw := tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\n%s\n", strings.Join(runHeader, "\t"))
	for _, row := range runRows(r) {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	if err := tw.Flush(); err != nil && p.err == nil {
		p.err = err
	}
}

// runHeader heads the whole-run comparison.
var runHeader = []string{"VARIANT", "FAILED", "ERROR WINDOWS", "REBALANCE", "CHECKS"}

// runRows compare what is measured over the whole run, one row per variant.
func runRows(r *Result) [][]string {
	var rows [][]string
	for _, v := range r.Variants {
		if v.Error != "" {
			rows = append(rows, []string{v.Name, "failed", "-", "-", "-"})
			continue
		}
		var failed int64
		for _, c := range v.Summary.Clients {
			for _, n := range c.Errors {
				failed += n
			}
		}
		var secs float64
		for _, w := range v.Summary.ErrorWindows {
			secs += w.Seconds()
		}
		ew := "-"
		if n := len(v.Summary.ErrorWindows); n > 0 {
			ew = fmt.Sprintf("%d, %.1fs", n, secs)
		}
		checks := "-"
		if n := len(v.Checks); n > 0 {
			checks = fmt.Sprintf("%d/%d passed", n-v.Failed()-v.Skipped()-v.Invalid(), n)
			if s := v.Skipped(); s > 0 {
				checks += fmt.Sprintf(", %d not measured", s)
			}
			if i := v.Invalid(); i > 0 {
				checks += fmt.Sprintf(", %d INVALID", i)
			}
		}
		rows = append(rows, []string{v.Name, fmt.Sprint(failed), ew, rebalanceShort(v), checks})
	}
	return rows
}

// rebalanceShort is the variant's time to rebalance: "19.5s", "never" or
// "-" (no pod was added).
func rebalanceShort(v Variant) string {
	switch t := stats.RebalanceSeconds(v.Summary.Rebalance); {
	case math.IsInf(t, 1):
		return "never"
	case !math.IsNaN(t):
		return fmt.Sprintf("%.1fs", t)
	}
	return "-"
}

// hopCost compares the latency (in the last window) and the CPU per call
// of the variants' paths, when some go through an L7 proxy or CPU was
// measured.
func (p *printer) hopCost(r *Result) {
	show := false
	for _, v := range r.Variants {
		show = show || v.CPUPer1000 != nil
		for _, g := range v.Groups {
			show = show || g.Path != "" && g.Path != "direct"
		}
	}
	if !show || len(r.Windows) == 0 {
		return
	}
	last := r.Windows[len(r.Windows)-1].Name
	type row struct {
		name, path    string
		p50, p99, cpu float64
		hasCPU        bool
	}
	var rows []row
	for _, v := range r.Variants {
		w, ok := windowNamed(v, last)
		if v.Error != "" || !ok {
			continue
		}
		var paths []string
		for _, g := range v.Groups {
			paths = append(paths, g.Path)
		}
		rw := row{name: v.Name, path: strings.Join(paths, "+"), p50: w.LatencyP50, p99: w.LatencyP99}
		if v.CPUPer1000 != nil {
			rw.cpu, rw.hasCPU = *v.CPUPer1000, true
		}
		rows = append(rows, rw)
	}
	if len(rows) == 0 {
		return
	}
	p.f("\nhop cost (window %s; CPU per 1000 calls is measured only when variants run one after another):\n", last)
	tw := tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "VARIANT\tPATH\tP50\tP99\tCPU/1000 CALLS\tVS FIRST DIRECT\n")
	var base *row
	for i := range rows {
		if rows[i].path == "direct" || rows[i].path == "" {
			base = &rows[i]
			break
		}
	}
	for _, rw := range rows {
		cpu := "-"
		if rw.hasCPU {
			cpu = fmt.Sprintf("%.1fms", rw.cpu)
		}
		vs := "-"
		if base != nil && rw.name != base.name {
			vs = fmt.Sprintf("p50 %+.0fus, p99 %+.0fus", 1000*(rw.p50-base.p50), 1000*(rw.p99-base.p99))
			if rw.hasCPU && base.hasCPU {
				vs += fmt.Sprintf(", CPU %+.1fms/1000 calls", rw.cpu-base.cpu)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%.3fms\t%.3fms\t%s\t%s\n", rw.name, cmp.Or(rw.path, "direct"), rw.p50, rw.p99, cpu, vs)
	}
	if err := tw.Flush(); err != nil && p.err == nil {
		p.err = err
	}
}

// MaxConntrackRows bounds the kube-proxy connections listed per variant.
const MaxConntrackRows = 8

// conntrack lists the kube-proxy connections open when load stopped (at
// stop seconds; clients close theirs only after that): which pod each
// client's connection through the VIP was pinned to.
func (p *printer) conntrack(v Variant, stop float64) {
	names := map[string]string{}
	for _, c := range v.Summary.Clients {
		names[c.IP] = c.Name
	}
	var open []stats.ProxyConn
	for _, c := range v.Summary.Proxy {
		if c.Opened.Seconds() <= stop && (c.Closed == nil || c.Closed.Seconds() >= stop) {
			open = append(open, c)
		}
	}
	if len(open) == 0 {
		return
	}
	from := ""
	if v.realKubeProxy() {
		from = ", from the kernel's conntrack table"
	}
	p.f("\n   kube-proxy connections open when load stopped (client -> VIP -> pod%s):\n", from)
	for i, c := range open {
		if i == MaxConntrackRows {
			p.f("     ... %d more (see -o json)\n", len(open)-i)
			break
		}
		who := c.Client
		if host, _, err := net.SplitHostPort(c.Client); err == nil && names[host] != "" {
			who = names[host] + " " + c.Client
		}
		p.f("     %s -> %s -> %s (%s) since %.1fs\n", who, c.VIP, c.Pod, c.Endpoint, c.Opened.Seconds())
	}
}

// realKubeProxy reports whether the real kube-proxy served the variant's
// ClusterIPs (and the real CoreDNS its cluster DNS).
func (v Variant) realKubeProxy() bool { return strings.HasPrefix(v.Dataplane, "kube-proxy-") }

// dataplaneText says what served the variant's ClusterIPs and DNS.
func (v Variant) dataplaneText() string {
	if v.realKubeProxy() {
		return v.Dataplane + " (the real kube-proxy and the real CoreDNS; connections through ClusterIPs read from conntrack, DNS answers from CoreDNS's dnstap)"
	}
	return v.Dataplane + " (pinlab's kube-proxy emulation and DNS)"
}

func (v Variant) viaClusterIP() bool {
	for _, g := range v.Groups {
		if g.ClusterIP != "" {
			return true
		}
	}
	return false
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// Headlines sum a result up in a few lines, for a view with no room for
// the report: where the machine was overloaded, then the expectations'
// verdict; none when there is neither.
func Headlines(r *Result) []string {
	var out []string
	for _, o := range overloadLines(r) {
		out = append(out, o.Label+": "+o.Text)
	}
	if line := verdictLine(r); line != "" {
		out = append(out, line)
	}
	return out
}
