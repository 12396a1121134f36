package l7proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/pinlab/pinlab/internal/loopback"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
)

// refuser is a raw HTTP/2 server that processes no stream: it answers each
// with RST_STREAM REFUSED_STREAM, or with a GOAWAY whose last stream is 0
// and a close, the two ways RFC 9113 lets a server say a request was not
// processed.
type refuser struct {
	goaway  bool
	streams atomic.Int64 // streams it saw
	mu      sync.Mutex
	conns   []net.Conn
	wg      sync.WaitGroup
}

// startRefuser starts a refuser on ip with a free port; cleanup stops it.
func (l *lab) startRefuser(name, ip string, goaway bool) (*backend, *refuser) {
	l.t.Helper()
	ln, err := loopback.Listen(l.ctx(), ip+":0")
	if err != nil {
		l.t.Fatal(err)
	}
	r := &refuser{goaway: goaway}
	r.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.mu.Lock()
			r.conns = append(r.conns, c)
			r.mu.Unlock()
			r.wg.Go(func() { r.serve(c) })
		}
	})
	l.t.Cleanup(func() {
		ln.Close()
		r.mu.Lock()
		for _, c := range r.conns {
			c.Close()
		}
		r.mu.Unlock()
		r.wg.Wait()
	})
	return &backend{name: name, addr: loopback.AddrPort(ln.Addr())}, r
}

func (r *refuser) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	if _, err := io.ReadFull(br, make([]byte, len(http2.ClientPreface))); err != nil {
		return
	}
	fr := http2.NewFramer(c, br)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.WriteSettings()
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			r.streams.Add(1)
			if r.goaway {
				fr.WriteGoAway(0, http2.ErrCodeNo, nil)
				return
			}
			fr.WriteRSTStream(f.StreamID, http2.ErrCodeRefusedStream)
		}
	}
}

// TestRefusedStreamGoesElsewhere: calls a pod refuses unprocessed
// (REFUSED_STREAM, or a GOAWAY before their stream) are sent again to
// another pod, body and all, and none fails. least_request favours the
// refuser (it never has an active request), so many calls are refused
// first.
func TestRefusedStreamGoesElsewhere(t *testing.T) {
	tests := []struct {
		name   string
		goaway bool
	}{
		{"REFUSED_STREAM", false},
		{"GOAWAY before the stream", true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLab(t, Config{Policy: LeastRequest})
			ref, r := l.startRefuser("refuser", fmt.Sprintf("127.244.250.%d", 244+2*i), tt.goaway)
			good := l.startPod("good", fmt.Sprintf("127.244.250.%d:0", 245+2*i))
			l.ready(ref, good)

			perPod := hammer(t, l.client(), 40, 2)
			if perPod["good"] != 40 {
				t.Errorf("calls per pod %v, want all 40 on good", perPod)
			}
			retried := 0
			for _, c := range l.obs.callsSnapshot() {
				if c.Attempts == 2 && c.Pod == "good" && c.Code == codes.OK {
					retried++
				}
			}
			t.Logf("refuser saw %d streams; %d calls took two attempts", r.streams.Load(), retried)
			if r.streams.Load() == 0 || retried == 0 {
				t.Errorf("refuser saw %d streams, %d calls were sent again; want both > 0", r.streams.Load(), retried)
			}
		})
	}
}
