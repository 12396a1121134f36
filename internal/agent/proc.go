package agent

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ProcSocket is one row of /proc/net/tcp or tcp6.
type ProcSocket struct {
	// Local and Remote are as the kernel holds them: a dual-stack socket's
	// IPv4 peer stays IPv4-mapped (::ffff:a.b.c.d) in tcp6.
	Local, Remote netip.AddrPort
	// State is the kernel's TCP state: 1 ESTABLISHED, 6 TIME_WAIT, 10
	// (0A) LISTEN (include/net/tcp_states.h).
	State uint8
	// Inode is the socket file's inode; 0 for a socket without a file
	// (TIME_WAIT, or a connection not yet accepted).
	Inode uint64
}

// hostOrder is the byte order of the 32-bit words /proc/net/tcp prints:
// the kernel prints each __be32 of an address as a host integer (%08X),
// so on little-endian machines 127.0.0.1 reads 0100007F. Tests set it to
// their data's order.
var hostOrder binary.ByteOrder = binary.NativeEndian

// ParseProcNetTCP parses one /proc/net/tcp table (v6 false) or tcp6 table
// (v6 true), as the kernel's tcp4_seq_show and tcp6_seq_show print them:
// a header line, then one line a socket, fields separated by spaces, the
// addresses in hex (see hostOrder), the state in hex, the inode in the
// tenth field, in decimal.
func ParseProcNetTCP(r io.Reader, v6 bool) ([]ProcSocket, error) {
	ps, err := parseProcNetTCP(r, v6)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	return ps, nil
}

func parseProcNetTCP(r io.Reader, v6 bool) ([]ProcSocket, error) {
	return parseTables(r, hostOrder, func(string) bool { return v6 })
}

// ParseProcNetTables parses what `cat /proc/net/tcp /proc/net/tcp6`
// prints on another machine: the tables one after the other, each with
// its header line, a row's family told by its local address (8 hex digits
// IPv4, 32 IPv6), the address words in order, the byte order of the
// machine that printed them (binary.LittleEndian on amd64, arm64 and
// ppc64le; binary.BigEndian on s390x).
func ParseProcNetTables(r io.Reader, order binary.ByteOrder) ([]ProcSocket, error) {
	ps, err := parseTables(r, order, func(local string) bool {
		host, _, _ := strings.Cut(local, ":")
		return len(host) == 32
	})
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	return ps, nil
}

// parseTables parses /proc/net/tcp rows, v6 saying from a row's local
// address field whether it is IPv6.
func parseTables(r io.Reader, order binary.ByteOrder, v6 func(local string) bool) ([]ProcSocket, error) {
	var out []ProcSocket
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] == "sl" {
			continue
		}
		if len(f) < 2 {
			return nil, fmt.Errorf("line %d: %d fields, want at least 10", n, len(f))
		}
		s, err := parseProcLine(f, v6(f[1]), order)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

// parseProcLine parses one socket's fields.
func parseProcLine(f []string, v6 bool, order binary.ByteOrder) (ProcSocket, error) {
	if len(f) < 10 {
		return ProcSocket{}, fmt.Errorf("%d fields, want at least 10", len(f))
	}
	local, err := parseHexAddrPort(f[1], v6, order)
	if err != nil {
		return ProcSocket{}, fmt.Errorf("local address: %w", err)
	}
	remote, err := parseHexAddrPort(f[2], v6, order)
	if err != nil {
		return ProcSocket{}, fmt.Errorf("remote address: %w", err)
	}
	state, err := strconv.ParseUint(f[3], 16, 8)
	if err != nil {
		return ProcSocket{}, fmt.Errorf("state %q: want 2 hex digits", f[3])
	}
	inode, err := strconv.ParseUint(f[9], 10, 64)
	if err != nil {
		return ProcSocket{}, fmt.Errorf("inode %q: want a decimal number", f[9])
	}
	return ProcSocket{Local: local, Remote: remote, State: uint8(state), Inode: inode}, nil
}

// parseHexAddrPort parses "0100007F:1F90" (IPv4: one 32-bit word) or the
// same with four words (IPv6).
func parseHexAddrPort(s string, v6 bool, order binary.ByteOrder) (netip.AddrPort, error) {
	host, port, ok := strings.Cut(s, ":")
	words := 1
	if v6 {
		words = 4
	}
	if !ok || len(host) != 8*words {
		return netip.AddrPort{}, fmt.Errorf("%q: want %d hex digits, a colon and a hex port", s, 8*words)
	}
	var b [16]byte
	for i := range words {
		w, err := strconv.ParseUint(host[8*i:8*i+8], 16, 32)
		if err != nil {
			return netip.AddrPort{}, fmt.Errorf("%q: %w", s, err)
		}
		order.PutUint32(b[4*i:], uint32(w))
	}
	p, err := strconv.ParseUint(port, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%q: port: %w", s, err)
	}
	a := netip.AddrFrom16(b)
	if !v6 {
		a = netip.AddrFrom4([4]byte(b[:4]))
	}
	return netip.AddrPortFrom(a, uint16(p)), nil
}

// readProc reads the tcp and tcp6 tables under root (see
// Options.ProcRoot). A missing tcp6 is an empty one: the kernel has IPv6
// off.
func readProc(root string) ([]socket, error) {
	dir := procNetDir(root)
	var out []socket
	for _, t := range []struct {
		name string
		v6   bool
	}{{"tcp", false}, {"tcp6", true}} {
		ps, err := readProcTable(filepath.Join(dir, t.name), t.v6)
		if t.v6 && errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, p := range ps {
			out = append(out, socket{id: "inode:" + strconv.FormatUint(p.Inode, 10),
				local: unmap(p.Local), remote: unmap(p.Remote), state: p.State})
		}
	}
	return out, nil
}

// procNetDir is the directory of the calling thread's tables under root.
func procNetDir(root string) string {
	if root == "" {
		root = "/proc"
	}
	if fi, err := os.Stat(filepath.Join(root, "thread-self", "net")); err == nil && fi.IsDir() {
		return filepath.Join(root, "thread-self", "net")
	}
	return filepath.Join(root, "net")
}

func readProcTable(path string, v6 bool) ([]ProcSocket, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	defer f.Close()
	ps, err := parseProcNetTCP(f, v6)
	if err != nil {
		return nil, fmt.Errorf("agent: %s: %w", path, err)
	}
	return ps, nil
}
