package pod

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"
)

// The container env that asks for a pod's admin endpoint, as the pinlab
// image reads it and the lab's kubelet honours it: the port, and the
// token every request must carry.
const (
	AdminPortEnv = "PINLAB_ADMIN_PORT"
	TokenEnv     = "PINLAB_TOKEN"
	// MinTokenLength is the shortest token taken: 16 characters (the
	// runner's will be 43, 32 random bytes in base64).
	MinTokenLength = 16
)

// CheckToken refuses a token that is missing or shorter than
// MinTokenLength, naming TokenEnv.
func CheckToken(token string) error {
	switch {
	case token == "":
		return fmt.Errorf("$%s is empty: the endpoint answers only its holders", TokenEnv)
	case len(token) < MinTokenLength:
		return fmt.Errorf("$%s has %d characters, fewer than %d", TokenEnv, len(token), MinTokenLength)
	}
	return nil
}

// AdminPort reads AdminPortEnv's value: 0 when empty (no endpoint), an
// error naming it when it is not a TCP port or token fails CheckToken.
func AdminPort(value, token string) (int, error) {
	if value == "" {
		return 0, nil
	}
	port, err := strconv.Atoi(value)
	if err != nil || port < 1 || port > 65535 {
		return 0, fmt.Errorf("$%s %q is not a TCP port", AdminPortEnv, value)
	}
	return port, CheckToken(token)
}

// EndpointServer returns the HTTP server of a pod's token-guarded
// endpoints (the admin endpoint, a load client's events): read, write and
// idle timeouts and an 8 KiB header limit, as anything that listens in a
// shared cluster needs.
func EndpointServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 8 << 10}
}

// ServeEndpoint serves h on ln with EndpointServer's limits, in a
// goroutine it owns, until the returned stop is called; stop closes the
// server (and ln) and waits for that goroutine.
func ServeEndpoint(ln net.Listener, h http.Handler) (stop func()) {
	srv := EndpointServer(h)
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	return func() {
		srv.Close()
		<-done
	}
}

// Admin is what the admin endpoint acts on: a Process, or the lab's
// kubelet on behalf of one of its pods' processes.
type Admin interface {
	SetReady(ok bool)
	SetHealthy(ok bool)
	Hang(ctx context.Context, hang bool) error
}

// AdminHandler serves what a real cluster's node cannot do to a pinlab
// pod from outside, for the runner, through kubectl port-forward: POST
// /ready?to=false|true (SetReady: ReadinessService fails or passes a
// readiness probe that asks for it), /healthy?to=false|true (SetHealthy),
// /hang?to=true|false (Hang: connects are dropped and calls get no
// answer) and /kill (kill, SIGKILL to the process, after the answer is
// written). Requests must carry
// "Authorization: Bearer " + token (compared in constant time): 401
// otherwise, as for an empty token. Answers are 204 on success, 400 for a
// bad "to", 404 for other paths, 405 for other methods, 409 when the
// process cannot (it is not listening).
func AdminHandler(p Admin, token string, kill func()) http.Handler {
	want := []byte("Bearer " + token)
	mux := http.NewServeMux()
	handle := func(path string, do func(on bool) error) {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			if token == "" || subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			if r.Method != http.MethodPost {
				http.Error(w, "POST only", http.StatusMethodNotAllowed)
				return
			}
			on := true
			if path != "/kill" {
				switch r.URL.Query().Get("to") {
				case "true":
				case "false":
					on = false
				default:
					http.Error(w, "to must be true or false", http.StatusBadRequest)
					return
				}
			}
			if err := do(on); err != nil {
				http.Error(w, err.Error(), http.StatusConflict)
				return
			}
			w.WriteHeader(http.StatusNoContent)
			if path == "/kill" {
				if f, ok := w.(http.Flusher); ok {
					f.Flush()
				}
				kill()
			}
		})
	}
	handle("/ready", func(on bool) error { p.SetReady(on); return nil })
	handle("/healthy", func(on bool) error { p.SetHealthy(on); return nil })
	handle("/hang", func(on bool) error { return p.Hang(context.Background(), on) })
	handle("/kill", func(bool) error { return nil })
	return mux
}
