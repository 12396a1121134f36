package podshell

import (
	"bytes"
	"io"
	"sync"
)

// A terminal (kubectl exec -t) is raw on the user's side: the pod's side
// does what a pty's line discipline does, which here is the least a shell
// needs: echo what is typed, Enter (CR) ends a line, Backspace erases,
// Ctrl-C drops the line, Ctrl-D on an empty line ends input, and output
// LF becomes CR LF.

// crlf writes to w with every LF as CR LF.
type crlf struct {
	mu *sync.Mutex // shared by a terminal's writers
	w  io.Writer
}

func (c crlf) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.w.Write(bytes.ReplaceAll(b, []byte("\n"), []byte("\r\n"))); err != nil {
		return 0, err
	}
	return len(b), nil
}

// lineReader turns keys read from in into lines (LF-ended), echoing them
// to echo.
type lineReader struct {
	in   io.Reader
	echo io.Writer
	line []byte
	out  []byte // complete lines not read yet
	eof  bool
}

func (l *lineReader) Read(p []byte) (int, error) {
	buf := make([]byte, 256)
	for len(l.out) == 0 {
		if l.eof {
			return 0, io.EOF
		}
		n, err := l.in.Read(buf)
		for _, c := range buf[:n] {
			l.key(c)
		}
		if err != nil {
			if len(l.line) > 0 {
				l.out = append(l.out, append(l.line, '\n')...)
				l.line = nil
			}
			l.eof = true
		}
	}
	n := copy(p, l.out)
	l.out = l.out[n:]
	return n, nil
}

// key applies one typed byte.
func (l *lineReader) key(c byte) {
	switch c {
	case '\r', '\n':
		l.echo.Write([]byte("\n"))
		l.out = append(l.out, append(l.line, '\n')...)
		l.line = nil
	case 0x7f, 0x08: // Backspace
		if len(l.line) > 0 {
			l.line = l.line[:len(l.line)-1]
			l.echo.Write([]byte("\b \b"))
		}
	case 0x03: // Ctrl-C
		l.echo.Write([]byte("^C\n"))
		l.line = nil
		l.out = append(l.out, '\n')
	case 0x04: // Ctrl-D
		if len(l.line) == 0 {
			l.eof = true
		}
	default:
		if c >= 0x20 || c == '\t' {
			l.line = append(l.line, c)
			l.echo.Write([]byte{c})
		}
	}
}

// terminal gives s a terminal's behaviour.
func terminal(s Streams) Streams {
	mu := &sync.Mutex{}
	t := Streams{Out: crlf{mu, s.Out}, Err: crlf{mu, s.Out}, TTY: true} // a terminal has one output
	if s.In != nil {
		t.In = &lineReader{in: s.In, echo: t.Out}
	}
	return t
}
