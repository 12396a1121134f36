package kubelet

import (
	"net/netip"

	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/workload"
	corev1 "k8s.io/api/core/v1"
)

// containerConfig turns a pod into its process's config at ip.
func containerConfig(p *corev1.Pod, ip netip.Addr) (pod.ProcessConfig, error) {
	w, err := workload.For(&p.Spec)
	if err != nil {
		return pod.ProcessConfig{}, err
	}
	return pod.ProcessConfigFor(w, p.Namespace, p.Name, ip), nil
}
