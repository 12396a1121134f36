package webapi

import "google.golang.org/grpc/codes"

// CodeOf maps an HTTP status to the gRPC code reported for it, so HTTP and
// gRPC workloads count errors alike. The mapping inverts the "HTTP Mapping"
// notes of google.rpc.Code (googleapis google/rpc/code.proto), taking the
// first code listed for a status where several share one, plus 408 and 502
// from gRPC's HTTP-to-gRPC status mapping (doc/http-grpc-status-mapping.md):
//
//	1xx, 3xx           Unknown
//	2xx                OK
//	400                InvalidArgument
//	401                Unauthenticated
//	403                PermissionDenied
//	404                NotFound
//	408                DeadlineExceeded
//	409                Aborted
//	416                OutOfRange
//	429                ResourceExhausted
//	499                Canceled (nginx's "client closed request")
//	other 4xx          FailedPrecondition
//	500                Internal
//	501                Unimplemented
//	502, 503           Unavailable
//	504                DeadlineExceeded
//	anything else      Unknown
func CodeOf(status int) codes.Code {
	switch status {
	case 400:
		return codes.InvalidArgument
	case 401:
		return codes.Unauthenticated
	case 403:
		return codes.PermissionDenied
	case 404:
		return codes.NotFound
	case 408, 504:
		return codes.DeadlineExceeded
	case 409:
		return codes.Aborted
	case 416:
		return codes.OutOfRange
	case 429:
		return codes.ResourceExhausted
	case 499:
		return codes.Canceled
	case 500:
		return codes.Internal
	case 501:
		return codes.Unimplemented
	case 502, 503:
		return codes.Unavailable
	}
	switch {
	case status >= 200 && status < 300:
		return codes.OK
	case status >= 400 && status < 500:
		return codes.FailedPrecondition
	}
	return codes.Unknown
}
