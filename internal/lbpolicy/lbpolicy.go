// Package lbpolicy holds the load-balancing policies grpc-go ships, with
// their settings, as one value that the scenario's client groups, the
// xDS control plane's Service annotations and the load client share: a
// client channel's default service config for dns:/// targets, and an
// xDS Cluster's load_balancing_policy for xds:/// ones.
//
// The JSON field names are grpc-go's service config names for each
// policy (balancer/leastrequest, balancer/weightedroundrobin,
// balancer/ringhash, and gRFC A50's outlier detection), so that what a
// user writes here is what they would write in a service config.
package lbpolicy

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The policies, by the names users write.
const (
	PickFirst          = "pick_first"
	RoundRobin         = "round_robin"
	LeastRequest       = "least_request"
	WeightedRoundRobin = "weighted_round_robin"
	RingHash           = "ring_hash"
)

// Names lists the policies in the order the docs give them.
var Names = []string{PickFirst, RoundRobin, LeastRequest, WeightedRoundRobin, RingHash}

// Policy is one policy with its settings; the zero value is pick_first
// with grpc-go's defaults. Only the settings of Name may be set.
type Policy struct {
	Name string
	// LeastRequest: how many random endpoints each pick compares (grpc-go:
	// choiceCount, default 2, at least 2).
	LeastRequest *LeastRequestConfig
	// WRR: weighted_round_robin's settings (grpc-go's defaults when nil).
	WRR *WRRConfig
	// Ring: ring_hash's settings.
	Ring *RingHashConfig
}

// LeastRequestConfig is least_request's setting.
type LeastRequestConfig struct {
	ChoiceCount uint32 `json:"choiceCount,omitempty"`
}

// WRRConfig is weighted_round_robin's settings, gRFC A58: endpoint
// weights come from ORCA load reports, per call (the default) or out of
// band. Zero durations take grpc-go's defaults: blackout 10 s, weight
// expiration 3 min, weight update 1 s, OOB reporting 10 s.
type WRRConfig struct {
	EnableOOBLoadReport     bool     `json:"enableOobLoadReport,omitempty"`
	OOBReportingPeriod      Duration `json:"oobReportingPeriod,omitempty"`
	BlackoutPeriod          Duration `json:"blackoutPeriod,omitempty"`
	WeightExpirationPeriod  Duration `json:"weightExpirationPeriod,omitempty"`
	WeightUpdatePeriod      Duration `json:"weightUpdatePeriod,omitempty"`
	ErrorUtilizationPenalty *float64 `json:"errorUtilizationPenalty,omitempty"`
}

// RingHashConfig is ring_hash's ring size bounds (grpc-go: 1024 and
// 4096 by default, at most 8M) and the header whose value is hashed
// (gRFC A76). Outside xDS grpc-go fails every call of a ring_hash
// channel without RequestHashHeader (only xDS routes set a hash), and
// hashes a random value for a call without the header; over xDS the
// header becomes the route's hash policy (package xds), and without one
// each call is hashed at random. The lab's load clients send their name
// in the header ClientHeader.
type RingHashConfig struct {
	MinRingSize       uint64 `json:"minRingSize,omitempty"`
	MaxRingSize       uint64 `json:"maxRingSize,omitempty"`
	RequestHashHeader string `json:"requestHashHeader,omitempty"`
}

// ClientHeader is the header in which the lab's load clients send their
// name with every call: a ring_hash requestHashHeader that keeps each
// client on one endpoint.
const ClientHeader = "pinlab-client"

// OutlierDetection is gRFC A50's outlier detection: endpoints whose
// calls fail more than the others are ejected for a while. Zero fields
// take the defaults A50 states: interval 10 s, base ejection time 30 s,
// max ejection time 300 s, max ejection percent 10; an ejection kind is
// off unless given.
type OutlierDetection struct {
	Interval           Duration                   `json:"interval,omitempty"`
	BaseEjectionTime   Duration                   `json:"baseEjectionTime,omitempty"`
	MaxEjectionTime    Duration                   `json:"maxEjectionTime,omitempty"`
	MaxEjectionPercent *uint32                    `json:"maxEjectionPercent,omitempty"`
	SuccessRate        *SuccessRateEjection       `json:"successRateEjection,omitempty"`
	FailurePercentage  *FailurePercentageEjection `json:"failurePercentageEjection,omitempty"`
}

