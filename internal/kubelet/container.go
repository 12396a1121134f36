package kubelet

import (
	"fmt"
	"net/netip"
	"path"
	"strings"

	"github.com/pinlab/pinlab/internal/pod"
	corev1 "k8s.io/api/core/v1"
)

// IsPinlabImage reports whether image names the pinlab image, with any
// registry, repository path, tag or digest ("pinlab",
// "ghcr.io/acme/pinlab:v1").
func IsPinlabImage(image string) bool {
	name := image
	if i := strings.IndexByte(name, '@'); i >= 0 {
		name = name[:i]
	}
	name = path.Base(name)
	if i := strings.IndexByte(name, ':'); i >= 0 {
		name = name[:i]
	}
	return name == "pinlab"
}

// ContainerArgs returns the pinlab command line of a container: its args,
// after any command that runs the pinlab binary itself.
func ContainerArgs(c *corev1.Container) ([]string, error) {
	if !IsPinlabImage(c.Image) {
		return nil, fmt.Errorf("container %q: image %q is not pinlab; the lab only runs image pinlab with args [pod, <workload>, ...]", c.Name, c.Image)
	}
	args := c.Args
	if len(c.Command) > 0 {
		if path.Base(c.Command[0]) != "pinlab" {
			return nil, fmt.Errorf("container %q: command %q does not run pinlab", c.Name, c.Command)
		}
		args = append(append([]string(nil), c.Command[1:]...), c.Args...)
	}
	return args, nil
}

// containerConfig turns a pod's single pinlab container into a server
// config. The listen port is --port, else the container's first TCP
// containerPort, else pod.DefaultPort.
func containerConfig(p *corev1.Pod, ip netip.Addr) (pod.Config, error) {
	if len(p.Spec.Containers) != 1 {
		return pod.Config{}, fmt.Errorf("pod has %d containers; the lab runs pods with exactly one pinlab container", len(p.Spec.Containers))
	}
	c := &p.Spec.Containers[0]
	args, err := ContainerArgs(c)
	if err != nil {
		return pod.Config{}, err
	}
	a, err := pod.ParseArgs(args)
	if err != nil {
		return pod.Config{}, fmt.Errorf("container %q: %w", c.Name, err)
	}
	port := a.Port
	if port == 0 {
		port = pod.DefaultPort
		for _, cp := range c.Ports {
			if cp.Protocol == "" || cp.Protocol == corev1.ProtocolTCP {
				port = int(cp.ContainerPort)
				break
			}
		}
	}
	return pod.Config{
		Name:                  p.Name,
		Namespace:             p.Namespace,
		Addr:                  netip.AddrPortFrom(ip, uint16(port)),
		MaxConnectionAge:      a.MaxConnectionAge,
		MaxConnectionAgeGrace: a.MaxConnectionAgeGrace,
	}, nil
}
