package pod

// PriceCents exports priceCents to the external tests of WebServer.
var PriceCents = priceCents

// Accepted is how many connections s has accepted and not yet closed, for
// the external tests of Server.
func Accepted(s *Server) int {
	s.gate.mu.Lock()
	defer s.gate.mu.Unlock()
	return len(s.gate.conns)
}
