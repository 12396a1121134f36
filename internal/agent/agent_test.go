package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The connections of testdata/proc: a pod 10.244.1.23 (fd00:10:244:1::17)
// serving HTTP on 0.0.0.0:8080, gRPC on [::]:50051 (dual stack), metrics
// on 127.0.0.1:9090 and pprof on [::1]:6060, with its own outbound
// connections (to 10.96.0.1:443, [fd00:10:96::1]:443, and the metrics
// scrape's client side 127.0.0.1:40000) and TIME_WAIT sockets left out.
var (
	http1   = Conn{ID: "inode:40010", Local: "10.244.1.23:8080", Remote: "10.244.2.171:43210"}
	http2   = Conn{ID: "inode:40011", Local: "10.244.1.23:8080", Remote: "10.244.3.5:51000"}
	http3   = Conn{ID: "inode:0", Local: "10.244.1.23:8080", Remote: "10.244.4.9:33333"} // not accepted yet
	grpc4   = Conn{ID: "inode:50010", Local: "10.244.1.23:50051", Remote: "10.244.2.171:40000"}
	grpc6   = Conn{ID: "inode:50011", Local: "[fd00:10:244:1::17]:50051", Remote: "[fd00:10:244:2::ab]:41000"}
	metrics = Conn{ID: "inode:40012", Local: "127.0.0.1:9090", Remote: "127.0.0.1:40000"}
	pprof   = Conn{ID: "inode:50013", Local: "[::1]:6060", Remote: "[::1]:52000"}
)

func TestReadTestdata(t *testing.T) {
	littleEndian(t)
	refused := func() ([]socket, error) { return nil, errors.New("agent: sock_diag: operation not permitted") }
	var entered int
	tests := []struct {
		name     string
		o        Options
		sockDiag func() ([]socket, error) // nil: the real one (not reached)
		want     Reading                  // At left out
		wantErr  string
		wantDo   int // calls of Do
	}{
		{
			name: "every listening port",
			o:    Options{Proc: true, ProcRoot: "testdata/proc"},
			want: Reading{V: 1, Source: "proc", Conns: []Conn{grpc4, http1, http2, http3, metrics, pprof, grpc6}},
		},
		{
			name: "one port",
			o:    Options{Proc: true, ProcRoot: "testdata/proc", Ports: []int{8080}},
			want: Reading{V: 1, Source: "proc", Ports: []int{8080}, Conns: []Conn{http1, http2, http3}},
		},
		{
			name: "a dual-stack port's IPv4 and IPv6 clients",
			o:    Options{Proc: true, ProcRoot: "testdata/proc", Ports: []int{50051}},
			want: Reading{V: 1, Source: "proc", Ports: []int{50051}, Conns: []Conn{grpc4, grpc6}},
		},
		{
			name: "a port nobody serves",
			o:    Options{Proc: true, ProcRoot: "testdata/proc", Ports: []int{9999}},
			want: Reading{V: 1, Source: "proc", Ports: []int{9999}, Conns: []Conn{}},
		},
		{
			name:     "sock_diag refused: /proc instead",
			o:        Options{ProcRoot: "testdata/proc", Ports: []int{6060}},
			sockDiag: refused,
			want:     Reading{V: 1, Source: "proc", Ports: []int{6060}, Conns: []Conn{pprof}},
		},
		{
			name: "sock_diag with bytes",
			o:    Options{ProcRoot: "testdata/nowhere", Ports: []int{8080}},
			sockDiag: func() ([]socket, error) {
				return []socket{
					{id: "0000000000000002", local: ap("10.0.0.1:8080"), remote: ap("10.0.0.9:1000"), state: stateEstablished, rx: 10, tx: 20, bytes: true},
					{id: "0000000000000001", local: ap("10.0.0.1:8080"), remote: ap("10.0.0.10:1000"), state: stateEstablished, rx: 30, tx: 40, bytes: true},
					{id: "0000000000000003", local: ap("10.0.0.1:8080"), remote: ap("10.0.0.9:999"), state: 6, bytes: true},
				}, nil
			},
			want: Reading{V: 1, Source: "sock_diag", Bytes: true, Ports: []int{8080}, Conns: []Conn{
				{ID: "0000000000000002", Local: "10.0.0.1:8080", Remote: "10.0.0.9:1000", RX: 10, TX: 20},
				{ID: "0000000000000001", Local: "10.0.0.1:8080", Remote: "10.0.0.10:1000", RX: 30, TX: 40},
			}},
		},
		{
			name:     "both refused",
			o:        Options{ProcRoot: "testdata/nowhere"},
			sockDiag: refused,
			want:     Reading{V: 1, Source: "proc", Conns: []Conn{}},
			wantErr:  "agent: sock_diag: operation not permitted; agent: open testdata/nowhere/net/tcp: no such file or directory",
		},
		{
			name:    "a port out of range",
			o:       Options{Proc: true, ProcRoot: "testdata/proc", Ports: []int{70000}},
			want:    Reading{V: 1, Ports: []int{70000}, Conns: []Conn{}},
			wantErr: "agent: port 70000: want 1-65535",
		},
		{
			name: "inside Do",
			o: Options{Proc: true, ProcRoot: "testdata/proc", Ports: []int{9090}, Do: func(f func() error) error {
				entered++
				return f()
			}},
			want:   Reading{V: 1, Source: "proc", Ports: []int{9090}, Conns: []Conn{metrics}},
			wantDo: 1,
		},
		{
			name: "Do fails",
			o: Options{Proc: true, ProcRoot: "testdata/proc", Do: func(func() error) error {
				entered++
				return errors.New("netns: no such namespace")
			}},
			want:    Reading{V: 1, Conns: []Conn{}},
			wantErr: "netns: no such namespace",
			wantDo:  1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.sockDiag != nil {
				old := sockDiag
				sockDiag = tc.sockDiag
				t.Cleanup(func() { sockDiag = old })
			}
			entered = 0
			before := time.Now()
			got, err := Read(tc.o)
			if tc.wantErr != "" {
				tc.want.Err = tc.wantErr
				if err == nil || err.Error() != tc.wantErr {
					t.Errorf("Read: error %v, want %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Errorf("Read: %v", err)
			}
			if got.At.Before(before) || got.At.After(time.Now()) || got.At.Location() != time.UTC {
				t.Errorf("Read: At %v, want a UTC time within the call", got.At)
			}
			got.At = time.Time{}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Read (-want +got):\n%s", diff)
			}
			if entered != tc.wantDo {
				t.Errorf("Do called %d times, want %d", entered, tc.wantDo)
			}
		})
	}
}

