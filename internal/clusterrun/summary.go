package clusterrun

import (
	"fmt"
	"strings"

	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/internal/remote"
	"k8s.io/apimachinery/pkg/api/meta"
)

// summary says what the run will create and where, for consent.
func summary(p *plan.Plan, host, run string, opts Options) string {
	var b strings.Builder
	fmt.Fprintf(&b, "cluster run %s creates on the API server %s (labelled %s=%s):\n", p.Name, host, remote.RunLabel, run)
	for i, v := range p.Variants {
		fmt.Fprintf(&b, "  namespace %s (variant %s): Secret %s", remote.Namespace(run, i), v.Name, remote.TokenSecret)
		for _, o := range v.Objects {
			m, err := meta.Accessor(o)
			if err != nil {
				continue
			}
			if kind := kindOf(o); kind != "Namespace" {
				fmt.Fprintf(&b, ", %s %s", kind, m.GetName())
			}
		}
		for _, g := range v.Groups {
			fmt.Fprintf(&b, ", StatefulSet %s (%d load clients)", g.Name, g.Clients)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "pods run the image %s; the run deletes the namespaces when it ends", opts.Image)
	if opts.Keep {
		b.WriteString(" (--keep: it leaves them)")
	}
	b.WriteString(".")
	return b.String()
}

// kindOf is o's kind, from its Go type.
func kindOf(o any) string {
	s := fmt.Sprintf("%T", o)
	return s[strings.LastIndexByte(s, '.')+1:]
}
