package scenario

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/pinlab/pinlab/internal/plan"
)

// ErrNoScenario is CheckCluster's error for a file without a Scenario
// document (a lab manifest such as the built-in dns-demo).
var ErrNoScenario = errors.New("no Scenario document: cluster run runs a scenario, and this is a lab manifest without one (lab up takes it)")

// CheckCluster returns what of f a real cluster cannot reproduce when the
// scenario runs there (`cluster run`), every such field at once, each a
// *manifest.Error at its document and field (errors.Join; nil when
// none). A real cluster's DNS, kube-proxy (or its replacement), CNI and
// kubelet are the cluster's own, and its pods run the pinlab image's
// gRPC load client, so these are refused:
//   - spec.dns (TTL, order, pods mode, cache): the cluster's DNS answers;
//   - spec.cluster and a variant's cluster (kube-proxy mode, what a dead
//     address does, the kubelet's restart back-off);
//   - a client's resolver "cached" or "once" and its cacheTTL (they model
//     a DNS cache in the client process against the lab's DNS), its
//     l7Proxy (the lab runs the proxy in-process), a protocol other than
//     grpc and the HTTP pool sizes;
//   - EndpointSlice documents (written for the lab's pod addresses).
//
// Only the variants named in variants are checked (none named: every
// variant), so that a run of some variants is not refused for another's
// settings. f must have a Scenario document (a file lab up takes without
// one has nothing to run).
func CheckCluster(f *File, variants []string) error {
	if f.Scenario == nil {
		return ErrNoScenario
	}
	var errs []error
	sp := &f.Scenario.Spec
	d := f.doc
	for _, field := range []string{"ttl", "fixedOrder", "pods", "cache"} {
		if d.Has("spec.dns." + field) {
			errs = append(errs, d.Errorf("spec.dns."+field, "a real cluster's DNS is its own (CoreDNS as its admins set it): pinlab sets only the lab's; remove it, or run this on the lab"))
		}
	}
	errs = append(errs, clusterSettingErrors(f, "spec.cluster")...)
	for i := range sp.Clients {
		errs = append(errs, clientErrors(f, fmt.Sprintf("spec.clients[%d]", i))...)
	}
	for i, v := range sp.Variants {
		if len(variants) > 0 && !slices.Contains(variants, v.Name) {
			continue
		}
		errs = append(errs, clusterSettingErrors(f, fmt.Sprintf("spec.variants[%d].cluster", i))...)
		for j := range v.Clients {
			errs = append(errs, clientErrors(f, fmt.Sprintf("spec.variants[%d].clients[%d]", i, j))...)
		}
	}
	for _, o := range f.Objects {
		if o.Doc.GroupVersionKind().Kind == "EndpointSlice" {
			errs = append(errs, o.Doc.Errorf("kind", "an EndpointSlice written by hand lists the lab's pod addresses; on a real cluster the EndpointSlice controller writes them"))
		}
	}
	return errors.Join(errs...)
}

// clusterSettingErrors refuses the fields of a cluster settings block at
// path.
func clusterSettingErrors(f *File, path string) []error {
	var errs []error
	for _, field := range []string{"proxyMode", "deadAddress", "restartBackoff"} {
		if f.doc.Has(path + "." + field) {
			errs = append(errs, f.doc.Errorf(path+"."+field, "a real cluster's kube-proxy (or its replacement), CNI and kubelet are its own: pinlab sets them only in the lab; remove it, or run this on the lab"))
		}
	}
	return errs
}

// clientErrors refuses the client settings at path that the pinlab
// image's load client cannot have in a cluster's pod.
func clientErrors(f *File, path string) []error {
	var errs []error
	d := f.doc
	var s struct {
		Resolver string `json:"resolver"`
		Protocol string `json:"protocol"`
	}
	if raw, err := d.Raw(path); err == nil && raw != nil {
		_ = json.Unmarshal(raw, &s) // its types were checked by Load
	}
	if s.Resolver == "cached" || s.Resolver == "once" {
		errs = append(errs, d.Errorf(path+".resolver", "resolver %q models a DNS cache in the client against the lab's DNS; in a cluster's pod the client resolves as grpc-go does (\"grpc\") or watches EndpointSlices (\"kubernetes\")", s.Resolver))
	}
	if d.Has(path + ".cacheTTL") {
		errs = append(errs, d.Errorf(path+".cacheTTL", "cacheTTL is the \"cached\" resolver's, which a cluster's pod does not have"))
	}
	if d.Has(path + ".l7Proxy") {
		errs = append(errs, d.Errorf(path+".l7Proxy", "the lab runs the L7 proxy in-process; on a real cluster deploy your own proxy and point the clients' target at it"))
	}
	if s.Protocol != "" && s.Protocol != "grpc" {
		errs = append(errs, d.Errorf(path+".protocol", "the pinlab image's load client speaks gRPC only, not %q", s.Protocol))
	}
	for _, field := range []string{"maxIdleConnsPerHost", "maxConnsPerHost"} {
		if d.Has(path + "." + field) {
			errs = append(errs, d.Errorf(path+"."+field, "%s sizes the lab's HTTP/1.1 client pool; the image's load client speaks gRPC only", field))
		}
	}
	return errs
}

// OpenForCluster reads a scenario as OpenInput does and refuses, before
// its plan, what a real cluster cannot reproduce in the variants named
// (CheckCluster; none named: all).
func OpenForCluster(ctx context.Context, name string, in io.Reader, variants []string) (*plan.Plan, error) {
	return await(ctx, name, func() (*plan.Plan, error) {
		file, data, err := readInput(ctx, name, in)
		if err != nil {
			return nil, err
		}
		f, err := parse(file, data)
		if err != nil {
			return nil, err
		}
		if err := CheckCluster(f, variants); err != nil {
			return nil, err
		}
		return Load(file, data)
	})
}

// readInput reads name as OpenInput does: a file, a built-in, or In for
// "-".
func readInput(ctx context.Context, name string, in io.Reader) (string, []byte, error) {
	if name != "-" {
		return read(ctx, name)
	}
	data, err := ReadAll(ctx, InputName(name), in)
	return StdinName, data, err
}
