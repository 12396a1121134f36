package report

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/pinlab/pinlab/internal/diagnose"
)

// diagnoses prints a variant's diagnose readings (lab run --diagnose): per
// target Service the verdict and its cause, then the figures.
func (p *printer) diagnoses(v Variant) {
	for _, d := range v.Diagnoses {
		p.f("   diagnose %s at %.1fs: ", d.Service, d.At)
		r := d.Result
		if r == nil {
			p.f("not collected: %s\n", d.Error)
			continue
		}
		p.f("%s (readings %.1fs apart)\n", diagnoseTitle(r), r.Evidence.Window.Seconds())
		p.f("     %s\n", diagnoseFigures(r))
		if probs := r.Evidence.Problems; len(probs) > 0 {
			more := ""
			if len(probs) > 2 {
				probs, more = probs[:2], fmt.Sprintf(" and %d more", len(r.Evidence.Problems)-2)
			}
			p.f("     not collected: %s%s\n", strings.Join(probs, "; "), more)
		}
	}
}

// diagnoseTitle is "PINNED: connection-level balancing through a
// ClusterIP", or the verdict alone.
func diagnoseTitle(r *diagnose.Result) string {
	title := strings.ToUpper(string(r.Verdict))
	if t := CauseTitles[r.Cause]; t != "" {
		title += ": " + t
	}
	return title
}

// diagnoseFigures are step 1's and step 2's key figures in one line.
func diagnoseFigures(r *diagnose.Result) string {
	rt := r.Rates
	s := fmt.Sprintf("%d pods measured, %.0f calls/s, Jain's index %.2f, %d idle", rt.Counted, rt.Total, rt.Jain, rt.Idle)
	if rt.Unread > 0 {
		s += fmt.Sprintf(", %d not read", rt.Unread)
	}
	if n, each := busyConns(r.Clients); n > 0 {
		what := "busy connections"
		if each == "1" {
			what = "busy connection"
		}
		s += fmt.Sprintf("; %s with %s %s each", plural(n, "client"), each, what)
	}
	if r.Path.Proxy {
		s += fmt.Sprintf("; an L7 proxy carries %.0f%% of the calls", 100*r.Path.ProxyShare)
	}
	return s
}

// busyConns counts the clients with a busy connection (above
// diagnose.MinConnRate) and says how many each holds ("1", "2-5").
func busyConns(cls []diagnose.Client) (n int, each string) {
	lo, hi := 0, 0
	for _, c := range cls {
		if c.Busy == 0 {
			continue
		}
		if n == 0 || c.Busy < lo {
			lo = c.Busy
		}
		hi = max(hi, c.Busy)
		n++
	}
	if lo == hi {
		return n, fmt.Sprint(lo)
	}
	return n, fmt.Sprintf("%d-%d", lo, hi)
}

// diagnoseTable compares the variants' diagnose readings.
func (p *printer) diagnoseTable(r *Result) {
	var rows [][]string
	for _, v := range r.Variants {
		for _, d := range v.Diagnoses {
			row := []string{v.Name, d.Service, fmt.Sprintf("%.1fs", d.At), "not collected", "-", "-", "-", "-"}
			if res := d.Result; res != nil {
				_, each := busyConns(res.Clients)
				row = append(row[:3], strings.ToUpper(string(res.Verdict)), cause(res.Cause),
					fmt.Sprintf("%.2f", res.Rates.Jain), fmt.Sprintf("%d/%d", res.Rates.Idle, res.Rates.Counted), each)
			}
			rows = append(rows, row)
		}
	}
	if len(rows) == 0 {
		return
	}
	p.f("\ndiagnose, per variant (pinlab diagnose in each variant's lab, while load ran):\n")
	tw := tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VARIANT\tSERVICE\tAT\tVERDICT\tCAUSE\tJAIN\tIDLE\tBUSY CONNS/CLIENT")
	for _, row := range rows {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	if err := tw.Flush(); err != nil && p.err == nil {
		p.err = err
	}
}

func cause(c string) string {
	if c == "" {
		return "-"
	}
	return c
}
