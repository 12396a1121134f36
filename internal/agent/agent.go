// Package agent reads which clients hold TCP connections to the serving
// ports of a network namespace, and how many bytes each has carried, as
// `ss -tin state established` shows them: through the kernel's sock_diag
// (NETLINK_SOCK_DIAG, INET_DIAG with tcp_info), or from /proc/net/tcp and
// tcp6, which have no byte counts. Both list the TCP sockets of the
// caller's own network namespace to any user, so reading needs no
// privileges.
//
// cmd/pinlab-agent prints a Reading a second as a JSON line; pinlab
// diagnose starts it as an ephemeral container in a server pod (whose
// network namespace it shares) and reads the lines through the API
// server's pods/log. The package links neither client-go nor gRPC.
package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// FormatVersion is Reading.V: it changes when a field changes meaning,
// and readers skip lines of another version.
const FormatVersion = 1

// Reading.Source values.
const (
	sourceSockDiag = "sock_diag"
	sourceProc     = "proc"
)

// The kernel's TCP states, as sock_diag and /proc/net/tcp give them
// (include/net/tcp_states.h).
const (
	stateEstablished = 1
	stateListen      = 10
)

// Reading is one line of the agent's output (JSON).
type Reading struct {
	V      int       `json:"v"`      // format version, 1
	At     time.Time `json:"at"`     // when read, UTC (RFC 3339 with ns)
	Source string    `json:"source"` // "sock_diag" or "proc"
	// Bytes says whether RX and TX are set: the sockets were read through
	// sock_diag with tcp_info. From /proc they are 0 (and left out).
	Bytes bool  `json:"bytes"`
	Ports []int `json:"ports,omitempty"` // local ports filtered on; empty: every listening port
	// Conns are the server side of the clients' connections, sorted by
	// Remote (as addresses: IP, then port) then ID; [] (never null) when
	// there are none.
	Conns []Conn `json:"conns"`
	Err   string `json:"error,omitempty"` // set when the reading failed (Conns then empty)
}

// Conn is one ESTABLISHED connection whose local port is a serving port.
type Conn struct {
	// ID is the socket's sock_diag cookie as 16 hex digits (the number
	// `ss -e` prints as sk:), unique while the kernel runs; from /proc it
	// is "inode:N", and "inode:0" for every connection the server has not
	// accepted yet (it has no file), so not unique.
	ID     string `json:"id"`
	Local  string `json:"local"`        // "IP:port" ("[IP]:port" for IPv6); IPv4-mapped IPv6 unmapped to IPv4
	Remote string `json:"remote"`       // as Local: the client's address as this namespace sees it
	RX     int64  `json:"rx,omitempty"` // bytes received from the client (tcpi_bytes_received)
	TX     int64  `json:"tx,omitempty"` // bytes sent to the client and acknowledged (tcpi_bytes_acked)
}

// Options says what Read and Run read. The zero value reads every
// listening port's connections through sock_diag once a second.
type Options struct {
	// Ports are the serving ports (1-65535). Empty: every port with a
	// LISTEN socket on the connection's local address or on the
	// unspecified one (0.0.0.0, ::) in the namespace.
	Ports []int
	// Interval is Run's time between readings; zero or negative means 1s.
	Interval time.Duration
	// Count is how many readings Run prints; zero or negative means until
	// ctx ends.
	Count int
	// Proc reads /proc/net/tcp and tcp6 (no bytes) instead of sock_diag.
	// Without it, a reading falls back to /proc when sock_diag fails (not
	// Linux, a sandbox without it) and says so in Source.
	Proc bool
	// ProcRoot is where proc is mounted; "" means "/proc". The tables are
	// read from <ProcRoot>/thread-self/net, the calling thread's network
	// namespace (the one Do may have entered; /proc/net is the process's
	// first thread's), or from <ProcRoot>/net when there is no thread-self
	// (Linux before 3.17, test data).
	ProcRoot string
	// Local, if valid, keeps only the connections whose local address is
	// it: a pod's, where several pods share one network namespace (the
	// lab's embedded tier). Zero keeps every local address.
	Local netip.Addr
	// Do, if not nil, runs each reading: it is given a func doing the read
	// and returns its error (or its own), e.g. inside another network
	// namespace with netns. It is called on the goroutine of Read or Run,
	// once a reading. nil runs the read on the calling goroutine.
	Do func(func() error) error
}

// sockDiag lists the TCP sockets of the calling thread's network
// namespace through sock_diag; tests replace it to fake the kernel's
// refusal.
var sockDiag = readSockDiag

