//go:build tools

// Package tools pins the CNI reference plugins the real control plane
// tier's per-pod network namespaces use: bridge, host-local and loopback
// (containernetworking/plugins), built by build.sh.
package tools

import (
	_ "github.com/containernetworking/plugins/plugins/ipam/host-local"
	_ "github.com/containernetworking/plugins/plugins/main/bridge"
	_ "github.com/containernetworking/plugins/plugins/main/loopback"
)
