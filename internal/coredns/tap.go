package coredns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	tap "github.com/dnstap/golang-dnstap"
	"github.com/miekg/dns"
	"google.golang.org/protobuf/proto"

	"github.com/pinlab/pinlab/internal/clusterdns"
)

// markerZone is where the names of the lab's own queries live (Start's
// readiness probes, SyncQueryLog's markers): outside every zone CoreDNS
// serves here (.invalid is reserved, RFC 6761), so CoreDNS answers them
// SERVFAIL without asking the API, and the query log never passes them
// on. (Filtering by name, not by order: CoreDNS taps an answer after
// writing it, from the query's goroutine, so a later answer's message can
// overtake an earlier one's.)
const markerZone = "pinlab.invalid."

// maxSocketPath is the longest path a unix socket may have on Linux
// (sun_path is 108 bytes with its terminating NUL).
const maxSocketPath = 107

// tapReader is the receiving end of CoreDNS's dnstap plugin ("dnstap
// unix://PATH full"): it accepts CoreDNS's connections on a unix socket,
// reads their Frame Streams (bidirectional, as CoreDNS dials them) with
// golang-dnstap's reader, and turns each CLIENT_RESPONSE into a
// clusterdns.QueryEvent for log, in the order CoreDNS sent them, except
// those of the lab's own queries (markerZone). close stops it and waits
// for its goroutines.
type tapReader struct {
	ln  *net.UnixListener
	log func(clusterdns.QueryEvent)
	wg  sync.WaitGroup

	seq     atomic.Uint64
	mu      sync.Mutex
	conns   map[net.Conn]bool
	waiters map[string]chan struct{} // marker name -> closed when seen
	errs    []error                  // frames that did not decode
}

// listenTap listens on the unix socket path and starts accepting.
func listenTap(path string, log func(clusterdns.QueryEvent)) (*tapReader, error) {
	if len(path) > maxSocketPath {
		return nil, fmt.Errorf("coredns: dnstap socket path %s is longer than %d bytes", path, maxSocketPath)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("coredns: dnstap socket: %w", err)
	}
	r := &tapReader{ln: ln, log: log, conns: map[net.Conn]bool{}, waiters: map[string]chan struct{}{}}
	r.wg.Go(r.accept)
	return r, nil
}

// accept serves each connection CoreDNS makes (one, unless it redials
// after a write error) until the listener closes.
func (r *tapReader) accept() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		r.conns[c] = true
		r.mu.Unlock()
		r.wg.Go(func() { r.read(c) })
	}
}

// read decodes c's frames until it ends (CoreDNS closed it or exited, or
// close closed it).
func (r *tapReader) read(c net.Conn) {
	defer func() {
		c.Close()
		r.mu.Lock()
		delete(r.conns, c)
		r.mu.Unlock()
	}()
	fr, err := tap.NewReader(c, &tap.ReaderOptions{Bidirectional: true, Timeout: 5 * time.Second})
	if err != nil {
		return
	}
	buf := make([]byte, tap.MaxPayloadSize)
	for {
		n, err := fr.ReadFrame(buf)
		if err != nil {
			return
		}
		ev, ok, err := queryEvent(buf[:n])
		if err != nil {
			r.mu.Lock()
			r.errs = append(r.errs, err)
			r.mu.Unlock()
			continue
		}
		if ok && r.pass(ev.Name) {
			r.log(ev)
		}
	}
}

