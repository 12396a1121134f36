package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/pinlab/pinlab/internal/exit"
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
				return exit.UsageError(fmt.Errorf("report takes one result file (pinlab lab run -o json > RESULT.json), got %d arguments", len(args)))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.File, opts.In = args[0], cmd.InOrStdin()
			if cmd.Flags().Changed("html") && opts.HTML == "" {
				return exit.UsageError(fmt.Errorf("--html: an empty file name"))
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
		return nil, exit.UsageError(err)
	}
	defer f.Close()
	res, err := report.ReadJSON(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", opts.File, err)
	}
	return res, nil
}

// htmlFile is an HTML report's file. createHTML checks before a run that
// a file can be made there, so that a path that cannot be written fails
// at once, not after the run; write then writes the page to a new file
// beside it and renames it over path, so that a file already there is
// replaced whole or not at all (a run killed or interrupted before its
// report leaves it as it was).
type htmlFile struct{ path string }

// createHTML checks path for an HTML report; an empty path is no report.
// A path that exists must be a regular file (a symlink is followed to
// one): the report replaces it whole, and a device, a FIFO or a socket is
// no place for it.
func createHTML(path string) (*htmlFile, error) {
	if path == "" {
		return nil, nil
	}
	target, err := htmlTarget(path)
	if err != nil {
		return nil, exit.UsageError(fmt.Errorf("--html %s: %w", path, err))
	}
	f, err := tempBeside(target)
	if err != nil {
		return nil, exit.UsageError(fmt.Errorf("--html %s: cannot create a file in %s: %w", path, filepath.Dir(target), unwrapPath(err)))
	}
	f.Close()
	os.Remove(f.Name())
	return &htmlFile{target}, nil
}

// htmlTarget is the file --html path writes: path, or the file a symlink
// at path leads to; an error for what exists and is no regular file.
func htmlTarget(path string) (string, error) {
	st, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return path, nil
	}
	if err != nil {
		return "", err
	}
	if st.Mode()&fs.ModeSymlink != 0 {
		target, err := filepath.EvalSymlinks(path)
		if errors.Is(err, fs.ErrNotExist) {
			return "", errors.New("a symlink to nothing; give the report's file")
		}
		if err != nil {
			return "", err
		}
		if st, err = os.Stat(target); err != nil {
			return "", err
		}
		path = target
	}
	switch {
	case st.IsDir():
		return "", errors.New("is a directory")
	case !st.Mode().IsRegular():
		return "", fmt.Errorf("is a %s, not a regular file; give a file for the report", fileKind(st.Mode()))
	}
	return path, nil
}

// fileKind names what mode is, for messages.
func fileKind(mode fs.FileMode) string {
	switch {
	case mode&fs.ModeCharDevice != 0:
		return "character device"
	case mode&fs.ModeDevice != 0:
		return "device"
	case mode&fs.ModeNamedPipe != 0:
		return "named pipe"
	case mode&fs.ModeSocket != 0:
		return "socket"
	}
	return "special file"
}

// unwrapPath is err without the temporary file's path it names.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// tempBeside creates a new file in path's directory, named after it.
func tempBeside(path string) (*os.File, error) {
	return os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.partial")
}

// write renders res into the file; nil writes nothing.
func (h *htmlFile) write(res *report.Result) error {
	if h == nil {
		return nil
	}
	f, err := tempBeside(h.path)
	if err != nil {
		return fmt.Errorf("--html %s: %w", h.path, err)
	}
	err = report.HTML(f, res)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(f.Name(), h.path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("--html %s: %w", h.path, unwrapPath(err))
	}
	return nil
}

// discard gives up the report: nothing was written.
func (h *htmlFile) discard() {}