// SuccessRateEjection ejects endpoints whose success rate is stdevFactor/1000
// standard deviations below the mean (defaults 1900, 100%, 5 hosts, 100
// calls).
type SuccessRateEjection struct {
	StdevFactor           *uint32 `json:"stdevFactor,omitempty"`
	EnforcementPercentage *uint32 `json:"enforcementPercentage,omitempty"`
	MinimumHosts          *uint32 `json:"minimumHosts,omitempty"`
	RequestVolume         *uint32 `json:"requestVolume,omitempty"`
}

// FailurePercentageEjection ejects endpoints that fail more than
// threshold percent of their calls (defaults 85, 100%, 5 hosts, 50
// calls).
type FailurePercentageEjection struct {
	Threshold             *uint32 `json:"threshold,omitempty"`
	EnforcementPercentage *uint32 `json:"enforcementPercentage,omitempty"`
	MinimumHosts          *uint32 `json:"minimumHosts,omitempty"`
	RequestVolume         *uint32 `json:"requestVolume,omitempty"`
}

// Duration is a time.Duration. It reads a Go duration string ("500ms",
// "1m30s") or the protobuf JSON form grpc-go's service config takes
// ("0.5s"), and writes the protobuf form.
type Duration time.Duration

// D is d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) MarshalJSON() ([]byte, error) {
	ns := time.Duration(d).Nanoseconds()
	s := strconv.FormatInt(ns/1e9, 10)
	if frac := ns % 1e9; frac != 0 {
		s += strings.TrimRight(fmt.Sprintf(".%09d", frac), "0")
	}
	return json.Marshal(s + "s")
}

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		// A type error: the decoder adds the field's path to it.
		return &json.UnmarshalTypeError{Value: string(b), Type: durationType}
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return &json.UnmarshalTypeError{Value: strconv.Quote(s), Type: durationType}
	}
	*d = Duration(v)
	return nil
}

// durationType is Duration's type, which errors name as a duration.
var durationType = reflect.TypeFor[Duration]()

// Parse makes a Policy of a policy name and its settings as JSON (empty:
// the defaults). Unknown names, unknown or mistyped fields and values
// grpc-go rejects are errors that name the field.
func Parse(name, settings string) (Policy, error) {
	p := Policy{Name: name}
	var into any
	switch name {
	case PickFirst, RoundRobin:
	case LeastRequest:
		p.LeastRequest = &LeastRequestConfig{}
		into = p.LeastRequest
	case WeightedRoundRobin:
		p.WRR = &WRRConfig{}
		into = p.WRR
	case RingHash:
		p.Ring = &RingHashConfig{}
		into = p.Ring
	default:
		return Policy{}, fmt.Errorf("unknown policy %q: want one of %s", name, strings.Join(Names, ", "))
	}
	if strings.TrimSpace(settings) != "" {
		if into == nil {
			return Policy{}, fmt.Errorf("%s takes no settings, got %s", name, settings)
		}
		if err := strictJSON(settings, into); err != nil {
			return Policy{}, fmt.Errorf("%s settings: %w", name, err)
		}
	}
	return p, p.Check()
}

// ParseOutlierDetection reads outlier detection settings as JSON.
func ParseOutlierDetection(settings string) (OutlierDetection, error) {
	var od OutlierDetection
	if err := strictJSON(settings, &od); err != nil {
		return OutlierDetection{}, err
	}
	return od, od.Check()
}

