package cli

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/pinlab/pinlab/internal/scenario"
	corev1 "k8s.io/api/core/v1"
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
//     name of digits and the cluster DNS, as CoreDNS, answers NXDOMAIN.
func warnings(f *scenario.File) []error {
	out := append([]error(nil), f.Warnings...)
	for _, o := range f.Objects {
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
