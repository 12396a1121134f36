package diagnose

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/pinlab/pinlab/internal/evidence"
)

// sidecarContainers are container names of L7 proxies that meshes inject
// (Istio, Linkerd, Consul, Kuma, plain Envoy).
var sidecarContainers = []string{"istio-proxy", "linkerd-proxy", "envoy", "envoy-sidecar", "consul-dataplane", "consul-connect-envoy-sidecar", "kuma-sidecar"}

// sidecarAnnotations are annotations that injectors write on a pod they
// gave an L7 sidecar, with the mesh's name.
var sidecarAnnotations = []struct{ key, value, mesh string }{
	{"sidecar.istio.io/status", "", "Istio"},
	{"linkerd.io/proxy-version", "", "Linkerd"},
	{"consul.hashicorp.com/connect-inject-status", "injected", "Consul"},
	{"kuma.io/sidecar-injected", "true", "Kuma"},
}

// sidecarSign says why a pod with these containers and annotations has an
// L7 sidecar, or returns "".
func sidecarSign(containers []string, annotations map[string]string) string {
	return cmp.Or(annotationSign(annotations), containerSign(containers))
}

// annotationSign names the mesh whose injector annotated a pod, or
// returns "": a hint only, as the annotation can outlive the proxy or be
// copied onto pods without one.
func annotationSign(annotations map[string]string) string {
	for _, a := range sidecarAnnotations {
		if v, ok := annotations[a.key]; ok && (a.value == "" || v == a.value) {
			return fmt.Sprintf("%s sidecar (annotation %s)", a.mesh, a.key)
		}
	}
	return ""
}

// containerSign names a pod's L7 sidecar container, or returns "".
func containerSign(containers []string) string {
	for _, c := range containers {
		if slices.Contains(sidecarContainers, c) {
			return fmt.Sprintf("sidecar container %q", c)
		}
	}
	return ""
}

// inboundSource is the source address Istio's inbound sidecar uses when it
// forwards to the application (since Istio 1.10).
var inboundSource = netip.MustParseAddr("127.0.0.6")

// loopbackSign says why a connection from remote to a pod at podIP comes
// from an inbound sidecar in the pod, or returns "". In the lab every
// address is in 127.0.0.0/8, so there only 127.0.0.6 and the pod's own IP
// count; on a cluster any loopback address does.
func loopbackSign(remote netip.Addr, podIP string) string {
	pod, _ := netip.ParseAddr(podIP)
	switch {
	case remote == inboundSource:
		return "inbound sidecar (connections from 127.0.0.6, Istio's inbound source)"
	case remote == pod:
		return "inbound sidecar (connections from the pod's own IP)"
	case remote.IsLoopback() && pod.IsValid() && !pod.IsLoopback():
		return "inbound sidecar (connections from loopback)"
	}
	return ""
}

// inbound reports whether a client's proxy sign is an inbound sidecar's.
func inbound(c Client) bool { return strings.HasPrefix(c.Proxy, "inbound") }

// path is step 3.
func path(ev evidence.Evidence, cls []Client, total float64) Path {
	p := Path{Kind: ev.Service.Type}
	if ev.Service.Headless() {
		p.Kind = "headless"
	}
	for _, pod := range ev.Pods {
		if s := sidecarSign(pod.Containers, pod.Annotations); s != "" {
			p.Signs = append(p.Signs, fmt.Sprintf("server pod %s has an %s; an inbound sidecar does not balance across pods, only the client's side does", pod.Name, s))
			break
		}
	}
	var via float64
	for _, c := range cls {
		if c.Hint != "" && c.Busy > 0 {
			p.Signs = append(p.Signs, fmt.Sprintf("client %s: %s", c.Name, c.Hint))
		}
		if c.Proxy == "" || inbound(c) {
			continue
		}
		via += c.Rate
		p.Signs = append(p.Signs, fmt.Sprintf("client %s: %s, %.0f %s", c.Name, c.Proxy, c.Rate, unit(ev)))
	}
	if in := inboundRate(cls); in > 0 {
		p.Signs = append(p.Signs, fmt.Sprintf("%.0f %s arrive from the pods' inbound sidecars (127.0.0.6 or the pod's own address)", in, unit(ev)))
	}
	for _, s := range ev.Siblings {
		if s.Headless() != ev.Service.Headless() {
			kind := "ClusterIP"
			if s.Headless() {
				kind = "headless"
			}
			p.Siblings = append(p.Siblings, fmt.Sprintf("%s (%s)", s.Name, kind))
		}
	}
	if total > 0 {
		p.ProxyShare = via / total
	}
	p.Proxy = total > 0 && p.ProxyShare >= ProxyShare
	return p
}

// inboundRate is the rate of calls from inbound sidecars.
func inboundRate(cls []Client) float64 {
	var r float64
	for _, c := range cls {
		if inbound(c) {
			r += c.Rate
		}
	}
	return r
}

// unit is what ev's rates count: "calls/s", "bytes/s" for an agent's, or
// "connections" for exec's.
func unit(ev evidence.Evidence) string {
	switch ev.Unit {
	case "bytes":
		return "bytes/s"
	case evidence.UnitConnMs:
		return "connections"
	}
	return "calls/s"
}