// failWriter fails every write.
type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

// cancelWriter cancels a context after n lines.
type cancelWriter struct {
	bytes.Buffer
	n      int
	cancel context.CancelFunc
}

func (w *cancelWriter) Write(p []byte) (int, error) {
	if w.n--; w.n == 0 {
		w.cancel()
	}
	return w.Buffer.Write(p)
}

func TestRun(t *testing.T) {
	littleEndian(t)
	ok := Options{Interval: 10 * time.Millisecond, Proc: true, ProcRoot: "testdata/proc", Ports: []int{9090}}
	failing := Options{Interval: 10 * time.Millisecond, Proc: true, ProcRoot: "testdata/nowhere"}
	tests := []struct {
		name        string
		o           Options
		count       int
		cancelAfter int  // lines; 0: never, -1: before Run
		fail        bool // every write fails
		wantLines   int
		wantErr     string
		wantConns   []Conn
		wantReadErr bool
	}{
		{name: "count 3", o: ok, count: 3, wantLines: 3, wantConns: []Conn{metrics}},
		{name: "until ctx ends", o: ok, cancelAfter: 2, wantLines: 2, wantConns: []Conn{metrics}},
		{name: "ctx ended before", o: ok, count: 1, cancelAfter: -1, wantLines: 0},
		{name: "failed readings go on", o: failing, count: 2, wantLines: 2, wantConns: []Conn{}, wantReadErr: true},
		{name: "a write error ends it", o: ok, fail: true, wantErr: "agent: writing a reading: broken pipe"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			w := &cancelWriter{n: tc.cancelAfter, cancel: cancel}
			if tc.cancelAfter < 0 {
				cancel()
			}
			o := tc.o
			o.Count = tc.count
			var err error
			if tc.fail {
				err = Run(ctx, failWriter{}, o)
			} else {
				err = Run(ctx, w, o)
			}
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("Run: %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if tc.cancelAfter == 0 && ctx.Err() != nil {
				t.Fatalf("Run returned after its test's timeout")
			}
			checkLines(t, w.String(), tc.wantLines, tc.wantConns, tc.wantReadErr)
		})
	}
}

// checkLines checks that out is want JSON lines of readings with conns,
// failed or not, in time order.
func checkLines(t *testing.T, out string, want int, conns []Conn, failed bool) {
	t.Helper()
	var last time.Time
	n := 0
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		n++
		if !strings.Contains(sc.Text(), `"conns":[`) {
			t.Errorf("line %d has no conns list: %s", n, sc.Text())
		}
		var r Reading
		dec := json.NewDecoder(strings.NewReader(sc.Text()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("line %d: %v: %s", n, err, sc.Text())
		}
		if r.V != 1 || r.At.Before(last) || (r.Err != "") != failed {
			t.Errorf("line %d: v %d, at %v after %v, error %q (want one: %v)", n, r.V, r.At, last, r.Err, failed)
		}
		last = r.At
		if diff := cmp.Diff(conns, r.Conns); diff != "" {
			t.Errorf("line %d conns (-want +got):\n%s", n, diff)
		}
	}
	if n != want {
		t.Errorf("%d lines, want %d:\n%s", n, want, out)
	}
}
