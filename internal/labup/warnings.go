package labup

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/scenario"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
)

// warnings lists what a lab up would start but that cannot work as the
// manifest's author likely expects, each at its document and field:
//
//   - what scenario.LoadObjects found (File.Warnings): what the API server
//     takes but would spoil a scenario run, such as a Service that selects
//     no pods or an EndpointSlice without its Service;
//   - a UDP or SCTP port on a Service that selects pods: the lab's pods are
//     gRPC servers on TCP and its kube-proxy relays TCP only, so nothing
//     answers there (DNS still publishes the port in SRV records, which is
//     why this is a warning and not an error);
//   - an externalName that is an IP address: the API server takes it as a
//     name of digits and the cluster DNS, as CoreDNS, answers NXDOMAIN;
//   - IPv6 addresses (see ipv6Warnings): DNS serves them, no traffic goes;
//   - probes that can never succeed (scenario.File.ProbeWarnings): the API
//     server accepts them, and the pods never turn Ready or keep restarting.
func warnings(f *scenario.File) []error {
	out := append([]error(nil), f.Warnings...)
	for _, o := range f.Objects {
		out = append(out, ipv6Warnings(o)...)
		s, ok := o.Obj.(*corev1.Service)
		if !ok {
			continue
		}
		if s.Spec.Type == corev1.ServiceTypeExternalName {
			if _, err := netip.ParseAddr(strings.TrimSuffix(s.Spec.ExternalName, ".")); err == nil {
				out = append(out, o.Doc.Errorf("spec.externalName", "%s is an IP address: Kubernetes takes it as a DNS name of digits, and the cluster DNS answers NXDOMAIN for this Service, as CoreDNS does; to give a name fixed addresses, use a Service without a selector and an EndpointSlice", s.Spec.ExternalName))
			}
			continue
		}
		if len(s.Spec.Selector) == 0 {
			continue
		}
		for i, p := range s.Spec.Ports {
			if p.Protocol == "" || p.Protocol == corev1.ProtocolTCP {
				continue
			}
			out = append(out, o.Doc.Errorf(fmt.Sprintf("spec.ports[%d].protocol", i), "%s: the lab's pods serve TCP only and its kube-proxy relays TCP only, so nothing answers on port %d/%s (the DNS still lists it in SRV records)", p.Protocol, p.Port, p.Protocol))
		}
	}
	for _, p := range f.ProbeWarnings() {
		out = append(out, probeWarning(p))
	}
	return out
}

// probeWarning words a probe that can never succeed by what it does to the
// pods.
func probeWarning(p scenario.ProbeWarning) error {
	if p.NeverReady {
		return fmt.Errorf("%w: the pods start but never turn Ready, as in Kubernetes; lab up does not wait for %s %s/%s", p.Err, p.Kind, p.Namespace, p.Name)
	}
	return fmt.Errorf("%w: the kubelet restarts the container every time the probe fails its failureThreshold, as in Kubernetes", p.Err)
}

// neverReady lists the workloads whose pods never turn Ready because of a
// probe (see warnings), for lab.WaitReady to skip.
func neverReady(f *scenario.File) []lab.WorkloadRef {
	var out []lab.WorkloadRef
	for _, p := range f.ProbeWarnings() {
		if ref := (lab.WorkloadRef{Kind: p.Kind, Namespace: p.Namespace, Name: p.Name}); p.NeverReady && !slices.Contains(out, ref) {
			out = append(out, ref)
		}
	}
	return out
}

// ipv6Warnings reports the IPv6 addresses of a Service's clusterIPs or a
// hand-written EndpointSlice, and a PreferDualStack Service that gets no
// IPv6 ClusterIP. The cluster DNS serves IPv6 addresses (AAAA, ip6.arpa
// PTR) as CoreDNS does, but the lab's kube-proxy and clients carry IPv4
// loopback only and never send traffic outside 127.0.0.0/8.
func ipv6Warnings(o scenario.Object) []error {
	const carried = "the cluster DNS serves it (AAAA and ip6.arpa PTR), but the lab carries IPv4 loopback traffic only, so nothing answers there and the lab sends nothing to it"
	var out []error
	switch obj := o.Obj.(type) {
	case *corev1.Service:
		for i, ip := range obj.Spec.ClusterIPs {
			if a, err := netip.ParseAddr(ip); err == nil && a.Is6() {
				out = append(out, o.Doc.Errorf(fmt.Sprintf("spec.clusterIPs[%d]", i), "%s is IPv6: %s", ip, carried))
			}
		}
		if p := obj.Spec.IPFamilyPolicy; p != nil && *p == corev1.IPFamilyPolicyPreferDualStack && len(obj.Spec.ClusterIPs) < 2 {
			out = append(out, o.Doc.Errorf("spec.ipFamilyPolicy", "PreferDualStack: the lab allocates no IPv6 ClusterIPs, so this Service is IPv4 only, as on a cluster without an IPv6 range; write the IPv6 address in spec.clusterIPs[1] to have DNS serve it"))
		}
	case *discoveryv1.EndpointSlice:
		for i, ep := range obj.Endpoints {
			for j, a := range ep.Addresses {
				if ip, err := netip.ParseAddr(a); err == nil && ip.Is6() {
					out = append(out, o.Doc.Errorf(fmt.Sprintf("endpoints[%d].addresses[%d]", i, j), "%s is IPv6: %s", a, carried))
				}
			}
		}
	}
	return out
}

// applyError maps an API error from creating f's objects to the document
// and field it concerns (the API names the object's kind and name), as
// scenario runs do; other errors pass unchanged.
func applyError(f *scenario.File, err error) error {
	var se *apierrors.StatusError
	if !errors.As(err, &se) || se.ErrStatus.Details == nil {
		return err
	}
	det := se.ErrStatus.Details
	for _, o := range f.Objects {
		m, merr := meta.Accessor(o.Obj)
		if merr != nil || m.GetName() != det.Name || det.Kind != "" && !strings.EqualFold(o.Doc.Kind, det.Kind) {
			continue
		}
		return apiError(o, err, "the API server rejected it")
	}
	return err
}

// apiError reports the first field cause of an API error at o's document,
// with why (e.g. "the API server would reject it") in parentheses.
func apiError(o scenario.Object, err error, why string) error {
	var se *apierrors.StatusError
	if errors.As(err, &se) && se.ErrStatus.Details != nil && len(se.ErrStatus.Details.Causes) > 0 {
		c := se.ErrStatus.Details.Causes[0]
		return o.Doc.Errorf(c.Field, "%s (%s)", c.Message, why)
	}
	return o.Doc.Errorf("", "%v (%s)", err, why)
}
