package controlplane

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// logTailLines is how many lines of a component's log an error quotes.
const logTailLines = 20

// stopGrace bounds how long stop waits after SIGTERM before SIGKILL. The
// components were measured to exit 1.6-2.9 s after SIGTERM.
const stopGrace = 10 * time.Second

// process is one running component. Its fields are set before start
// returns; err is written before done is closed.
type process struct {
	name   string
	path   string
	args   []string
	log    string // the log file: stdout and stderr
	listen string // what it listens on, for errors

	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // cmd.Wait's error
}

// startProcess starts bin/name with args, its output appended to logPath.
// onExit, when not nil, runs on the waiting goroutine after the process
// has exited (and done is closed).
func startProcess(bin, name string, args []string, logPath, listen string, onExit func(*process)) (*process, error) {
	p := &process{name: name, path: filepath.Join(bin, name), args: args, log: logPath, listen: listen, done: make(chan struct{})}
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("controlplane: %s: %w", name, err)
	}
	defer f.Close()
	p.cmd = exec.Command(p.path, args...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	// Its own process group: a Ctrl-C in the terminal reaches pinlab, which
	// stops the components in order, not every component at once.
	p.cmd.SysProcAttr = sysProcAttr()
	if err := p.cmd.Start(); err != nil {
		return nil, p.failure(fmt.Sprintf("could not start: %v", err))
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
		if onExit != nil {
			onExit(p)
		}
	}()
	return p, nil
}

// exited reports whether the process has exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, waits up to stopGrace, then SIGKILLs and waits.
func (p *process) stop() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(stopGrace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// failure returns an error saying what went wrong with p, with its
// command line, what it listens on and the tail of its log.
func (p *process) failure(what string) error {
	return fmt.Errorf("controlplane: %s %s\n  command: %s %s\n  listens on: %s\n  log %s, last lines:\n%s",
		p.name, what, p.path, strings.Join(p.args, " "), p.listen, p.log, Indent(Tail(p.log, logTailLines)))
}

// exitFailure is failure for a process that has exited.
func (p *process) exitFailure(when string) error {
	return p.failure(fmt.Sprintf("exited (%v) %s", p.err, when))
}

// Tail returns the last n lines of the file at path (or why it cannot;
// "(empty)" for an empty file): a component's log tail for its errors.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	if len(lines) == 1 && lines[0] == "" {
		return "(empty)"
	}
	return strings.Join(lines, "\n")
}

// Indent prefixes every line of s with four spaces, as errors quote a
// log's Tail.
func Indent(s string) string {
	var b bytes.Buffer
	for _, l := range strings.Split(s, "\n") {
		b.WriteString("    " + l + "\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

// rss returns the resident set size of pid in bytes, from /proc.
func rss(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb); err != nil {
				return 0, fmt.Errorf("controlplane: parsing VmRSS %q: %w", v, err)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("controlplane: no VmRSS for pid %d", pid)
}
