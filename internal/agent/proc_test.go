package agent

import (
	"encoding/binary"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// littleEndian makes the test data's byte order (x86, arm64) the host's
// for the test.
func littleEndian(t *testing.T) {
	t.Helper()
	old := hostOrder
	hostOrder = binary.LittleEndian
	t.Cleanup(func() { hostOrder = old })
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func TestParseProcNetTCP(t *testing.T) {
	littleEndian(t)
	tests := []struct {
		name string
		file string
		v6   bool
		want []ProcSocket
	}{
		{name: "tcp", file: "testdata/proc/net/tcp", want: []ProcSocket{
			{Local: ap("0.0.0.0:8080"), Remote: ap("0.0.0.0:0"), State: 0x0a, Inode: 40001},
			{Local: ap("127.0.0.1:9090"), Remote: ap("0.0.0.0:0"), State: 0x0a, Inode: 40002},
			{Local: ap("10.244.1.23:8080"), Remote: ap("10.244.2.171:43210"), State: 1, Inode: 40010},
			{Local: ap("10.244.1.23:8080"), Remote: ap("10.244.3.5:51000"), State: 1, Inode: 40011},
			{Local: ap("127.0.0.1:9090"), Remote: ap("127.0.0.1:40000"), State: 1, Inode: 40012},
			{Local: ap("127.0.0.1:40000"), Remote: ap("127.0.0.1:9090"), State: 1, Inode: 40013},
			{Local: ap("10.244.1.23:45678"), Remote: ap("10.96.0.1:443"), State: 1, Inode: 40014},
			{Local: ap("10.244.1.23:8080"), Remote: ap("10.244.2.171:43000"), State: 6, Inode: 0},
			{Local: ap("10.244.1.23:8080"), Remote: ap("10.244.4.9:33333"), State: 1, Inode: 0},
		}},
		{name: "tcp6", file: "testdata/proc/net/tcp6", v6: true, want: []ProcSocket{
			{Local: ap("[::]:50051"), Remote: ap("[::]:0"), State: 0x0a, Inode: 50001},
			{Local: ap("[::1]:6060"), Remote: ap("[::]:0"), State: 0x0a, Inode: 50002},
			{Local: ap("[::ffff:10.244.1.23]:50051"), Remote: ap("[::ffff:10.244.2.171]:40000"), State: 1, Inode: 50010},
			{Local: ap("[fd00:10:244:1::17]:50051"), Remote: ap("[fd00:10:244:2::ab]:41000"), State: 1, Inode: 50011},
			{Local: ap("[fd00:10:244:1::17]:39000"), Remote: ap("[fd00:10:96::1]:443"), State: 1, Inode: 50012},
			{Local: ap("[::1]:6060"), Remote: ap("[::1]:52000"), State: 1, Inode: 50013},
			{Local: ap("[::ffff:10.244.1.23]:50051"), Remote: ap("[::ffff:10.244.2.171]:39920"), State: 6, Inode: 0},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := os.Open(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got, err := ParseProcNetTCP(f, tc.v6)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
				t.Errorf("ParseProcNetTCP(%s) (-want +got):\n%s", tc.file, diff)
			}
		})
	}
}

func TestParseProcNetTCPErrors(t *testing.T) {
	littleEndian(t)
	const header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
	tests := []struct {
		name  string
		table string
		v6    bool
		want  string // in the error
	}{
		{name: "too few fields", table: header + "   0: 0100007F:1F90 00000000:0000 0A\n", want: "line 2: 4 fields"},
		{name: "IPv6 address in tcp", table: header +
			"   0: 00000000000000000000000001000000:17AC 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 1 1\n",
			want: "local address"},
		{name: "IPv4 address in tcp6", v6: true, table: header +
			"   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 1 1\n", want: "want 32 hex digits"},
		{name: "bad hex", table: header + "   0: 0100007G:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 1 1\n", want: "invalid syntax"},
		{name: "no port", table: header + "   0: 0100007F 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 1 1\n", want: "a hex port"},
		{name: "bad state", table: header + "   0: 0100007F:1F90 00000000:0000 XY 00000000:00000000 00:00000000 00000000 0 0 1 1\n", want: `state "XY"`},
		{name: "bad inode", table: header + "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 -1 1\n", want: `inode "-1"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseProcNetTCP(strings.NewReader(tc.table), tc.v6)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "agent: ") {
				t.Errorf("ParseProcNetTCP = %v, %v; want an error with %q", got, err, tc.want)
			}
		})
	}
}

// TestParseProcNetTables parses both test tables as one stream, the way
// `cat /proc/net/tcp /proc/net/tcp6` prints them, in either byte order
// given: little-endian gives what ParseProcNetTCP gives each table,
// big-endian (s390x) the words' bytes reversed.
func TestParseProcNetTables(t *testing.T) {
	littleEndian(t)
	var all []byte
	var want []ProcSocket
	for _, tc := range []struct {
		file string
		v6   bool
	}{{"testdata/proc/net/tcp", false}, {"testdata/proc/net/tcp6", true}} {
		b, err := os.ReadFile(tc.file)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
		ps, err := ParseProcNetTCP(strings.NewReader(string(b)), tc.v6)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, ps...)
	}
	eq := cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })
	got, err := ParseProcNetTables(strings.NewReader(string(all)), binary.LittleEndian)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, eq); diff != "" {
		t.Errorf("little-endian (-want +got):\n%s", diff)
	}
	got, err = ParseProcNetTables(strings.NewReader(string(all)), binary.BigEndian)
	if err != nil {
		t.Fatal(err)
	}
	if g, w := got[2].Local, ap("23.1.244.10:8080"); g != w {
		t.Errorf("big-endian: third row's local address %v, want %v", g, w)
	}
	if _, err := ParseProcNetTables(strings.NewReader("  sl  local_address\n   0: 0100007F\n"), binary.LittleEndian); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("a row of 2 fields: error %v, want one naming line 2", err)
	}
}
