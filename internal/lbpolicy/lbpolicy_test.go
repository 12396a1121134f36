package lbpolicy

import (
	"strings"
	"testing"

	"encoding/json"
	"google.golang.org/grpc/balancer"
	_ "google.golang.org/grpc/balancer/leastrequest"
	_ "google.golang.org/grpc/balancer/ringhash"
	_ "google.golang.org/grpc/balancer/weightedroundrobin"
)

// TestParse: names and settings as users write them; errors name the
// field.
func TestParse(t *testing.T) {
	for _, tt := range []struct {
		name, settings string
		wantErr        string
		wantSC         string
	}{
		{name: "round_robin", wantSC: `{"loadBalancingConfig":[{"round_robin":{}}]}`},
		{name: "pick_first", wantSC: `{"loadBalancingConfig":[{"pick_first":{}}]}`},
		{name: "least_request", wantSC: `{"loadBalancingConfig":[{"least_request_experimental":{}}]}`},
		{name: "least_request", settings: `{"choiceCount": 3}`, wantSC: `{"loadBalancingConfig":[{"least_request_experimental":{"choiceCount":3}}]}`},
		{name: "weighted_round_robin", settings: `{"blackoutPeriod": "2s", "enableOobLoadReport": true, "oobReportingPeriod": "500ms"}`,
			wantSC: `{"loadBalancingConfig":[{"weighted_round_robin":{"enableOobLoadReport":true,"oobReportingPeriod":"0.5s","blackoutPeriod":"2s"}}]}`},
		{name: "weighted_round_robin", settings: `{"weightUpdatePeriod": "0.25s", "weightExpirationPeriod": "1m30s"}`,
			wantSC: `{"loadBalancingConfig":[{"weighted_round_robin":{"weightExpirationPeriod":"90s","weightUpdatePeriod":"0.25s"}}]}`},
		{name: "ring_hash", settings: `{"minRingSize": 64, "maxRingSize": 128}`, wantSC: `{"loadBalancingConfig":[{"ring_hash_experimental":{"minRingSize":64,"maxRingSize":128}}]}`},
		{name: "ring_hash", settings: `{"requestHashHeader": "pinlab-client"}`, wantSC: `{"loadBalancingConfig":[{"ring_hash_experimental":{"requestHashHeader":"pinlab-client"}}]}`},
		{name: "ring_hash", settings: `{"minRingSize": 5000}`, wantErr: "above maxRingSize 4096 (grpc-go's default"},
		{name: "ring_hash", settings: `{"requestHashHeader": "Pinlab-Client"}`, wantErr: "a lower-case header name"},
		{name: "ring_hash", settings: `{"requestHashHeader": "key-bin"}`, wantErr: "not ending in -bin"},
		{name: "random", wantErr: `unknown policy "random"`},
		{name: "round_robin", settings: `{"x": 1}`, wantErr: "round_robin takes no settings"},
		{name: "least_request", settings: `{"choices": 3}`, wantErr: `unknown field "choices"`},
		{name: "least_request", settings: `{"choiceCount": 1}`, wantErr: "at least 2"},
		{name: "weighted_round_robin", settings: `{"blackoutPeriod": 10}`, wantErr: `blackoutPeriod: got 10, want a duration such as "10s"`},
		{name: "weighted_round_robin", settings: `{"blackoutPeriod": "soon"}`, wantErr: `got "soon"`},
		{name: "ring_hash", settings: `{"minRingSize": 9, "maxRingSize": 8}`, wantErr: "above maxRingSize"},
		{name: "least_request", settings: `{"choiceCount": 2} {}`, wantErr: "more data"},
	} {
		t.Run(tt.name+tt.settings, func(t *testing.T) {
			p, err := Parse(tt.name, tt.settings)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse: %v, want an error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := p.ServiceConfig(); got != tt.wantSC {
				t.Errorf("ServiceConfig() = %s\nwant %s", got, tt.wantSC)
			}
			// grpc-go's own parser takes it.
			var sc struct {
				LB []map[string]json.RawMessage `json:"loadBalancingConfig"`
			}
			if err := json.Unmarshal([]byte(p.ServiceConfig()), &sc); err != nil {
				t.Fatal(err)
			}
			for name, cfg := range sc.LB[0] {
				b := balancer.Get(name)
				if b == nil {
					t.Fatalf("no balancer %q registered", name)
				}
				if parser, ok := b.(balancer.ConfigParser); ok {
					if _, err := parser.ParseConfig(cfg); err != nil {
						t.Errorf("grpc-go's %s rejects %s: %v", name, cfg, err)
					}
				}
			}
		})
	}
}

// TestParseOutlierDetection: A50's fields; bounds checked.
func TestParseOutlierDetection(t *testing.T) {
	od, err := ParseOutlierDetection(`{"interval": "1s", "baseEjectionTime": "30s", "maxEjectionPercent": 50,
		"failurePercentageEjection": {"threshold": 40, "minimumHosts": 3, "requestVolume": 20}}`)
	if err != nil {
		t.Fatal(err)
	}
	if od.Interval.D().Seconds() != 1 || *od.MaxEjectionPercent != 50 || *od.FailurePercentage.Threshold != 40 || od.SuccessRate != nil {
		t.Errorf("parsed %+v", od)
	}
	for _, bad := range []string{`{"maxEjectionPercent": 101}`, `{"failurePercentageEjection": {"threshold": 150}}`, `{"intervall": "1s"}`, `[]`} {
		if _, err := ParseOutlierDetection(bad); err == nil {
			t.Errorf("ParseOutlierDetection(%s) took it", bad)
		}
	}
}

