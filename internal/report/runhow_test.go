package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/pinlab/pinlab/internal/outcome"
	"github.com/pinlab/pinlab/internal/plan"
)

// TestRunHow: the header says how the variants ran, and a side-by-side run
// that the runner split into batches (lab run --control-plane kubernetes
// runs 4 at a time) does not claim that all ran at once.
func TestRunHow(t *testing.T) {
	five := make([]outcome.Variant, 5)
	for _, tt := range []struct {
		name string
		run  outcome.Run
		want string
	}{
		{"all at once", outcome.Run{SideBySide: true, Batch: 5, Variants: five}, "5 variant(s) side by side, seed"},
		{"in batches", outcome.Run{SideBySide: true, Batch: 4, Variants: five}, "5 variant(s) side by side, 4 at a time, seed"},
		{"sequential", outcome.Run{Batch: 1, Variants: five}, "5 variant(s) one after another, seed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := &plan.Plan{Name: "x", Source: "builtin:x"}
			for i := range tt.run.Variants {
				p.Variants = append(p.Variants, plan.Variant{Name: string(rune('a' + i))})
				tt.run.Variants[i].Variant = p.Variants[i].Name
			}
			r := New(p, &tt.run, nil)
			var buf bytes.Buffer
			if err := Text(&buf, r); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(buf.String(), tt.want) {
				t.Errorf("header lacks %q:\n%s", tt.want, buf.String())
			}
		})
	}
}
