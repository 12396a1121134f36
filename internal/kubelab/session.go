package kubelab

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pinlab/pinlab/internal/controlplane"
)

// A session is the state directory of one command that runs in the lab's
// network namespace (Reexec): the command inside makes every temporary
// file there (it is its TMPDIR: the control planes' state, with their
// keys, tokens and logs, CoreDNS's), so that the command outside, which
// outlives it, removes what it leaves (killed, it cannot), and the next
// command sweeps what a session whose processes all died left.
type session struct{ dir string }

const (
	// sessionPrefix names sessions in os.TempDir().
	sessionPrefix = "pinlab-lab-"
	// ownerFile holds "PID STARTTIME" of the command outside, which owns
	// the session while it runs.
	ownerFile = "owner"
	// staleLogs is how long the logs of a session whose processes died
	// are kept (they are what tells why): a sweep removes them after.
	staleLogs = 24 * time.Hour
)

// newSession makes a session directory (mode 0700) owned by this process.
func newSession() (*session, error) {
	dir, err := os.MkdirTemp("", sessionPrefix)
	if err != nil {
		return nil, fmt.Errorf("kubelab: the lab's state directory: %w", err)
	}
	start, err := startTime(os.Getpid())
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, ownerFile), []byte(fmt.Sprintf("%d %d\n", os.Getpid(), start)), 0o600)
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("kubelab: the lab's state directory: %w", err)
	}
	return &session{dir: dir}, nil
}

// env is the environment of the command inside: this one's, with TMPDIR
// the session.
func (s *session) env() []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "TMPDIR=") })
	return append(env, "TMPDIR="+s.dir)
}

// end removes what the command inside left in the session but its
// components' logs (which it names when it keeps them), and the session
// with them when there are none. It returns the session when logs are
// left.
func (s *session) end() string {
	if err := controlplane.RemoveState(s.dir, true); err != nil || !exists(s.dir) {
		return ""
	}
	return s.dir
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// sweep cleans the sessions of commands that are gone (killed with their
// command inside, or a machine that stopped): their keys and tokens at
// once, their logs after staleLogs. Sessions it cannot read are left
// alone.
func sweep() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), sessionPrefix+"*"))
	for _, dir := range dirs {
		if owned(dir) {
			continue
		}
		controlplane.RemoveState(dir, true)
		if newest, ok := newestFile(dir); ok && time.Since(newest) > staleLogs {
			os.RemoveAll(dir)
		}
	}
}

// owned reports whether dir's owner still runs (or the owner file cannot
// be read: then it is not ours to judge).
func owned(dir string) bool { return ownerRuns(filepath.Join(dir, ownerFile)) }

// ownerRuns reports whether the process an owner file ("PID STARTTIME")
// names still runs; true when the file cannot be read (not ours to judge),
// false when it is gone.
func ownerRuns(path string) bool {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false // swept before, logs left
	}
	if err != nil {
		return true
	}
	var pid, start int64
	if _, err := fmt.Sscanf(string(b), "%d %d", &pid, &start); err != nil {
		return true
	}
	now, err := startTime(int(pid))
	return err == nil && now == start // a pid reused by another process is not the owner
}

// newestFile is the modification time of the newest file in dir.
func newestFile(dir string) (time.Time, bool) {
	var newest time.Time
	found := false
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil && info.ModTime().After(newest) {
				newest, found = info.ModTime(), true
			}
		}
		return nil
	})
	return newest, found
}

// startTime is process pid's start time, in clock ticks since boot
// (/proc/PID/stat's 22nd field): with the pid, it names one process.
func startTime(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command (field 2) may hold spaces and parentheses: count from
	// its closing parenthesis, after which field 3 starts.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("kubelab: /proc/%d/stat: no command field", pid)
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 20 {
		return 0, fmt.Errorf("kubelab: /proc/%d/stat: %d fields", pid, len(fields)+2)
	}
	return strconv.ParseInt(fields[19], 10, 64)
}

// KilledError is Reexec's error when a signal killed the command inside
// the namespace: it could not stop the control planes' files' removal
// itself, so the command outside did (keeping the components' logs).
type KilledError struct {
	Verb   string
	Signal syscall.Signal
	// Logs is where the components' logs are kept ("" if none was left).
	Logs string
}

func (e *KilledError) Error() string {
	msg := fmt.Sprintf("%s --control-plane kubernetes: the lab's process in its network namespace was killed by signal %d (%v); its control planes stopped with it, and their keys, tokens and data are removed", e.Verb, int(e.Signal), e.Signal)
	if e.Logs != "" {
		msg += "; the components' logs are kept in " + e.Logs + " (remove it when done)"
	}
	return msg
}
