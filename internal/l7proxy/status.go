package l7proxy

import (
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
)

// writeStatus answers r with a gRPC Trailers-Only response (PROTOCOL-HTTP2.md):
// one HEADERS frame with END_STREAM carrying :status 200, content-type,
// grpc-status and grpc-message. The Go HTTP/2 server sends exactly that when
// a handler sets headers, writes none of the body and returns.
func writeStatus(w http.ResponseWriter, r *http.Request, code codes.Code, msg string) {
	h := w.Header()
	ct := r.Header.Get("Content-Type")
	if !strings.HasPrefix(ct, "application/grpc") {
		ct = "application/grpc"
	}
	h.Set("Content-Type", ct)
	h.Set("Grpc-Status", strconv.Itoa(int(code)))
	if msg != "" {
		h.Set("Grpc-Message", encodeMessage(msg))
	}
	w.WriteHeader(http.StatusOK)
}

// encodeMessage percent-encodes msg for grpc-message as PROTOCOL-HTTP2.md
// asks: bytes outside printable ASCII, and '%', become %XX of their UTF-8
// encoding.
func encodeMessage(msg string) string {
	const hex = "0123456789ABCDEF"
	plain := func(c byte) bool { return c >= ' ' && c <= '~' && c != '%' }
	i := 0
	for i < len(msg) && plain(msg[i]) {
		i++
	}
	if i == len(msg) {
		return msg
	}
	b := make([]byte, 0, len(msg)+16)
	b = append(b, msg[:i]...)
	for ; i < len(msg); i++ {
		if c := msg[i]; plain(c) {
			b = append(b, c)
		} else {
			b = append(b, '%', hex[c>>4], hex[c&15])
		}
	}
	return string(b)
}

// responseCode is the gRPC status a client reads from res once its body is
// done: grpc-status from the trailers, or from the headers of a
// Trailers-Only response; without one, the HTTP status mapped as
// http-grpc-status-mapping.md says (200 without grpc-status is Internal, as
// grpc-go reports a stream that ends without it).
func responseCode(res *http.Response) codes.Code {
	if v, ok := grpcStatus(res.Trailer); ok {
		return v
	}
	if v, ok := grpcStatus(res.Header); ok {
		return v
	}
	return httpCode(res.StatusCode)
}

func grpcStatus(h http.Header) (codes.Code, bool) {
	vs := h["Grpc-Status"]
	if len(vs) == 0 {
		return 0, false
	}
	n, err := strconv.ParseUint(vs[0], 10, 32)
	if err != nil {
		return codes.Unknown, true
	}
	return codes.Code(n), true
}

func httpCode(status int) codes.Code {
	switch status {
	case http.StatusOK:
		return codes.Internal
	case http.StatusBadRequest:
		return codes.Internal
	case http.StatusUnauthorized:
		return codes.Unauthenticated
	case http.StatusForbidden:
		return codes.PermissionDenied
	case http.StatusNotFound:
		return codes.Unimplemented
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return codes.Unavailable
	}
	return codes.Unknown
}
