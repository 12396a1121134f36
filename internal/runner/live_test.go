package runner_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/pinlab/pinlab/internal/labrun"
	"github.com/pinlab/pinlab/internal/outcome"
	"github.com/pinlab/pinlab/internal/runner"
	"github.com/pinlab/pinlab/internal/scenariotest"
	"github.com/pinlab/pinlab/internal/stats"
)

// liveLog records what Options.Live is told.
type liveLog struct {
	mu     sync.Mutex
	served map[int]map[string]int64
	opened map[int]int
	closed map[int]int
	events map[int][]outcome.LiveEvent
}

func (l *liveLog) Served(v int, pod string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.served[v] == nil {
		l.served[v] = map[string]int64{}
	}
	l.served[v][pod]++
}

func (l *liveLog) Conn(v int, _ string, open bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if open {
		l.opened[v]++
	} else {
		l.closed[v]++
	}
}

func (l *liveLog) Event(v int, e outcome.LiveEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events[v] = append(l.events[v], e)
}

// TestLive runs a short scale-out with a Live observer: it is told of every
// call the summary counts, per pod, of every client connection, of each pod
// turning Ready and of the scale step, per variant.
func TestLive(t *testing.T) {
	p := scenariotest.Load(t, objects(2)+`---
apiVersion: pinlab.dev/v1alpha1
kind: Scenario
metadata: {name: live}
spec:
  duration: 3s
  clients:
  - {name: order, namespace: shop, count: 2, target: "pricing:8471", rate: 40}
  timeline:
  - {at: 1s, scale: {deployment: pricing, replicas: 3}}
  windows: [{name: run, from: 0s, to: 3s}]
  variants:
  - name: clusterip
  - name: headless-rr
    clients: [{target: "`+headless+`", policy: round_robin}]
`)
	live := &liveLog{served: map[int]map[string]int64{}, opened: map[int]int{}, closed: map[int]int{}, events: map[int][]outcome.LiveEvent{}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := runner.Run(ctx, p, runner.Options{Live: live, Backend: labrun.Embedded()})
	if err != nil {
		t.Fatal(err)
	}
	live.mu.Lock()
	defer live.mu.Unlock()
	for i, o := range res.Variants {
		t.Run(o.Variant, func(t *testing.T) {
			want := map[string]int64{}
			for pod, tl := range o.Summary.Timeline {
				for _, n := range tl {
					want[pod] += n
				}
				if want[pod] == 0 {
					delete(want, pod)
				}
			}
			if diff := cmp.Diff(want, live.served[i]); diff != "" {
				t.Errorf("calls served per pod, live (+) vs the summary (-):\n%s", diff)
			}
			conns := 0
			for _, c := range o.Summary.Clients {
				conns += len(c.Conns)
			}
			if live.opened[i] != conns || live.closed[i] != conns {
				t.Errorf("connections opened %d, closed %d live; the summary has %d, all closed when load stopped", live.opened[i], live.closed[i], conns)
			}
			ready := 0
			for _, e := range live.events[i] {
				if e.Phase == stats.PodReady && e.Pod != "" && e.IP != "" {
					ready++
				}
			}
			if ready < 3 {
				t.Errorf("%d pods turned Ready live, want 3 (2, then 1 added by the scale step): %+v", ready, live.events[i])
			}
			if !slices.ContainsFunc(live.events[i], func(e outcome.LiveEvent) bool {
				return strings.Contains(e.Text, "scale Deployment pricing to 3") && e.Err == "" && !e.At.IsZero()
			}) {
				t.Errorf("no scale step among the live events: %+v", live.events[i])
			}
		})
	}
}
