package control

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
)

// statusError is an error reply: an HTTP status and its message.
type statusError struct {
	code int
	err  error
}

func (e *statusError) Error() string { return e.err.Error() }

func errorf(code int, format string, args ...any) *statusError {
	return &statusError{code, fmt.Errorf(format, args...)}
}

// checkHost refuses a request whose Host is not the address the API is
// bound to: a web page that rebinds its own name to 127.0.0.1 sends its
// name (DNS rebinding).
func (s *Server) checkHost(r *http.Request) *statusError {
	if r.Host != s.Addr() {
		return errorf(http.StatusMisdirectedRequest, "control: Host %q is not this API's address %s", r.Host, s.Addr())
	}
	return nil
}

// checkOrigin refuses requests a browser sends on behalf of another site:
// browsers send Origin on every cross-origin POST and Sec-Fetch-Site on
// every request (the checks of Go's http.CrossOriginProtection, on every
// method). Programs such as pinlab's client send neither.
func (s *Server) checkOrigin(r *http.Request) *statusError {
	own := "http://" + s.Addr()
	switch origins := r.Header.Values("Origin"); {
	case len(origins) > 1:
		return errorf(http.StatusForbidden, "control: more than one Origin header")
	case len(origins) == 1 && origins[0] != own:
		return errorf(http.StatusForbidden, "control: cross-origin request from %q refused (only %s may call this API)", origins[0], own)
	}
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
		return nil
	default:
		return errorf(http.StatusForbidden, "control: %s request refused (Sec-Fetch-Site)", site)
	}
}

// errNoToken and errWrongToken are the messages of 401 replies.
var (
	errNoToken    = errors.New("control: this API needs the lab's token (Authorization: Bearer <token>)")
	errWrongToken = errors.New("control: wrong token")
)

// checkToken requires "Authorization: Bearer <token>" with the lab's token,
// compared in constant time (of hashes, so the length does not show).
func (s *Server) checkToken(r *http.Request) *statusError {
	vals := r.Header.Values("Authorization")
	if len(vals) != 1 {
		return &statusError{http.StatusUnauthorized, errNoToken}
	}
	scheme, token, _ := strings.Cut(vals[0], " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return &statusError{http.StatusUnauthorized, errNoToken}
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(token)))
	if subtle.ConstantTimeCompare(sum[:], s.tokenSum[:]) != 1 {
		return &statusError{http.StatusUnauthorized, errWrongToken}
	}
	return nil
}

// checkJSON requires a body of type application/json (charset, if given,
// utf-8), so that no HTML form or CORS "simple request" can be one.
func checkJSON(r *http.Request) *statusError {
	vals := r.Header.Values("Content-Type")
	if len(vals) != 1 {
		return errorf(http.StatusUnsupportedMediaType, "control: expected Content-Type application/json")
	}
	typ, params, err := mime.ParseMediaType(vals[0])
	if err != nil || typ != "application/json" {
		return errorf(http.StatusUnsupportedMediaType, "control: Content-Type %q: expected application/json", vals[0])
	}
	for k, v := range params {
		if k != "charset" || !strings.EqualFold(v, "utf-8") {
			return errorf(http.StatusUnsupportedMediaType, "control: Content-Type %q: expected application/json (charset utf-8 only)", vals[0])
		}
	}
	return nil
}
