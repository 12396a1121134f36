package kubelab

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// routeProto marks the host routes pinlab adds (`ip route ... proto 199`),
// so that they are told from the host's own and swept when their labs
// are gone.
const routeProto = "199"

// hostRoutes keeps the host from sending traffic for a lab's ranges off
// the machine while a lab on a real control plane runs. Its pod and
// Service addresses (PodCIDR, ServiceCIDR: kubeadm's 10.244.0.0/16 and
// 10.96.0.0/16) exist only inside its network namespace; on the host they
// would follow the default route, so a program that resolves a pod's
// address through the lab's kubeconfig (the kubernetes:/// resolver, for
// one) would send its calls out of the machine. As root, the command on
// the host adds an unreachable route for each range (proto 199), so such
// a dial fails at once with "no route to host". Every such command holds
// the routes with a file of its own in routeHolders; the last to end, or
// the next to start after one was killed, removes them. A range the host
// routes already (its own cluster, a VPN) is left alone and said so.
// Without root, the host's routes cannot be changed: pinlab's own
// commands refuse to dial the lab's addresses from the host and print the
// `lab exec` line instead. A range the host itself uses through its
// default route (hostUses: when pinlab runs in a pod of a cluster with
// kubeadm's ranges) is left alone too.
type hostRoutes struct {
	ip     string
	holder string // this command's file in routeHolders
}

// routeHolders is where the commands holding pinlab's host routes say so,
// one file each ("PID STARTTIME"): a root-only place that does not depend
// on TMPDIR, so that labs run with different ones see each other.
var routeHolders = "/run/pinlab/routes"

// addHostRoutes adds the unreachable routes as hostRoutes says; the notes
// say what it could not do (not root, a range routed already).
func addHostRoutes() (*hostRoutes, []string) {
	if os.Geteuid() != 0 {
		return nil, []string{fmt.Sprintf("not root: the host's routes for %v and %v are left as they are; from the host, reach the lab's addresses only through `pinlab lab exec`", PodCIDR, ServiceCIDR)}
	}
	ip, err := lookIP()
	if err != nil {
		return nil, []string{err.Error()}
	}
	r := &hostRoutes{ip: ip}
	if r.holder, err = holdRoutes(); err != nil {
		return nil, []string{fmt.Sprintf("the host's routes for %v and %v are left as they are: %v", PodCIDR, ServiceCIDR, err)}
	}
	var notes []string
	for _, p := range []netip.Prefix{PodCIDR, ServiceCIDR} {
		if used := hostUses(p); used != "" {
			notes = append(notes, fmt.Sprintf("this host uses %v (%s): its route is left alone, so dials of the lab's addresses from the host go there, not into the lab", p, used))
			continue
		}
		out, err := exec.Command(ip, "route", "show", "exact", p.String()).Output()
		switch {
		case err != nil:
			notes = append(notes, fmt.Sprintf("ip route show exact %v: %v", p, err))
			continue
		case strings.Contains(string(out), "proto "+routeProto):
			continue // another lab's, which this one holds too now
		case len(strings.TrimSpace(string(out))) > 0:
			notes = append(notes, fmt.Sprintf("the host routes %v already (%s): dials of the lab's addresses from the host go there, not into the lab", p, strings.TrimSpace(string(out))))
			continue
		}
		if out, err := exec.Command(ip, "route", "add", "unreachable", p.String(), "proto", routeProto).CombinedOutput(); err != nil {
			notes = append(notes, fmt.Sprintf("ip route add unreachable %v: %v: %s", p, err, strings.TrimSpace(string(out))))
		}
	}
	return r, notes
}

// holdRoutes writes this command's holder file.
func holdRoutes() (string, error) {
	if err := os.MkdirAll(routeHolders, 0o700); err != nil {
		return "", err
	}
	start, err := startTime(os.Getpid())
	if err != nil {
		return "", err
	}
	path := filepath.Join(routeHolders, fmt.Sprint(os.Getpid()))
	return path, os.WriteFile(path, []byte(fmt.Sprintf("%d %d\n", os.Getpid(), start)), 0o600)
}

// remove gives this command's hold up and removes pinlab's routes when no
// other running command holds them; nil does nothing.
func (r *hostRoutes) remove() {
	if r == nil {
		return
	}
	os.Remove(r.holder)
	if !routesHeld() {
		delRoutes(r.ip)
	}
}

// sweepRoutes forgets the holders that are gone (killed) and removes
// pinlab's routes when no running command holds them.
func sweepRoutes() {
	if os.Geteuid() != 0 {
		return
	}
	if ip, err := lookIP(); err == nil && !routesHeld() {
		delRoutes(ip)
	}
}

// routesHeld reports whether a running command holds pinlab's routes,
// removing the holder files of those that are gone.
func routesHeld() bool {
	files, _ := filepath.Glob(filepath.Join(routeHolders, "*"))
	held := false
	for _, f := range files {
		if ownerRuns(f) {
			held = true
		} else {
			os.Remove(f)
		}
	}
	return held
}

// delRoutes removes pinlab's unreachable routes of both ranges.
func delRoutes(ip string) {
	for _, p := range []netip.Prefix{PodCIDR, ServiceCIDR} {
		exec.Command(ip, "route", "del", "unreachable", p.String(), "proto", routeProto).Run()
	}
}

// lookIP finds the ip command (iproute2), in PATH or the sbin
// directories root's PATH has.
func lookIP() (string, error) {
	if p, err := exec.LookPath("ip"); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		if p := filepath.Join(dir, "ip"); exists(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("kubelab: no ip command (Debian's iproute2): the host's routes for %v and %v are left as they are", PodCIDR, ServiceCIDR)
}

// hostUses says how the host itself uses addresses of p through its
// default route ("" when it does not, as far as it tells): a nameserver of
// its resolv.conf, or the API server of the cluster it runs in
// (KUBERNETES_SERVICE_HOST, in a pod whose cluster has kubeadm's ranges
// too). An unreachable route there would cut the host off them.
func hostUses(p netip.Prefix) string {
	if h := os.Getenv("KUBERNETES_SERVICE_HOST"); h != "" {
		if a, err := netip.ParseAddr(h); err == nil && p.Contains(a) {
			return "KUBERNETES_SERVICE_HOST " + h
		}
	}
	b, _ := os.ReadFile(resolvConf)
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "nameserver" {
			if a, err := netip.ParseAddr(f[1]); err == nil && p.Contains(a) {
				return "its nameserver " + f[1]
			}
		}
	}
	return ""
}

// resolvConf is the host's resolver configuration; a test seam.
var resolvConf = "/etc/resolv.conf"
