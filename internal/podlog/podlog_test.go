package podlog

import (
	"strings"
	"testing"
	"time"
)

// TestLog: lines split on newlines, positions survive dropping, a reader
// is woken by a new line and by Close, and a closed log takes no more.
func TestLog(t *testing.T) {
	l := New()
	clock := time.Unix(100, 0)
	l.now = func() time.Time { return clock }
	l.Printf("started on %s", "10.0.0.1:8471")
	l.Printf("two\nlines\n")
	lines, next, grew, closed := l.Read(0)
	if len(lines) != 3 || next != 3 || closed || lines[0].Text != "started on 10.0.0.1:8471" || lines[2].Text != "lines" || !lines[1].At.Equal(clock) {
		t.Fatalf("Read(0) = %q, %d, closed %v", lines, next, closed)
	}
	select {
	case <-grew:
		t.Fatal("woken before a new line")
	default:
	}
	l.Printf("third")
	select {
	case <-grew:
	case <-time.After(time.Second):
		t.Fatal("not woken by a new line")
	}
	if lines, next, _, _ := l.Read(3); len(lines) != 1 || lines[0].Text != "third" || next != 4 {
		t.Fatalf("Read(3) = %q, %d", lines, next)
	}
	_, _, grew, _ = l.Read(4)
	l.Close()
	l.Close()
	select {
	case <-grew:
	case <-time.After(time.Second):
		t.Fatal("not woken by Close")
	}
	l.Printf("after close")
	if lines, next, _, closed := l.Read(4); len(lines) != 0 || next != 4 || !closed {
		t.Fatalf("after Close: %q, %d, closed %v", lines, next, closed)
	}
}

// TestDrop: past MaxLines the oldest go; positions keep counting.
func TestDrop(t *testing.T) {
	l := New()
	for i := range MaxLines + 5 {
		l.Printf("%d", i)
	}
	if l.Start() != 5 {
		t.Errorf("Start = %d, want 5", l.Start())
	}
	lines, next, _, _ := l.Read(0)
	if len(lines) != MaxLines || lines[0].Text != "5" || next != MaxLines+5 {
		t.Errorf("Read(0): %d lines from %q, next %d", len(lines), lines[0].Text, next)
	}
	if lines, _, _, _ := l.Read(MaxLines + 4); len(lines) != 1 || lines[0].Text != "10004" {
		t.Errorf("Read(last) = %q", lines)
	}
}

// TestDropBytes: past MaxBytes the oldest lines go too (an agent's long
// lines), the newest always kept.
func TestDropBytes(t *testing.T) {
	l := New()
	line := strings.Repeat("x", 1<<20) // 1 MiB
	for range 12 {
		l.Printf("%s", line)
	}
	lines, next, _, _ := l.Read(0)
	if len(lines) != 10 || next != 12 || l.Start() != 2 {
		t.Errorf("%d lines kept of 12 (start %d, next %d), want the newest 10 (10 MiB)", len(lines), l.Start(), next)
	}
	l.Printf("%s", strings.Repeat("y", 11<<20))
	if lines, _, _, _ := l.Read(0); len(lines) != 1 || lines[0].Text[0] != 'y' {
		t.Errorf("after a line over MaxBytes: %d lines kept, want only it", len(lines))
	}
}