// jsonWant names what a JSON field of kind k takes, for errors.
func jsonWant(k reflect.Kind) string {
	switch k {
	case reflect.Uint32:
		return "a whole number from 0 to 4294967295"
	case reflect.Uint64:
		return "a whole number, 0 or more"
	case reflect.Float64, reflect.Float32:
		return "a number"
	case reflect.String, reflect.Int64:
		return "a string (a duration such as \"1s\" where a duration is meant)"
	case reflect.Struct, reflect.Pointer, reflect.Map:
		return "an object"
	case reflect.Bool:
		return "true or false"
	}
	return "a " + k.String()
}

func strictJSON(s string, into any) error {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &te) && te.Type == durationType && te.Field != "":
			return fmt.Errorf("%s: got %s, want a duration such as \"10s\" (0 or more)", te.Field, te.Value)
		case errors.As(err, &te) && te.Field != "":
			return fmt.Errorf("%s: got %s, want %s", te.Field, te.Value, jsonWant(te.Type.Kind()))
		case errors.As(err, &te):
			return fmt.Errorf("got %s, want a JSON object of settings", te.Value)
		case errors.Is(err, io.EOF):
			return errors.New("empty: want a JSON object of settings")
		}
		return err
	}
	if dec.More() {
		return errors.New("more data after the JSON object")
	}
	return nil
}

// Check reports the settings grpc-go would reject.
func (p Policy) Check() error {
	if !slices.Contains(Names, p.Name) {
		return fmt.Errorf("unknown policy %q: want one of %s", p.Name, strings.Join(Names, ", "))
	}
	if lr := p.LeastRequest; lr != nil && lr.ChoiceCount == 1 {
		return errors.New("least_request: choiceCount must be at least 2 (grpc-go rejects 1)")
	}
	if w := p.WRR; w != nil && w.ErrorUtilizationPenalty != nil && *w.ErrorUtilizationPenalty < 0 {
		return errors.New("weighted_round_robin: errorUtilizationPenalty must not be negative")
	}
	if r := p.Ring; r != nil {
		const most, defaultMax = 8 << 20, 4096
		if r.MinRingSize > most || r.MaxRingSize > most {
			return fmt.Errorf("ring_hash: ring sizes are at most %d", most)
		}
		if max := cmp.Or(r.MaxRingSize, defaultMax); r.MinRingSize > max {
			return fmt.Errorf("ring_hash: minRingSize %d above maxRingSize %d (grpc-go's default when unset is %d)", r.MinRingSize, max, defaultMax)
		}
		if h := r.RequestHashHeader; h != "" {
			if strings.HasSuffix(h, "-bin") || strings.ToLower(h) != h || strings.ContainsFunc(h, func(c rune) bool {
				return !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.')
			}) {
				return fmt.Errorf("ring_hash: requestHashHeader %q: a lower-case header name of a-z, 0-9, -, _ and ., not ending in -bin", h)
			}
		}
	}
	return nil
}

// CheckOutsideXDS reports what grpc-go cannot do with p on a channel
// whose resolver is not xDS: ring_hash without a requestHashHeader fails
// every call there.
func (p Policy) CheckOutsideXDS() error {
	if p.Name == RingHash && (p.Ring == nil || p.Ring.RequestHashHeader == "") {
		return fmt.Errorf("ring_hash needs requestHashHeader outside xDS (grpc-go fails every call without it); the lab's clients send their name in %q", ClientHeader)
	}
	return nil
}

// MinInterval is the shortest outlier detection interval pinlab takes:
// every client sweeps its endpoints on that timer, and grpc-go, which
// takes any interval above 0, would spin a client on a nanosecond one.
const MinInterval = 10 * time.Millisecond

