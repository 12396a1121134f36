package plan

// Cause says why a load client's call failed. Package load classifies
// each failed call (load.CauseOf) from the status grpc-go gave it; the
// Summary counts failures under these names (stats.WindowStats.ErrorCauses,
// stats.ClientStats.Causes), and an expectation may narrow failed and
// failedShare to one (Expectation.Cause).
type Cause string

// The causes, from the status messages grpc-go v1.85 produces
// (internal/transport/http2_client.go, picker_wrapper.go,
// balancer/pickfirst). A call that waited for a ready connection
// (WaitForReady) and hit its deadline carries the last connection error in
// its message ("latest balancer error: ..."), so it gets that error's cause.
const (
	// CauseRefused: the connect got ECONNREFUSED ("transport: Error while
	// dialing: dial tcp ...: connect: connection refused"), as for a pod
	// IP with nothing listening or a REJECTed Service VIP.
	CauseRefused Cause = "refused"
	// CauseConnectTimeout: a connection attempt did not finish: the dial
	// timed out ("... i/o timeout"), or the call's deadline passed while it
	// waited for a connection to become ready ("context deadline exceeded
	// while waiting for connections to become ready"; also seen if the
	// first DNS answer is slower than the call's deadline).
	CauseConnectTimeout Cause = "connect-timeout"
	// CauseGoAway: the server closed the connection while the call was on
	// it: EOF ("error reading from server: EOF"), after a GOAWAY ("...
	// received prior goaway: code: NO_ERROR"), or the call was refused by
	// a draining connection ("the connection is draining", "transport is
	// closing").
	CauseGoAway Cause = "goaway"
	// CauseReset: the connection was reset ("connection reset by peer",
	// "broken pipe").
	CauseReset Cause = "reset"
	// CauseDeadline: DEADLINE_EXCEEDED on a call that had a connection (a
	// slow server, or a call queued behind others).
	CauseDeadline Cause = "deadline"
	// CauseNoAddress: the resolver gave no address ("produced zero
	// addresses", NXDOMAIN or an empty answer) or failed ("name resolver
	// error: ...").
	CauseNoAddress Cause = "no-address"
	// CauseUnavailable: any other UNAVAILABLE, such as a server that
	// answered UNAVAILABLE itself.
	CauseUnavailable Cause = "unavailable-other"
	// CauseNotSent: the client did not send the call because MaxInFlight
	// calls were open (RESOURCE_EXHAUSTED): the generator was past its
	// capacity, a sign the machine, not the system, is the bottleneck.
	CauseNotSent Cause = "not-sent"
	// CauseOther: any other failure.
	CauseOther Cause = "other"
)

// Causes lists every cause, in the order above.
var Causes = []Cause{CauseRefused, CauseConnectTimeout, CauseGoAway, CauseReset, CauseDeadline, CauseNoAddress, CauseUnavailable, CauseNotSent, CauseOther}
