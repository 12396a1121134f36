package control

import (
	"net"
	"net/http"
	"time"
)

// Defaults used when the matching Config field is zero. They bound what an
// idle or slow client can hold: every connection ends within
// ReadHeaderTimeout of opening unless it sends a request, within
// IdleTimeout of its last reply, and a request within ReadTimeout +
// WriteTimeout of its first byte.
const (
	// DefaultAddr is where `pinlab lab up` serves its control API.
	DefaultAddr = "127.0.0.1:7471"
	// DefaultReadHeaderTimeout bounds reading a request's headers, counted
	// from the connection's accept or the end of the previous reply.
	DefaultReadHeaderTimeout = 5 * time.Second
	// DefaultReadTimeout bounds reading a whole request, body included.
	DefaultReadTimeout = 10 * time.Second
	// DefaultWriteTimeout bounds a request from the end of its headers to
	// the end of its reply.
	DefaultWriteTimeout = 30 * time.Second
	// DefaultIdleTimeout closes a keep-alive connection with no request.
	DefaultIdleTimeout = 30 * time.Second
	// DefaultMaxConns caps the connections open at once.
	DefaultMaxConns = 64
)

// Fixed limits.
const (
	// maxHeaderBytes caps request headers (net/http's default is 1 MiB;
	// pinlab's requests send a few hundred bytes).
	maxHeaderBytes = 16 << 10
	// maxBody caps request bodies; a larger one is 413.
	maxBody = 64 << 10
)

// Config configures a Server. Every field but Token has a working zero
// value.
type Config struct {
	// Addr is the "IP:port" to bind, inside 127.0.0.0/8; port 0 picks a free
	// one. Empty means DefaultAddr.
	Addr string

	// Listener, if not nil, is served instead of binding Addr: a listener
	// already bound inside 127.0.0.0/8, such as the one `lab up
	// --control-plane kubernetes` binds on the host and hands to itself in
	// its network namespace. Shutdown closes it.
	Listener net.Listener

	// NetnsPID is reported in Info: the process whose network namespace
	// the lab runs in, or 0 on the host.
	NetnsPID int

	// Token is the bearer token every request must send in "Authorization:
	// Bearer <Token>" (compared in constant time). Required: Listen refuses
	// an empty one, so the API is never open by mistake. NewToken makes one.
	Token string

	// ReadHeaderTimeout, ReadTimeout, WriteTimeout and IdleTimeout are the
	// http.Server timeouts of the same names; zero means the Default of the
	// same name, negative is an error.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration

	// MaxConns caps the connections open at once; zero means
	// DefaultMaxConns, negative is an error. When all are taken a new
	// connection takes the place of the one that has waited longest without
	// a request in progress (new, or idle between requests), so idle
	// connections cannot lock a token holder out; if every one has a
	// request in progress, accepting waits for one to end.
	MaxConns int

	// UI, if not nil, serves a web page that drives this API, and the
	// page's own calls: every path outside /v1/. Requests reach it after
	// the same checks as the API's calls (Host, Origin and Sec-Fetch-Site,
	// the token), except that the page itself, GET or HEAD of "/", needs no
	// token: a browser that navigates cannot send one, so the page holds no
	// secret and takes the token from its URL's fragment (which browsers
	// never send), then sends it with each call it makes. Once Shutdown
	// began, UI requests get 503 too. A UI handler that streams must end
	// its streams itself (Shutdown waits for them).
	UI http.Handler
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	def(&c.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	def(&c.ReadTimeout, DefaultReadTimeout)
	def(&c.WriteTimeout, DefaultWriteTimeout)
	def(&c.IdleTimeout, DefaultIdleTimeout)
	if c.MaxConns == 0 {
		c.MaxConns = DefaultMaxConns
	}
	return c
}
