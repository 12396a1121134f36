//go:build linux

package loopback

import "github.com/vishvananda/netlink"

// links lists this namespace's interfaces through netlink.
func links() ([]iface, error) {
	ls, err := netlink.LinkList()
	if err != nil {
		return nil, err
	}
	names := map[int]string{}
	for _, l := range ls {
		names[l.Attrs().Index] = l.Attrs().Name
	}
	out := make([]iface, len(ls))
	for i, l := range ls {
		out[i] = iface{name: l.Attrs().Name, kind: l.Type(), master: names[l.Attrs().MasterIndex]}
	}
	return out, nil
}
