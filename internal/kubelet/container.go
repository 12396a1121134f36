package kubelet

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/workload"
	corev1 "k8s.io/api/core/v1"
)

// containerConfig turns a pod into its process's config at ip.
func (k *Kubelet) containerConfig(p *corev1.Pod, ip netip.Addr) (pod.ProcessConfig, error) {
	spec, pull := k.pinlabSpec(&p.Spec)
	if pull != "" {
		return pod.ProcessConfig{}, errors.New(pull)
	}
	w, err := workload.For(spec)
	if err != nil {
		return pod.ProcessConfig{}, err
	}
	return pod.ProcessConfigFor(w, p.Namespace, p.Name, ip), nil
}

// pinlabSpec returns spec as workload.For reads it: when its one
// container's image is pinned to a digest in Config.Images, a copy whose
// image is "pinlab"; otherwise spec itself. pull is not empty when that
// container's image is neither named pinlab nor held by the node: what
// the kubelet reports with ErrImagePull. Specs of other than one
// container are for workload.For to refuse.
func (k *Kubelet) pinlabSpec(spec *corev1.PodSpec) (_ *corev1.PodSpec, pull string) {
	if len(spec.Containers) != 1 {
		return spec, ""
	}
	image := spec.Containers[0].Image
	if workload.IsPinlabImage(image) {
		return spec, ""
	}
	if _, digest, ok := strings.Cut(image, "@"); ok && slices.Contains(k.cfg.Images, digest) {
		c := spec.DeepCopy()
		c.Containers[0].Image = "pinlab"
		return c, ""
	}
	held := "no image but pinlab's"
	if len(k.cfg.Images) > 0 {
		held = fmt.Sprintf("images named pinlab and, by digest, the pinlab image it was given (digests: %d)", len(k.cfg.Images))
	}
	return spec, fmt.Sprintf("Failed to pull image %q: pinlab's node runs %s (pin the image by the digest `pinlab image build` printed)", image, held)
}
