package agent

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ParseArgs reads pinlab-agent's command line ([--port N[,N...]]...
// [--interval D] [--count N] [--proc] [--version]) into Options, and says
// whether --version was given. Errors name the flag and what it wants;
// --help gives flag.ErrHelp. The lab's kubelet runs the agent's ephemeral
// container through it too.
func ParseArgs(args []string) (Options, bool, error) {
	fs := flag.NewFlagSet("pinlab-agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var ports []string
	fs.Func("port", "serving port; repeat or comma-separate", func(s string) error {
		ports = append(ports, strings.Split(s, ",")...)
		return nil
	})
	interval := fs.Duration("interval", time.Second, "time between readings")
	count := fs.Int("count", 0, "readings to print; 0: until stopped")
	proc := fs.Bool("proc", false, "read /proc/net/tcp{,6} (no bytes) instead of sock_diag")
	version := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return Options{}, false, err
	}
	if fs.NArg() > 0 {
		return Options{}, false, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	o := Options{Interval: *interval, Count: *count, Proc: *proc}
	for _, s := range ports {
		p, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || p < 1 || p > 65535 {
			return Options{}, false, fmt.Errorf("--port %s: want a port 1-65535", s)
		}
		o.Ports = append(o.Ports, p)
	}
	slices.Sort(o.Ports)
	o.Ports = slices.Compact(o.Ports)
	if *interval <= 0 {
		return Options{}, false, fmt.Errorf("--interval %v: want more than 0", *interval)
	}
	if *count < 0 {
		return Options{}, false, fmt.Errorf("--count %d: want 0 (until stopped) or more", *count)
	}
	return o, *version, nil
}