// Check reports the settings gRFC A50 rejects, and an interval under
// MinInterval.
func (od OutlierDetection) Check() error {
	if i := od.Interval.D(); i > 0 && i < MinInterval {
		return fmt.Errorf("interval %v: pinlab takes %v or more (every client sweeps its endpoints that often)", i, MinInterval)
	}
	if od.MaxEjectionPercent != nil && *od.MaxEjectionPercent > 100 {
		return fmt.Errorf("maxEjectionPercent %d above 100", *od.MaxEjectionPercent)
	}
	if sr := od.SuccessRate; sr != nil && sr.EnforcementPercentage != nil && *sr.EnforcementPercentage > 100 {
		return fmt.Errorf("successRateEjection.enforcementPercentage %d above 100", *sr.EnforcementPercentage)
	}
	if fp := od.FailurePercentage; fp != nil {
		if fp.Threshold != nil && *fp.Threshold > 100 {
			return fmt.Errorf("failurePercentageEjection.threshold %d above 100", *fp.Threshold)
		}
		if fp.EnforcementPercentage != nil && *fp.EnforcementPercentage > 100 {
			return fmt.Errorf("failurePercentageEjection.enforcementPercentage %d above 100", *fp.EnforcementPercentage)
		}
	}
	return nil
}

// Ejects reports whether od can eject anything: an ejection kind is on
// with an enforcement percentage above 0 (A50's default: 100), and
// maxEjectionPercent is not 0 (grpc-go ejects no more once the ejected
// share reaches it).
func (od *OutlierDetection) Ejects() bool {
	if p := od.MaxEjectionPercent; p != nil && *p == 0 {
		return false
	}
	enforced := func(p *uint32) bool { return p == nil || *p > 0 }
	return od.SuccessRate != nil && enforced(od.SuccessRate.EnforcementPercentage) ||
		od.FailurePercentage != nil && enforced(od.FailurePercentage.EnforcementPercentage)
}

// String describes od for reports, with A50's defaults filled in:
// "failure percentage above 30% (20 calls, 3 hosts) every 1s, ejected
// 30s+, at most 50% of endpoints"; an enforcement percentage other than
// 100 is named ("enforced 50%"). An outlier detection that ejects nothing
// (no ejection kind, or enforcement 0) says so.
func (od *OutlierDetection) String() string {
	orU := func(v *uint32, d uint32) uint32 {
		if v != nil {
			return *v
		}
		return d
	}
	enforced := func(p *uint32) string {
		if n := orU(p, 100); n != 100 {
			return fmt.Sprintf(", enforced %d%%", n)
		}
		return ""
	}
	var kinds []string
	if sr := od.SuccessRate; sr != nil {
		kinds = append(kinds, fmt.Sprintf("success rate %.1f stdev below the mean (%d calls, %d hosts%s)",
			float64(orU(sr.StdevFactor, 1900))/1000, orU(sr.RequestVolume, 100), orU(sr.MinimumHosts, 5), enforced(sr.EnforcementPercentage)))
	}
	if fp := od.FailurePercentage; fp != nil {
		kinds = append(kinds, fmt.Sprintf("failure percentage above %d%% (%d calls, %d hosts%s)",
			orU(fp.Threshold, 85), orU(fp.RequestVolume, 50), orU(fp.MinimumHosts, 5), enforced(fp.EnforcementPercentage)))
	}
	if !od.Ejects() {
		if len(kinds) == 0 {
			return "no ejection kind (ejects nothing)"
		}
		return strings.Join(kinds, " or ") + ": ejects nothing"
	}
	or := func(d Duration, def time.Duration) time.Duration {
		if d != 0 {
			return d.D()
		}
		return def
	}
	return fmt.Sprintf("%s every %v, ejected %v+, at most %d%% of endpoints", strings.Join(kinds, " or "),
		or(od.Interval, 10*time.Second), or(od.BaseEjectionTime, 30*time.Second), orU(od.MaxEjectionPercent, 10))
}

// GRPCName is the name grpc-go registers the policy's balancer under.
func (p Policy) GRPCName() string {
	switch p.Name {
	case LeastRequest:
		return "least_request_experimental"
	case RingHash:
		return "ring_hash_experimental"
	case "":
		return PickFirst
	}
	return p.Name
}

// ServiceConfig is the policy as a client channel's default service
// config (grpc.WithDefaultServiceConfig), for a dns:/// or kubernetes:///
// target. The policy's balancer must be registered: its grpc-go package
// (balancer/leastrequest, balancer/weightedroundrobin, balancer/ringhash)
// imported by the program.
func (p Policy) ServiceConfig() string {
	// The types of Settings always marshal.
	b, _ := json.Marshal(map[string]any{"loadBalancingConfig": []any{map[string]any{p.GRPCName(): p.Settings()}}})
	return string(bytes.TrimSpace(b))
}

