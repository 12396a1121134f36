package web

import (
	"context"
	"errors"
	"net"

	"google.golang.org/grpc/codes"
)

// errCode maps a client-side failure without an HTTP status to a code as
// grpc-go would report it: deadlines DeadlineExceeded, cancellation
// Canceled, everything else (refused, reset, no DNS answer) Unavailable.
func errCode(err error) codes.Code {
	var ne net.Error
	switch {
	case err == nil:
		return codes.OK
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	}
	return codes.Unavailable
}