// socket is one TCP socket of either source.
type socket struct {
	id            string
	local, remote netip.AddrPort // unmapped
	state         uint8
	rx, tx        int64
	bytes         bool // rx and tx were read (tcp_info)
}

// Read takes one reading now, inside o.Do when set. A reading that failed
// is returned with Err set as well as with the error, ready to print.
func Read(o Options) (Reading, error) {
	r := Reading{V: FormatVersion, Ports: o.Ports, Conns: []Conn{}}
	socks, err := read(o, &r)
	if r.At.IsZero() {
		r.At = time.Now().UTC() // Do failed before reading
	}
	if err != nil {
		r.Err = err.Error()
		return r, err
	}
	r.Conns, r.Bytes = serverConns(socks, o.Ports, o.Local)
	r.Bytes = r.Bytes && r.Source == sourceSockDiag
	return r, nil
}

// read lists the namespace's TCP sockets, setting r.At and r.Source.
func read(o Options, r *Reading) ([]socket, error) {
	for _, p := range o.Ports {
		if p < 1 || p > 65535 {
			return nil, fmt.Errorf("agent: port %d: want 1-65535", p)
		}
	}
	do := o.Do
	if do == nil {
		do = func(f func() error) error { return f() }
	}
	var socks []socket
	err := do(func() error {
		r.At = time.Now().UTC()
		var err error
		socks, r.Source, err = readSockets(o)
		return err
	})
	return socks, err
}

// readSockets reads through sock_diag, or /proc when asked or when
// sock_diag fails, and says which it used.
func readSockets(o Options) ([]socket, string, error) {
	if o.Proc {
		socks, err := readProc(o.ProcRoot)
		return socks, sourceProc, err
	}
	socks, err := sockDiag()
	if err == nil {
		return socks, sourceSockDiag, nil
	}
	socks, perr := readProc(o.ProcRoot)
	if perr != nil {
		return nil, sourceProc, fmt.Errorf("%w; %w", err, perr)
	}
	return socks, sourceProc, nil
}

// serverConns returns the ESTABLISHED sockets on a serving local address
// (local's, when valid) as sorted Conns, and whether all of them have bytes.
func serverConns(socks []socket, ports []int, local netip.Addr) ([]Conn, bool) {
	serving := servingFunc(socks, ports)
	var sel []socket
	for _, s := range socks {
		if s.state == stateEstablished && serving(s.local) && (!local.IsValid() || s.local.Addr() == local.Unmap()) {
			sel = append(sel, s)
		}
	}
	slices.SortFunc(sel, func(a, b socket) int {
		if c := a.remote.Compare(b.remote); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	conns := make([]Conn, 0, len(sel))
	bytes := true
	for _, s := range sel {
		bytes = bytes && s.bytes
		conns = append(conns, Conn{ID: s.id, Local: s.local.String(), Remote: s.remote.String(), RX: s.rx, TX: s.tx})
	}
	// A /proc table read in several chunks may list a socket twice.
	return slices.Compact(conns), bytes
}

// servingFunc says whether a local address serves: its port is one of
// ports or, with none, a LISTEN socket is bound to it or to its port on
// an unspecified address.
func servingFunc(socks []socket, ports []int) func(netip.AddrPort) bool {
	if len(ports) > 0 {
		return func(a netip.AddrPort) bool { return slices.Contains(ports, int(a.Port())) }
	}
	listen := map[netip.AddrPort]bool{}
	for _, s := range socks {
		if s.state == stateListen {
			listen[s.local] = true
		}
	}
	return func(a netip.AddrPort) bool {
		return listen[a] || listen[netip.AddrPortFrom(netip.IPv4Unspecified(), a.Port())] ||
			listen[netip.AddrPortFrom(netip.IPv6Unspecified(), a.Port())]
	}
}

// unmap turns an IPv4-mapped IPv6 address (a dual-stack socket's IPv4
// peer) into the IPv4 address, and drops any zone.
func unmap(a netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(a.Addr().Unmap().WithZone(""), a.Port())
}

// Run writes a reading to w as a JSON line at once and then every
// o.Interval, until o.Count readings are written (nil) or ctx ends (nil).
// A failed reading is written as a line with Err set, and Run goes on; a
// write error ends it, returned. Each line is one Write. Run blocks and
// starts no goroutine.
func Run(ctx context.Context, w io.Writer, o Options) error {
	interval := o.Interval
	if interval <= 0 {
		interval = time.Second
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	enc := json.NewEncoder(w)
	for n := 0; o.Count <= 0 || n < o.Count; n++ {
		if n > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		r, _ := Read(o)
		if err := enc.Encode(r); err != nil {
			return fmt.Errorf("agent: writing a reading: %w", err)
		}
	}
	return nil
}
