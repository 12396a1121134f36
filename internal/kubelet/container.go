package kubelet

import (
	"net/netip"

	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/workload"
	corev1 "k8s.io/api/core/v1"
)

// containerConfig turns a pod into its process's config at ip.
func containerConfig(p *corev1.Pod, ip netip.Addr) (processConfig, error) {
	w, err := workload.For(&p.Spec)
	if err != nil {
		return processConfig{}, err
	}
	pc := processConfig{grpc: pod.Config{
		Name:                  p.Name,
		Namespace:             p.Namespace,
		Addr:                  netip.AddrPortFrom(ip, uint16(w.Port)),
		MaxConnectionAge:      w.Args.MaxConnectionAge,
		MaxConnectionAgeGrace: w.Args.MaxConnectionAgeGrace,
		StartupDelay:          w.Args.StartupDelay,
		DrainDelay:            w.Args.DrainDelay,
		ServiceTime:           w.Args.ServiceTime,
		NoChannelz:            w.Args.NoChannelz,
		Metrics:               w.Args.Metrics,
	}}
	if w.MetricsPort != 0 {
		pc.grpc.MetricsAddr = netip.AddrPortFrom(ip, uint16(w.MetricsPort))
	}
	if w.HTTPPort != 0 {
		pc.web = &pod.WebConfig{Name: p.Name, Namespace: p.Namespace, Addr: netip.AddrPortFrom(ip, uint16(w.HTTPPort)), ServiceTime: w.Args.ServiceTime}
	}
	return pc, nil
}
