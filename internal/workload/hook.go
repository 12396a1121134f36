package workload

import (
	"fmt"
	"math"
	"path"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Hook is a lifecycle hook as the lab runs it. The lab's containers have no
// shell or tools, so the one thing a hook can do is take time: a sleep
// action, or an exec of sleep (["sleep", "N"] or ["/bin/sh", "-c", "sleep N"],
// with N as GNU sleep reads it: a decimal number with an optional s, m, h or
// d suffix).
type Hook struct {
	// Sleep is how long the hook runs.
	Sleep time.Duration
}

// preStopHook returns the container's preStop hook, nil without one. grace
// is the pod's terminationGracePeriodSeconds (nil: not set), which bounds a
// sleep action as the API server's validation does. A postStart hook, or a
// preStop hook the lab cannot run, is a *SpecError.
func preStopHook(c *corev1.Container, grace *int64) (*Hook, error) {
	lc := c.Lifecycle
	if lc == nil {
		return nil, nil
	}
	if lc.PostStart != nil {
		return nil, &SpecError{"containers[0].lifecycle.postStart", "postStart hooks are not supported in the lab"}
	}
	h := lc.PreStop
	if h == nil {
		return nil, nil
	}
	const field = "containers[0].lifecycle.preStop"
	switch {
	case h.Sleep != nil:
		s := h.Sleep.Seconds
		if s < 0 || (grace != nil && s > *grace) {
			limit := "terminationGracePeriodSeconds"
			if grace != nil {
				limit = fmt.Sprintf("terminationGracePeriodSeconds (%d)", *grace)
			}
			return nil, &SpecError{field + ".sleep.seconds", fmt.Sprintf("%d must be between 0 and %s, as the API server requires", s, limit)}
		}
		return &Hook{Sleep: time.Duration(s) * time.Second}, nil
	case h.Exec != nil:
		d, err := sleepCommand(h.Exec.Command)
		if err != nil {
			return nil, &SpecError{field + ".exec.command", err.Error()}
		}
		return &Hook{Sleep: d}, nil
	case h.HTTPGet != nil:
		return nil, &SpecError{field + ".httpGet", "httpGet hooks are not supported in the lab; use sleep or exec [sleep, N]"}
	case h.TCPSocket != nil:
		return nil, &SpecError{field + ".tcpSocket", "tcpSocket hooks are not run by the kubelet; use sleep or exec [sleep, N]"}
	}
	return nil, &SpecError{field, "the handler has no action; set sleep or exec"}
}

// sleepCommand reads the duration of an exec hook that only sleeps.
func sleepCommand(cmd []string) (time.Duration, error) {
	shells := map[string]bool{"sh": true, "bash": true, "dash": true, "ash": true}
	switch {
	case len(cmd) == 2 && path.Base(cmd[0]) == "sleep":
		return sleepArg(cmd[1])
	case len(cmd) == 3 && shells[path.Base(cmd[0])] && cmd[1] == "-c":
		if f := strings.Fields(cmd[2]); len(f) == 2 && f[0] == "sleep" {
			return sleepArg(f[1])
		}
	}
	return 0, fmt.Errorf("%q: the lab's containers have no shell or tools; the only exec hooks it runs are [sleep, N] and [/bin/sh, -c, sleep N]", cmd)
}

// sleepArg parses sleep's operand: a non-negative decimal number of
// seconds, or of minutes, hours or days with suffix m, h or d.
func sleepArg(arg string) (time.Duration, error) {
	unit, num := time.Second, arg
	if n := len(arg); n > 0 {
		switch arg[n-1] {
		case 's':
			num = arg[:n-1]
		case 'm':
			unit, num = time.Minute, arg[:n-1]
		case 'h':
			unit, num = time.Hour, arg[:n-1]
		case 'd':
			unit, num = 24*time.Hour, arg[:n-1]
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) || v*float64(unit) > float64(math.MaxInt64) {
		return 0, fmt.Errorf("sleep %q: want a non-negative number with an optional s, m, h or d suffix", arg)
	}
	return time.Duration(v * float64(unit)), nil
}