// pass reports whether an event for name goes to the log: not if it is a
// marker's. A marker releases its waiter.
func (r *tapReader) pass(name string) bool {
	if !dns.IsSubDomain(markerZone, strings.ToLower(name)) {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if ch, ok := r.waiters[strings.ToLower(name)]; ok {
		close(ch)
		delete(r.waiters, strings.ToLower(name))
	}
	return false
}

// sync returns once every answer CoreDNS had sent before the call has
// been logged: it asks addr a marker query (again every 200 ms, in case UDP
// loses one) until its CLIENT_RESPONSE came through the socket, twice. The
// dnstap plugin sends its messages in order, but queues an answer's just
// after writing the answer, so one a client already has may follow the
// first marker's; it comes before the second's. CoreDNS flushes its
// dnstap buffer every second, so this takes up to about two seconds.
func (r *tapReader) sync(ctx context.Context, addr string) error {
	for range 2 {
		if err := r.marker(ctx, addr); err != nil {
			return err
		}
	}
	return nil
}

// marker asks CoreDNS a marker query at addr (again every 200 ms) until
// its dnstap message has come through, or ctx ends.
func (r *tapReader) marker(ctx context.Context, addr string) error {
	name := "sync-" + strconv.FormatUint(r.seq.Add(1), 10) + "." + markerZone
	seen := make(chan struct{})
	r.mu.Lock()
	r.waiters[name] = seen
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.waiters, name)
		r.mu.Unlock()
	}()
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeTXT)
	c := &dns.Client{Timeout: time.Second}
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		_, _, _ = c.ExchangeContext(ctx, m, addr)
		select {
		case <-seen:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("coredns: the dnstap message of marker query %s did not arrive: %w", name, ctx.Err())
		case <-t.C:
		}
	}
}

// close stops accepting, waits up to grace for the open connections to
// end (CoreDNS has exited: they reach EOF once their last frames are
// read), then closes them and waits for the goroutines. It returns the
// decoding errors met.
func (r *tapReader) close(grace time.Duration) error {
	r.ln.Close()
	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		r.mu.Lock()
		for c := range r.conns {
			c.Close()
		}
		r.mu.Unlock()
		<-done
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errs) > 0 {
		return fmt.Errorf("coredns: %d dnstap frame(s) did not decode, the first: %w", len(r.errs), r.errs[0])
	}
	return nil
}

// queryEvent turns one dnstap frame into the event pinlab's DNS reports
// for the same answer; ok is false for anything but a CLIENT_RESPONSE.
// The answer is the wire message the dnstap plugin's "full" includes, as
// CoreDNS wrote it to the client (after loadbalance, and after truncation
// to the client's buffer size).
func queryEvent(frame []byte) (ev clusterdns.QueryEvent, ok bool, err error) {
	var d tap.Dnstap
	if err := proto.Unmarshal(frame, &d); err != nil {
		return ev, false, fmt.Errorf("dnstap frame: %w", err)
	}
	m := d.GetMessage()
	if m == nil || m.GetType() != tap.Message_CLIENT_RESPONSE {
		return ev, false, nil
	}
	if m.ResponseMessage == nil {
		return ev, false, errors.New("dnstap CLIENT_RESPONSE without its message (the plugin needs \"full\")")
	}
	var resp dns.Msg
	if err := resp.Unpack(m.ResponseMessage); err != nil {
		return ev, false, fmt.Errorf("dnstap CLIENT_RESPONSE: %w", err)
	}
	ev = clusterdns.QueryEvent{Rcode: resp.Rcode, Answers: len(resp.Answer), Truncated: resp.Truncated}
	if m.QueryTimeSec != nil {
		ev.Time = time.Unix(int64(m.GetQueryTimeSec()), int64(m.GetQueryTimeNsec()))
	}
	if len(resp.Question) > 0 {
		ev.Name, ev.Type = resp.Question[0].Name, resp.Question[0].Qtype
	}
	ip, port := net.IP(m.QueryAddress), int(m.GetQueryPort())
	switch m.GetSocketProtocol() {
	case tap.SocketProtocol_UDP:
		ev.Network = "udp"
		if ip != nil {
			ev.Client = &net.UDPAddr{IP: ip, Port: port}
		}
	case tap.SocketProtocol_TCP:
		ev.Network = "tcp"
		if ip != nil {
			ev.Client = &net.TCPAddr{IP: ip, Port: port}
		}
	}
	return ev, true, nil
}
