package plan

import (
	"testing"

	"github.com/pinlab/pinlab/internal/lbpolicy"
)

// TestPolicyText: an xDS group's policy line says where the policy comes
// from (the Service's annotations, or the control plane's default when it
// has none) and carries the policy's settings and outlier detection.
func TestPolicyText(t *testing.T) {
	od, err := lbpolicy.ParseOutlierDetection(`{"failurePercentageEjection": {"threshold": 30}}`)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		g    Group
		want string
	}{
		{"dns", Group{Policy: "round_robin", Settings: Settings{Protocol: ProtocolGRPC}}, "round_robin"},
		{"xds, no annotation", Group{Policy: "round_robin", Target: Target{XDS: true}}, "xDS round_robin (the control plane's default: the Service has no xds.pinlab.dev annotation)"},
		{"xds, annotated", Group{Policy: "least_request", Target: Target{XDS: true, XDSAnnotated: true}, Settings: Settings{PolicySettings: `{"choiceCount":3}`}},
			`xDS least_request {"choiceCount":3} (the Service's annotations)`},
		{"xds, outlier detection", Group{Policy: "round_robin", Target: Target{XDS: true, XDSAnnotated: true, OutlierDetection: &od}},
			"xDS round_robin, outlier detection: failure percentage above 30% (50 calls, 5 hosts) every 10s, ejected 30s+, at most 10% of endpoints (the Service's annotations)"},
	}
	for _, tt := range tests {
		if got := tt.g.PolicyText(); got != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, got, tt.want)
		}
	}
}
