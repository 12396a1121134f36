package load

import (
	"errors"
	"io"
	"os"
	"syscall"

	"golang.org/x/net/http2"
)

// CloseReason says why a client connection closed, as the client observed
// it: the first of a GOAWAY from the server, a failed read, or the client's
// own close. It is what happened on the wire, not what a server was
// configured to do.
type CloseReason string

// The reasons. A GOAWAY with error code NO_ERROR is "goaway" followed by
// its debug data, if any; grpc-go servers send the debug data below
// (internal/transport/http2_server.go, server.go). A GOAWAY with another
// error code is "goaway CODE debug data", e.g. ReasonGoAwayTooManyPings.
// Debug data is kept up to 128 bytes, non-printable bytes as '?'.
const (
	// ReasonGoAwayMaxAge: keepalive MaxConnectionAge passed (the server's
	// keepalive loop drains with "max_age").
	ReasonGoAwayMaxAge CloseReason = "goaway max_age"
	// ReasonGoAwayMaxIdle: keepalive MaxConnectionIdle passed ("max_idle").
	ReasonGoAwayMaxIdle CloseReason = "goaway max_idle"
	// ReasonGoAwayGracefulStop: Server.GracefulStop ("graceful_stop").
	ReasonGoAwayGracefulStop CloseReason = "goaway graceful_stop"
	// ReasonGoAway: a GOAWAY without debug data; grpc-go sends one to a
	// connection accepted while the server was already draining.
	ReasonGoAway CloseReason = "goaway"
	// ReasonGoAwayTooManyPings: the client pinged more often than the
	// server's keepalive EnforcementPolicy allows (ENHANCE_YOUR_CALM).
	ReasonGoAwayTooManyPings CloseReason = "goaway ENHANCE_YOUR_CALM too_many_pings"
	// ReasonEOF: the server closed the connection (FIN) without a GOAWAY
	// first, as a killed or crashed process does.
	ReasonEOF CloseReason = "eof"
	// ReasonReset: the connection was reset (RST) before any GOAWAY: a
	// peer that closed with unread data or SO_LINGER 0, or a middlebox.
	ReasonReset CloseReason = "reset"
	// ReasonReadError: another read error before any GOAWAY (a TCP
	// timeout, an unreachable host).
	ReasonReadError CloseReason = "read error"
	// ReasonClient: this client closed the connection first: its channel
	// shut down (Restart, Reconfigure, the end of Run) or its balancer
	// dropped the address.
	ReasonClient CloseReason = "client"
	// ReasonUnknown: grpc-go reported the end of a connection the client
	// had forgotten: one grpc-go closed (at its connect deadline) before
	// reporting it open.
	ReasonUnknown CloseReason = "unknown"
)

// goAwayReason is the CloseReason of GOAWAY g.
func goAwayReason(g goAway) CloseReason {
	r := ReasonGoAway
	if g.code != http2.ErrCodeNo {
		r += " " + CloseReason(g.code.String())
	}
	if g.debug != "" {
		r += " " + CloseReason(g.debug)
	}
	return r
}

// ReadCloseReason classifies the error of a connection's read: ReasonEOF,
// ReasonReset or ReasonReadError. It returns false for an expired deadline,
// which this side set and which ends nothing by itself (grpc-go sets one
// while closing a transport).
func ReadCloseReason(err error) (CloseReason, bool) {
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return "", false
	case errors.Is(err, io.EOF):
		return ReasonEOF, true
	case errors.Is(err, syscall.ECONNRESET):
		return ReasonReset, true
	}
	return ReasonReadError, true
}
