package l7proxy

import (
	"net/http"

	"google.golang.org/grpc/codes"
)

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

// httpCode maps the HTTP status of a response without grpc-status to a
// gRPC code as http-grpc-status-mapping.md says (200 without grpc-status is
// Internal, as grpc-go reports a stream that ends without it).
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
