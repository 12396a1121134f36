// Package conntrack reads the kernel's connection tracking table through
// Debian's conntrack tool (conntrack-tools 1.4): Parse reads the lines of
// `conntrack -L` and of `conntrack -E -o timestamp`, List runs the first,
// Watch the second, and Tracker turns the event stream into connections
// that open and close.
//
// A DNATed entry is what kube-proxy leaves behind: its original tuple is
// client -> ClusterIP:port, its reply tuple pod:targetPort -> client. The
// lab reads those to show, for the real kube-proxy, the table it keeps
// itself for its own proxy.
package conntrack

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Tuple is one direction of a tracked connection.
type Tuple struct {
	Src, Dst netip.AddrPort
}

// Entry is one line of conntrack's output.
type Entry struct {
	// Event is NEW, UPDATE or DESTROY for `conntrack -E`, "" for -L.
	Event string
	// At is the event's time with `-o timestamp`; zero otherwise.
	At time.Time
	// Proto is the layer 4 protocol's name: tcp, udp, icmp, ...
	Proto string
	// State is the TCP state (SYN_SENT, ESTABLISHED, TIME_WAIT, ...); ""
	// for other protocols and for DESTROY events.
	State string
	// Orig is the tuple as the initiator sent it, Reply as the responder
	// answers (after NAT).
	Orig, Reply Tuple
}

// DNAT returns where the connection was DNATed to (the reply's source)
// when that differs from the original destination.
func (e Entry) DNAT() (netip.AddrPort, bool) {
	return e.Reply.Src, e.Reply.Src.IsValid() && e.Reply.Src != e.Orig.Dst
}

// Parse reads every entry of conntrack's output, skipping lines that are
// not entries (its "N flow entries have been shown" summary, notices).
func Parse(r io.Reader) ([]Entry, error) {
	var out []Entry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		e, ok, err := ParseLine(sc.Text())
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, e)
		}
	}
	return out, sc.Err()
}

// ParseLine reads one line of `conntrack -L` or `conntrack -E [-o
// timestamp]`; ok is false for a line that is not an entry.
func ParseLine(line string) (e Entry, ok bool, err error) {
	f := strings.Fields(line)
	if len(f) > 0 && strings.HasPrefix(f[0], "[") && strings.Contains(f[0], ".") {
		ts, err := strconv.ParseFloat(strings.Trim(f[0], "[]"), 64)
		if err != nil {
			return e, false, fmt.Errorf("conntrack: timestamp %q: %w", f[0], err)
		}
		e.At, f = time.Unix(0, int64(ts*1e9)), f[1:]
	}
	if len(f) > 0 && strings.HasPrefix(f[0], "[") {
		e.Event, f = strings.Trim(f[0], "[]"), f[1:]
	}
	// proto, its number, then (except DESTROY) the timeout.
	if len(f) < 3 {
		return e, false, nil
	}
	if _, err := strconv.Atoi(f[1]); err != nil {
		return e, false, nil // not an entry
	}
	e.Proto, f = f[0], f[2:]
	var tuples [2]map[string]string
	n := -1
	for _, w := range f {
		k, v, isKV := strings.Cut(w, "=")
		switch {
		case isKV && k == "src":
			n++
			if n > 1 {
				return e, false, fmt.Errorf("conntrack: more than two tuples in %q", line)
			}
			tuples[n] = map[string]string{k: v}
		case isKV && n >= 0 && (k == "dst" || k == "sport" || k == "dport"):
			tuples[n][k] = v
		case !isKV && n < 0 && isState(w):
			e.State = w
		}
	}
	if n < 0 {
		return e, false, fmt.Errorf("conntrack: no tuple in %q", line)
	}
	if e.Orig, err = tuple(tuples[0]); err != nil {
		return e, false, fmt.Errorf("conntrack: %q: %w", line, err)
	}
	if n == 1 {
		if e.Reply, err = tuple(tuples[1]); err != nil {
			return e, false, fmt.Errorf("conntrack: %q: %w", line, err)
		}
	}
	return e, true, nil
}

// isState reports whether w is a TCP state name (upper case letters and
// underscores), not a number or a [FLAG].
func isState(w string) bool {
	for _, r := range w {
		if (r < 'A' || r > 'Z') && r != '_' {
			return false
		}
	}
	return w != ""
}

// tuple builds a Tuple from src, dst, sport and dport (ports absent for
// ICMP: zero).
func tuple(m map[string]string) (Tuple, error) {
	var t Tuple
	var ports [2]uint16
	for i, k := range []string{"sport", "dport"} {
		if v, ok := m[k]; ok {
			p, err := strconv.ParseUint(v, 10, 16)
			if err != nil {
				return t, fmt.Errorf("%s %q: %w", k, v, err)
			}
			ports[i] = uint16(p)
		}
	}
	src, err := netip.ParseAddr(m["src"])
	if err != nil {
		return t, err
	}
	dst, err := netip.ParseAddr(m["dst"])
	if err != nil {
		return t, err
	}
	return Tuple{Src: netip.AddrPortFrom(src, ports[0]), Dst: netip.AddrPortFrom(dst, ports[1])}, nil
}
