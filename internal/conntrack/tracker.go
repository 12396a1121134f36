package conntrack

// Tracker turns a TCP event stream into connections that open and close,
// keyed by their original tuple. A connection opens at its first event in
// state ESTABLISHED (the three-way handshake completed through the NAT)
// and closes at its first event in TIME_WAIT or CLOSE (both directions
// done, or reset) or at its DESTROY, whichever comes first: the kernel
// keeps a closed entry for its TIME_WAIT timeout (120 s), the connection
// is over before. The zero value is ready; not safe for concurrent use.
type Tracker struct {
	open map[Tuple]Entry
}

// Change is what an event did to a connection.
type Change int

// The changes Add reports.
const (
	None Change = iota
	Opened
	Closed
)

// Add applies e and says whether it opened or closed a connection.
func (t *Tracker) Add(e Entry) Change {
	if e.Proto != "tcp" {
		return None
	}
	_, isOpen := t.open[e.Orig]
	switch {
	case !isOpen && e.Event != "DESTROY" && e.State == "ESTABLISHED":
		if t.open == nil {
			t.open = map[Tuple]Entry{}
		}
		t.open[e.Orig] = e
		return Opened
	case isOpen && (e.Event == "DESTROY" || e.State == "TIME_WAIT" || e.State == "CLOSE"):
		delete(t.open, e.Orig)
		return Closed
	}
	return None
}

// Open returns how many connections are open.
func (t *Tracker) Open() int { return len(t.open) }
