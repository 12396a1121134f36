package conntrack

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Command finds the conntrack binary: on PATH, else /usr/sbin or /sbin
// (Debian's conntrack package installs /usr/sbin/conntrack, often not on
// a user's PATH).
func Command() (string, error) {
	if p, err := exec.LookPath("conntrack"); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin"} {
		p := filepath.Join(d, "conntrack")
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("conntrack: the conntrack tool is not installed (Debian: apt-get install conntrack)")
}

// filterArgs selects TCP entries whose original destination is in dst.
func filterArgs(dst netip.Prefix) []string {
	return []string{"-p", "tcp", "--orig-dst", dst.Masked().String()}
}

// List runs `conntrack -L -p tcp --orig-dst DST` and returns its TCP
// entries whose original destination is in dst.
func List(ctx context.Context, dst netip.Prefix) ([]Entry, error) {
	bin, err := Command()
	if err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, append([]string{"-L"}, filterArgs(dst)...)...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("conntrack: %s: %w: %s", strings.Join(cmd.Args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return Parse(bytes.NewReader(out))
}

// bufferSize is the netlink receive buffer Watch asks for (conntrack -E
// --buffer-size): 8 MiB, so that bursts of connections are not lost
// ("ENOBUFS").
const bufferSize = 8 << 20

// startTimeout bounds Watch's wait for conntrack to subscribe.
const startTimeout = 10 * time.Second

// Watch runs `conntrack -E -o timestamp -p tcp --orig-dst DST` and calls fn
// with every event, in order, on Watch's goroutine, until ctx ends (it
// then stops conntrack and returns nil) or conntrack fails. started, if
// not nil, is called once conntrack has subscribed to the kernel's events
// (it prints its buffer-size notice then): connections made after that
// are seen.
func Watch(ctx context.Context, dst netip.Prefix, started func(), fn func(Entry)) error {
	bin, err := Command()
	if err != nil {
		return err
	}
	args := append([]string{"-E", "-o", "timestamp", "--buffer-size", strconv.Itoa(bufferSize)}, filterArgs(dst)...)
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("conntrack: %w", err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return fmt.Errorf("conntrack: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("conntrack: %s: %w", strings.Join(cmd.Args, " "), err)
	}
	notice := make(chan string, 1)
	errText := make(chan string, 1)
	go readStderr(stderr, notice, errText)
	stop := context.AfterFunc(ctx, func() { _ = cmd.Process.Signal(syscall.SIGTERM) })
	defer stop()
	go func() {
		t := time.NewTimer(startTimeout)
		defer t.Stop()
		select {
		case <-notice:
			if started != nil {
				started()
			}
		case <-t.C:
			_ = cmd.Process.Kill()
		case <-ctx.Done():
		}
	}()
	var perr error
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		e, ok, err := ParseLine(sc.Text())
		if err != nil {
			perr = err
			continue
		}
		if ok {
			fn(e)
		}
	}
	werr := cmd.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("conntrack: %s stopped: %v (%s) %v", strings.Join(cmd.Args, " "), werr, <-errText, perr)
}

// readStderr reports conntrack's buffer-size notice on notice, then the
// rest of stderr (its error, if it fails) on errText at EOF.
func readStderr(r io.Reader, notice chan<- string, errText chan<- string) {
	var rest []string
	sent := false
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		l := sc.Text()
		if !sent && strings.HasPrefix(l, "NOTICE:") {
			notice <- l
			sent = true
			continue
		}
		if len(rest) < 20 {
			rest = append(rest, l)
		}
	}
	errText <- strings.Join(rest, "; ")
}
