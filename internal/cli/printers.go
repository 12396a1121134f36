package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/pinlab/pinlab/internal/control"
	corev1 "k8s.io/api/core/v1"
)

func printKind(w io.Writer, kind string, o control.Objects) {
	header, rows := control.Rows(kind, o)
	table(w, header, rows)
}

func table(w io.Writer, header string, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

// printServices prints svcs as lab get svc does.
func printServices(w io.Writer, svcs []corev1.Service) {
	header, rows := control.Rows("Service", control.Objects{Services: svcs})
	table(w, header, rows)
}