// SettingsJSON is the policy's settings as compact JSON with grpc-go's
// names, as given (defaults left out); "" when it has none.
func (p Policy) SettingsJSON() string {
	if p.LeastRequest == nil && p.WRR == nil && p.Ring == nil {
		return ""
	}
	b, err := json.Marshal(p.Settings())
	if err != nil || string(b) == "{}" {
		return ""
	}
	return string(b)
}

// Settings is the policy's config object in a service config's
// loadBalancingConfig entry (under GRPCName): {} without settings.
func (p Policy) Settings() any {
	switch {
	case p.LeastRequest != nil:
		return p.LeastRequest
	case p.WRR != nil:
		return p.WRR
	case p.Ring != nil:
		return p.Ring
	}
	return struct{}{}
}

// annotationPrefix starts every annotation of this package; another
// name under it is an error (a misspelling).
const annotationPrefix = "xds.pinlab.dev/"

// The Service annotations that choose a Service's policy for xDS clients
// (package xds serves them in the Service's Cluster).
const (
	// AnnotationPolicy names the policy: round_robin (the default),
	// least_request, weighted_round_robin, ring_hash or pick_first.
	AnnotationPolicy = "xds.pinlab.dev/lb-policy"
	// AnnotationPolicyConfig is the policy's settings as JSON, with
	// grpc-go's service config names (Parse).
	AnnotationPolicyConfig = "xds.pinlab.dev/lb-config"
	// AnnotationOutlierDetection turns outlier detection on, with gRFC
	// A50's settings as JSON (OutlierDetection).
	AnnotationOutlierDetection = "xds.pinlab.dev/outlier-detection"
)

// HasAnnotations reports whether a carries any xds.pinlab.dev/
// annotation.
func HasAnnotations(a map[string]string) bool {
	for k := range a {
		if strings.HasPrefix(k, annotationPrefix) {
			return true
		}
	}
	return false
}

// FromAnnotations reads a Service's annotations: its policy (round_robin
// when unset) and its outlier detection (nil when unset). The error
// names the annotation (an unknown one under xds.pinlab.dev/ too); with
// it, the values returned are the defaults.
func FromAnnotations(a map[string]string) (Policy, *OutlierDetection, error) {
	def := Policy{Name: RoundRobin}
	for k := range a {
		if strings.HasPrefix(k, annotationPrefix) && k != AnnotationPolicy && k != AnnotationPolicyConfig && k != AnnotationOutlierDetection {
			return def, nil, fmt.Errorf("annotation %s: unknown; want %s, %s or %s", k, AnnotationPolicy, AnnotationPolicyConfig, AnnotationOutlierDetection)
		}
	}
	name, cfg := a[AnnotationPolicy], a[AnnotationPolicyConfig]
	if name == "" {
		name = RoundRobin
	}
	p, err := Parse(name, cfg)
	if err != nil {
		if cfg == "" {
			return def, nil, fmt.Errorf("annotation %s=%q: %w", AnnotationPolicy, a[AnnotationPolicy], err)
		}
		if a[AnnotationPolicy] == "" {
			return def, nil, fmt.Errorf("annotation %s=%q (no %s: round_robin): %w", AnnotationPolicyConfig, cfg, AnnotationPolicy, err)
		}
		return def, nil, fmt.Errorf("annotation %s=%q, %s=%q: %w", AnnotationPolicy, a[AnnotationPolicy], AnnotationPolicyConfig, cfg, err)
	}
	od, ok := a[AnnotationOutlierDetection]
	if !ok {
		return p, nil, nil
	}
	o, err := ParseOutlierDetection(od)
	if err != nil {
		return def, nil, fmt.Errorf("annotation %s=%q: %w", AnnotationOutlierDetection, od, err)
	}
	return p, &o, nil
}
