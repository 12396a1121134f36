package kubernetes

import (
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

// TestMetrics: two Builders on one registry share the metrics; two
// channels of one target add up their updates and errors; the age gauge
// counts from the last update; closing the resolvers removes the series.
func TestMetrics(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Unix(1000, 0).UnixNano())
	old := timeNow
	timeNow = func() time.Time { return time.Unix(0, clock.Load()) }
	t.Cleanup(func() { timeNow = old })

	reg := prometheus.NewPedanticRegistry()
	client, watched := apiClient()
	s := slice("pricing", "pricing-a", 8471, ips(0, 2)...)
	create(t, client, s)
	cc1, r1 := build(t, client, "kubernetes:///pricing.shop:grpc", WithRegisterer(reg))
	cc2, r2 := build(t, client, "kubernetes://shop/pricing:grpc", WithRegisterer(reg))
	for _, cc := range []*fakeCC{cc1, cc2} {
		cc.waitState(t, 2)
		waitWatch(t, watched)
	}
	down := s.DeepCopy()
	for i := range down.Endpoints {
		down.Endpoints[i].Conditions = conditions(false, false, false)
	}
	update(t, client, down)
	for _, cc := range []*fakeCC{cc1, cc2} {
		cc.waitError(t, "has no ready endpoint")
	}
	clock.Add(int64(5 * time.Second))

	const target = `{target="kubernetes://shop/pricing:grpc"}`
	want := map[string]float64{
		"grpc_kubernetes_resolver_endpoints" + target:                                                          0,
		"grpc_kubernetes_resolver_updates_total" + target:                                                      4,
		`grpc_kubernetes_resolver_errors_total{reason="no_endpoints",target="kubernetes://shop/pricing:grpc"}`: 2,
		"grpc_kubernetes_resolver_seconds_since_update" + target:                                               5,
	}
	if diff := cmp.Diff(want, gather(t, reg)); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
	r1.Close()
	r2.Close()
	if got := gather(t, reg); len(got) != 0 {
		t.Errorf("series left after the resolvers closed: %v", got)
	}
}

// gather returns every sample of reg as name{label="value",...} -> value.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(labels)
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			out[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = v
		}
	}
	return out
}
