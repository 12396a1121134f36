// Package podnet gives each pod of a lab's node on the real control plane
// tier its own network namespace, as a container runtime does for a pod
// sandbox: a new network namespace per pod, set up by the CNI reference
// plugins (containernetworking/plugins v1.10.0, built by build/cni/build.sh)
// invoked through libcni as containerd invokes them, loopback for lo and
// bridge with host-local for eth0, joined to the node's namespace by a veth
// pair on a bridge whose address is the range's gateway.
//
// The pods' servers stay in pinlab's process: a Sandbox opens their
// listening sockets inside its namespace (a goroutine locked to an OS
// thread that enters the namespace for the socket call; a socket keeps the
// namespace it was made in), and runs functions there (Do) to read what a
// process in the pod sees, such as /proc/thread-self/net/tcp.
//
// A namespace lives while a descriptor holds it (no bind mount, so nothing
// is left in /run after a kill); its path for the plugins is
// /proc/PID/fd/N. Linux only; New fails elsewhere.
package podnet

import (
	"context"
	"errors"
	"net"
	"net/netip"
)

// Config configures a Network. Every field is required.
type Config struct {
	// Bridge is the name of the node's bridge: loopback.PodBridgePrefix
	// and at most 15 bytes in all.
	Bridge string
	// Subnet is the node's pod range; the bridge takes its first address
	// as the pods' gateway. Pods get the addresses Add is given (the
	// kubelet's IPAM), which must lie inside it.
	Subnet netip.Prefix
	// Local are ranges of Subnet the node itself uses on lo (its
	// InternalIP, the cluster DNS's pod address, the addresses load
	// clients dial from): they stay local when Subnet is routed to the
	// bridge, and pods reach them through the bridge (the node answers
	// ARP for them). Network.Local adds more.
	Local []netip.Prefix
	// BinDir holds the CNI plugins (BinDir()).
	BinDir string
	// StateDir receives host-local's allocations and libcni's cache; the
	// caller removes it after Close.
	StateDir string
}

// ErrUnsupported is returned by New on systems other than Linux.
var ErrUnsupported = errors.New("podnet: per-pod network namespaces need Linux")

// Listener opens a listening socket; a Sandbox's opens it inside the pod's
// namespace.
type Listener interface {
	Listen(ctx context.Context, addr string) (net.Listener, error)
}
