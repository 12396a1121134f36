package clusterdns

import (
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// ListenerHandler returns the handler Start serves on its sockets.
func ListenerHandler(s *Server) dns.Handler { return listenerHandler{s} }

// SetNow replaces the clock of the SOA serial and of the cache plugin's
// TTLs until tb ends. It must be called before the informers of the
// Servers it affects start; f may then move on its own (read an atomic).
func SetNow(tb testing.TB, f func() time.Time) {
	old := now
	now = f
	tb.Cleanup(func() { now = old })
}

// MaxMemoized is the bound on the names in the answer memo.
const MaxMemoized = maxMemoized

// MemoizedNames returns about how many names the answer memo holds.
func MemoizedNames(s *Server) int { return int(s.memo.count.Load()) }

// UDPReadBuffer is the receive buffer Start asks for on its UDP socket.
const UDPReadBuffer = udpReadBuffer

// UDPConn returns the UDP socket a started Server serves.
func UDPConn(s *Server) net.PacketConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.udp.PacketConn
}

// MaxTCPConns bounds the open DNS-over-TCP connections.
const MaxTCPConns = maxTCPConns

// CachedReplies returns how many replies the cache plugin's success and
// denial caches hold, expired ones included.
func CachedReplies(s *Server) (success, denial int) {
	if s.plugin == nil {
		return 0, 0
	}
	return s.plugin.success.len(), s.plugin.denial.len()
}
