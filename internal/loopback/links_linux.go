//go:build linux

package loopback

import (
	"errors"

	"github.com/vishvananda/netlink"
)

// links lists this namespace's interfaces through netlink. A dump that an
// interface added or removed meanwhile interrupted (a pod's veth, say) is
// taken again, up to 5 times in all.
func links() ([]iface, error) {
	ls, err := netlink.LinkList()
	for try := 1; errors.Is(err, netlink.ErrDumpInterrupted) && try < 5; try++ {
		ls, err = netlink.LinkList()
	}
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
