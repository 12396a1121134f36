// Package loadtest holds test helpers for code that runs load clients.
package loadtest

import (
	"sync"

	"github.com/pinlab/pinlab/internal/load"
)

// Tally is a load.Observer that counts a client's calls by the pod that
// answered and by status code. Its methods are safe for concurrent use;
// read Pods and Codes once the client has stopped.
type Tally struct {
	mu    sync.Mutex
	Pods  map[string]int // calls per pod name; failed calls name none
	Codes map[string]int // calls per gRPC code name ("OK", ...)
}

// Called counts r.
func (c *Tally) Called(r load.Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.Pods == nil {
		c.Pods, c.Codes = map[string]int{}, map[string]int{}
	}
	c.Codes[r.Code.String()]++
	if r.Pod != "" {
		c.Pods[r.Pod]++
	}
}

// Conn ignores connection events.
func (c *Tally) Conn(load.ConnEvent) {}
