//go:build !linux

package loopback

import "net"

// links lists the interfaces' names; kinds and bridges are unknown here.
func links() ([]iface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	out := make([]iface, len(ifs))
	for i, ifc := range ifs {
		out[i] = iface{name: ifc.Name}
	}
	return out, nil
}
