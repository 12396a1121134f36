package pod

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/pinlab/pinlab/internal/webapi"
	"google.golang.org/grpc/codes"
)

// Bounds of WebServer's WebSocket side.
const (
	// MaxWatchMessageBytes is the largest client message read; a bigger
	// one closes the connection with 1009 (message too big).
	MaxWatchMessageBytes = 4096
	// watchWriteTimeout bounds writing one reply.
	watchWriteTimeout = 5 * time.Second
)

// watch upgrades to a WebSocket and answers its messages until the client
// leaves, Stop sends 1001 or Kill closes it.
func (s *WebServer) watch(w http.ResponseWriter, r *http.Request) {
	if s.isStopping() {
		s.fail(w, http.StatusServiceUnavailable, "pod stopping")
		return
	}
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept wrote the error status
	}
	// The connection is hijacked: ConnState reported StateHijacked, so
	// its close is ours to report.
	peer := peerOf(r)
	defer s.obs.Conn(peer, false)
	c.SetReadLimit(MaxWatchMessageBytes)

	done := make(chan struct{})
	var closer sync.WaitGroup
	closer.Add(1)
	go func() {
		defer closer.Done()
		select {
		case <-s.draining:
			c.Close(websocket.StatusGoingAway, "pod stopping")
		case <-s.base.Done():
			c.CloseNow()
		case <-done:
		}
	}()
	s.serveMessages(c, peer)
	close(done)
	c.CloseNow()
	closer.Wait()
}

// serveMessages answers text messages one at a time until reading or
// writing fails.
func (s *WebServer) serveMessages(c *websocket.Conn, peer netip.AddrPort) {
	for {
		typ, data, err := c.Read(s.base)
		if err != nil {
			return
		}
		if typ != websocket.MessageText {
			s.obs.Served(peer, webapi.RouteWatchMessage, codes.InvalidArgument)
			c.Close(websocket.StatusUnsupportedData, "text messages only")
			return
		}
		req := parseWatchRequest(data)
		var reply any = s.quote(req.SKU, req.ID)
		code := codes.OK
		if req.SKU == "" {
			reply = webapi.ErrorReply{ID: req.ID, Error: "missing sku", Pod: s.cfg.Name, PodIP: s.cfg.Addr.Addr().String()}
			code = codes.InvalidArgument
		} else if err := s.work(s.base); err != nil {
			return
		}
		if err := s.send(c, reply); err != nil {
			return
		}
		s.obs.Served(peer, webapi.RouteWatchMessage, code)
	}
}

func (s *WebServer) send(c *websocket.Conn, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(s.base, watchWriteTimeout)
	defer cancel()
	return c.Write(ctx, websocket.MessageText, b)
}

// parseWatchRequest reads a webapi.WatchRequest; text that is not a JSON object
// is the SKU itself.
func parseWatchRequest(data []byte) webapi.WatchRequest {
	var req webapi.WatchRequest
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '{' {
		if json.Unmarshal(t, &req) == nil {
			return req
		}
	}
	return webapi.WatchRequest{SKU: string(data)}
}