// TestFromAnnotations: a Service's annotations; the error names the
// annotation and the defaults come with it.
func TestFromAnnotations(t *testing.T) {
	for _, tt := range []struct {
		name    string
		a       map[string]string
		policy  string
		outlier bool
		wantErr string
	}{
		{"none", nil, RoundRobin, false, ""},
		{"least_request", map[string]string{AnnotationPolicy: "least_request", AnnotationPolicyConfig: `{"choiceCount": 4}`}, LeastRequest, false, ""},
		{"outlier detection", map[string]string{AnnotationOutlierDetection: `{"interval": "1s"}`}, RoundRobin, true, ""},
		{"config without policy", map[string]string{AnnotationPolicyConfig: `{"choiceCount": 4}`}, RoundRobin, false, "round_robin takes no settings"},
		{"bad policy", map[string]string{AnnotationPolicy: "fastest"}, RoundRobin, false, `annotation xds.pinlab.dev/lb-policy="fastest"`},
		{"bad outlier detection", map[string]string{AnnotationOutlierDetection: `{"interval": 1}`}, RoundRobin, false, "annotation xds.pinlab.dev/outlier-detection"},
		{"a misspelt annotation", map[string]string{AnnotationPolicy: "least_request", "xds.pinlab.dev/lb-conf": `{"choiceCount": 3}`}, RoundRobin, false, "annotation xds.pinlab.dev/lb-conf: unknown"},
		{"another prefix", map[string]string{"example.com/lb-conf": "x"}, RoundRobin, false, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, od, err := FromAnnotations(tt.a)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error %v, want one with %q", err, tt.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if p.Name != tt.policy || (od != nil) != tt.outlier {
				t.Errorf("policy %q, outlier detection %v; want %q, %v", p.Name, od, tt.policy, tt.outlier)
			}
		})
	}
}

// TestCheckOutsideXDS: ring_hash without a header cannot work outside
// xDS; with one, or any other policy, can.
func TestCheckOutsideXDS(t *testing.T) {
	for _, tt := range []struct {
		name, settings string
		ok             bool
	}{
		{"ring_hash", "", false},
		{"ring_hash", `{"minRingSize": 64}`, false},
		{"ring_hash", `{"requestHashHeader": "pinlab-client"}`, true},
		{"least_request", "", true},
		{"round_robin", "", true},
	} {
		p, err := Parse(tt.name, tt.settings)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.CheckOutsideXDS(); (err == nil) != tt.ok {
			t.Errorf("%s %s: CheckOutsideXDS() = %v, want ok %v", tt.name, tt.settings, err, tt.ok)
		}
	}
}

// TestOutlierDetectionString: reports name the ejection kinds with A50's
// defaults for what the settings leave out.
func TestOutlierDetectionString(t *testing.T) {
	tests := []struct{ settings, want string }{
		{`{}`, "no ejection kind (ejects nothing)"},
		{`{"interval": "1s", "baseEjectionTime": "30s", "maxEjectionPercent": 50, "failurePercentageEjection": {"threshold": 30, "minimumHosts": 3, "requestVolume": 20}}`,
			"failure percentage above 30% (20 calls, 3 hosts) every 1s, ejected 30s+, at most 50% of endpoints"},
		{`{"successRateEjection": {}}`, "success rate 1.9 stdev below the mean (100 calls, 5 hosts) every 10s, ejected 30s+, at most 10% of endpoints"},
		{`{"successRateEjection": {"stdevFactor": 1000}, "failurePercentageEjection": {}}`,
			"success rate 1.0 stdev below the mean (100 calls, 5 hosts) or failure percentage above 85% (50 calls, 5 hosts) every 10s, ejected 30s+, at most 10% of endpoints"},
		{`{"failurePercentageEjection": {"enforcementPercentage": 50}}`, "failure percentage above 85% (50 calls, 5 hosts, enforced 50%) every 10s, ejected 30s+, at most 10% of endpoints"},
		{`{"failurePercentageEjection": {"enforcementPercentage": 0}}`, "failure percentage above 85% (50 calls, 5 hosts, enforced 0%): ejects nothing"},
		{`{"maxEjectionPercent": 0, "failurePercentageEjection": {}}`, "failure percentage above 85% (50 calls, 5 hosts): ejects nothing"},
	}
	for _, tt := range tests {
		od, err := ParseOutlierDetection(tt.settings)
		if err != nil {
			t.Fatalf("%s: %v", tt.settings, err)
		}
		if got := (&od).String(); got != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.settings, got, tt.want)
		}
	}
}

// TestSettingsTypeErrors: a setting of the wrong type is named with what
// it takes, not with Go's type names.
func TestSettingsTypeErrors(t *testing.T) {
	tests := []struct{ settings, want string }{
		{`{"successRateEjection": {"stdevFactor": -1}}`, "successRateEjection.stdevFactor: got number -1, want a whole number from 0 to 4294967295"},
		{`{"maxEjectionPercent": "half"}`, "maxEjectionPercent: got string, want a whole number from 0 to 4294967295"},
		{`{"interval": "-1s"}`, `interval: got "-1s", want a duration such as "10s" (0 or more)`},
		{`{"baseEjectionTime": 10}`, `baseEjectionTime: got 10, want a duration such as "10s"`},
		{`[1, 2]`, "got array, want a JSON object of settings"},
		{`5`, "got number, want a JSON object of settings"},
		{``, "empty: want a JSON object of settings"},
		{`{"interval": "1ns", "failurePercentageEjection": {}}`, "interval 1ns: pinlab takes 10ms or more"},
	}
	for _, tt := range tests {
		_, err := ParseOutlierDetection(tt.settings)
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "Go struct") {
			t.Errorf("%s: %v, want %q", tt.settings, err, tt.want)
		}
	}
}
