package cli

import (
	"fmt"
	"io"
	"os"

	"github.com/pinlab/pinlab/internal/report"
	"github.com/spf13/cobra"
)

// ReportOptions are the inputs of `pinlab report`.
type ReportOptions struct {
	// File is a result written by `pinlab lab run -o json`, or "-" for
	// standard input.
	File string
	// HTML, if not empty, is where the HTML report goes; without it the
	// terminal report goes to Out.
	HTML string

	In       io.Reader
	Out, Err io.Writer
}

// NewCmdReport returns `pinlab report`; runF replaces the behaviour in tests
// (nil means reportRun).
func NewCmdReport(stdout, stderr io.Writer, runF func(*ReportOptions) error) *cobra.Command {
	opts := &ReportOptions{Out: stdout, Err: stderr}
	cmd := &cobra.Command{
		Use:   "report RESULT.json [--html FILE]",
		Short: "Render a saved result again: the terminal report, or the HTML report with --html",
		Long: `Render the result of an earlier run, saved with pinlab lab run -o json:
the terminal report on standard output, or with --html FILE one
self-contained HTML page (charts per variant and side by side, the
expectations), the same page lab run --html writes. RESULT.json may be - for
standard input.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError{fmt.Errorf("report takes one result file (pinlab lab run -o json > RESULT.json), got %d arguments", len(args))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.File, opts.In = args[0], cmd.InOrStdin()
			if cmd.Flags().Changed("html") && opts.HTML == "" {
				return usageError{fmt.Errorf("--html: an empty file name")}
			}
			if runF != nil {
				return runF(opts)
			}
			return reportRun(opts)
		},
	}
	cmd.Flags().StringVar(&opts.HTML, "html", "", "write the HTML report to this file instead of the terminal report to standard output")
	return cmd
}

func reportRun(opts *ReportOptions) error {
	res, err := readResult(opts)
	if err != nil {
		return err
	}
	if opts.HTML == "" {
		return report.Text(opts.Out, res)
	}
	html, err := createHTML(opts.HTML)
	if err != nil {
		return err
	}
	return html.write(res)
}

// readResult reads the result file, or standard input for "-".
func readResult(opts *ReportOptions) (*report.Result, error) {
	if opts.File == "-" {
		res, err := report.ReadJSON(opts.In)
		if err != nil {
			return nil, fmt.Errorf("standard input: %w", err)
		}
		return res, nil
	}
	f, err := os.Open(opts.File)
	if err != nil {
		return nil, usageError{err}
	}
	defer f.Close()
	res, err := report.ReadJSON(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", opts.File, err)
	}
	return res, nil
}

// htmlFile is an HTML report's file, created before a run so that a path
// that cannot be written fails at once, not after the run.
type htmlFile struct{ f *os.File }

// createHTML creates path for an HTML report; an empty path is no report.
func createHTML(path string) (*htmlFile, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, usageError{fmt.Errorf("--html: %w", err)}
	}
	return &htmlFile{f}, nil
}

// write renders res into the file and closes it; nil writes nothing.
func (h *htmlFile) write(res *report.Result) error {
	if h == nil {
		return nil
	}
	err := report.HTML(h.f, res)
	if cerr := h.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("--html %s: %w", h.f.Name(), err)
	}
	return nil
}

// discard removes the file: there is no result to render.
func (h *htmlFile) discard() {
	if h != nil {
		h.f.Close()
		os.Remove(h.f.Name())
	}
}
