// Package podlog holds what a lab container writes to its standard output,
// as a container runtime keeps a container's log for `kubectl logs`: one
// Log per run of a container, lines with the time they were written, the
// oldest dropped past a bound, readable while it grows (follow) and after
// the container ended (previous).
package podlog

import (
	"fmt"
	"sync"
	"time"
)

// MaxLines and MaxBytes bound a Log: past either the oldest lines are
// dropped, as a runtime rotates a container's log (the kubelet's default
// containerLogMaxSize is 10 MiB; a lab container writes a few lines a
// second at most, a pinlab-agent a line a second of about 100 bytes plus
// about 110 a connection).
const (
	MaxLines = 10000
	MaxBytes = 10 << 20
)

// Line is one line of a container's output, without its newline.
type Line struct {
	At   time.Time
	Text string
}

// Log is one container run's output. The zero value is not usable; make
// one with New. Safe for concurrent use: one writer (the kubelet's pod
// worker) and any number of readers.
type Log struct {
	mu      sync.Mutex
	lines   []Line
	dropped int           // lines dropped from the front
	bytes   int           // of the lines kept
	closed  bool          // the container ended: no more lines
	grew    chan struct{} // closed and replaced when a line is added or the log closes
	now     func() time.Time
}

// New returns an empty, open Log.
func New() *Log { return &Log{grew: make(chan struct{}), now: time.Now} }

// Printf adds a line (a trailing newline is dropped; inner ones split it
// into several lines). A closed Log ignores it.
func (l *Log) Printf(format string, args ...any) {
	text := fmt.Sprintf(format, args...)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	at := l.now()
	start := 0
	for i := 0; i <= len(text); i++ {
		if i == len(text) || text[i] == '\n' {
			if i > start || i < len(text) {
				l.lines = append(l.lines, Line{At: at, Text: text[start:i]})
				l.bytes += i - start
			}
			start = i + 1
		}
	}
	n := 0 // lines to drop: past MaxLines, then past MaxBytes (the newest is kept)
	for ; n < len(l.lines)-1 && (len(l.lines)-n > MaxLines || l.bytes > MaxBytes); n++ {
		l.bytes -= len(l.lines[n].Text)
	}
	if n > 0 {
		l.lines = append(l.lines[:0:0], l.lines[n:]...)
		l.dropped += n
	}
	close(l.grew)
	l.grew = make(chan struct{})
}

// Close marks the container ended: readers that follow stop after the
// last line. Closing twice is a no-op.
func (l *Log) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		close(l.grew)
	}
}

// Read returns the lines from position from on (positions count every line
// ever written, dropped ones included; 0 is the first), the position after
// them, a channel closed when more arrive or the Log closes, and whether it
// is closed. A position before the oldest kept line reads from the oldest.
func (l *Log) Read(from int) (lines []Line, next int, grew <-chan struct{}, closed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := max(from-l.dropped, 0)
	if i > len(l.lines) {
		i = len(l.lines)
	}
	lines = append([]Line(nil), l.lines[i:]...)
	return lines, l.dropped + len(l.lines), l.grew, l.closed
}

// Start is the position of the oldest line kept.
func (l *Log) Start() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dropped
}
