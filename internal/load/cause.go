package load

import (
	"strings"

	"github.com/pinlab/pinlab/internal/plan"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// markers map message fragments to causes, checked in order: resolver
// errors first, as they may quote a DNS timeout; a reset before goaway because a reset after a GOAWAY reads "closing
// transport due to: ... connection reset by peer, received prior goaway".
var markers = []struct {
	fragment string
	cause    plan.Cause
}{
	{"produced zero addresses", plan.CauseNoAddress},
	{"name resolver error", plan.CauseNoAddress},
	{"last resolver error", plan.CauseNoAddress},
	{"no children to pick from", plan.CauseNoAddress},
	{"connection refused", plan.CauseRefused},
	{"connection reset by peer", plan.CauseReset},
	{"broken pipe", plan.CauseReset},
	{"i/o timeout", plan.CauseConnectTimeout},
	{"while waiting for connections to become ready", plan.CauseConnectTimeout},
	{"error reading from server: EOF", plan.CauseGoAway},
	{"received prior goaway", plan.CauseGoAway},
	{"the connection is draining", plan.CauseGoAway},
	{"transport is closing", plan.CauseGoAway},
}

// CauseOf classifies a call's error as one of plan.Causes, from the status
// grpc-go gave it (each cause's doc quotes the messages it comes from); it
// returns "" for nil. Only UNAVAILABLE and DEADLINE_EXCEEDED are read for
// connection causes; any other code is plan.CauseOther. Safe for
// concurrent use.
func CauseOf(err error) plan.Cause {
	if err == nil {
		return ""
	}
	st := status.Convert(err)
	if st.Code() != codes.Unavailable && st.Code() != codes.DeadlineExceeded {
		return plan.CauseOther
	}
	for _, m := range markers {
		if strings.Contains(st.Message(), m.fragment) {
			return m.cause
		}
	}
	switch st.Code() {
	case codes.DeadlineExceeded:
		return plan.CauseDeadline
	case codes.Unavailable:
		return plan.CauseUnavailable
	}
	return plan.CauseOther
}
