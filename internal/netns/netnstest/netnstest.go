// Package netnstest runs a package's tests inside a private network
// namespace (package netns), so a test tier may bind and reach addresses
// such as 10.244.0.2 that are forbidden outside one.
//
//	func TestMain(m *testing.M) {
//		netnstest.Main(m, netns.PodPrefix, netns.ServicePrefix)
//	}
package netnstest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"

	"go.uber.org/goleak"

	"github.com/pinlab/pinlab/internal/machinetest"
	"github.com/pinlab/pinlab/internal/netns"
)

// RequireEnv, set to 1, makes Main fail instead of skipping every test when
// private namespaces are unavailable (as CI does).
const RequireEnv = "PINLAB_REQUIRE_NETNS"

// M is what Main runs: a *testing.M, or a wrapper around one that adds
// checks after its Run (a goroutine leak check).
type M interface{ Run() int }

// Main runs m in a private network namespace where prefixes are local on
// lo and allowed by package loopback, and exits with its code; it does not
// return. Outside such a namespace it re-executes the test binary, with
// the same arguments, inside a new one (netns.Run) and exits with the
// child's code; inside (the child) it calls netns.Setup and m.Run. When
// namespaces are unavailable it prints why and exits 0, skipping every
// test, unless PINLAB_REQUIRE_NETNS=1.
func Main(m M, prefixes ...netip.Prefix) {
	if netns.Inside() {
		os.Exit(run(m, prefixes))
	}
	// The tiers here start control planes and kube-proxies: they hold the
	// machine against the other lab-heavy test binaries.
	release := machinetest.Hold()
	code := run(m, prefixes)
	release()
	os.Exit(code)
}

// run is Main without the exit.
func run(m M, prefixes []netip.Prefix) int {
	if netns.Inside() {
		if err := netns.Setup(prefixes...); err != nil {
			fmt.Fprintf(os.Stderr, "netnstest: %v\n", err)
			return 1
		}
		return m.Run()
	}
	code, err := netns.Run(context.Background(), netns.Config{Args: os.Args[1:]})
	switch {
	case err == nil:
		return code
	case (errors.Is(err, netns.ErrUnavailable) || errors.Is(err, netns.ErrUnsupported)) && os.Getenv(RequireEnv) != "1":
		fmt.Printf("netnstest: skipping every test of this package (set %s=1 to fail instead): %v\n", RequireEnv, err)
		return 0
	}
	fmt.Fprintf(os.Stderr, "netnstest: %v\n", err)
	return 1
}

// LeakChecked wraps m so that, after its tests pass, goleak checks that no
// goroutine outlives them (the run fails if one does).
func LeakChecked(m M) M { return leakChecked{m} }

type leakChecked struct{ m M }

func (l leakChecked) Run() int {
	code := l.m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			return 1
		}
	}
	return code
}
