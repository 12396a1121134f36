package podshell

import (
	"fmt"
	"net"
	"os"
	"strings"
)

// in runs f in the pod's network namespace, or here when it has none.
func (sh *shell) in(f func() error) error {
	if sh.pod.Netns == nil {
		return f()
	}
	return sh.pod.Netns.Do(f)
}

// procNet are the kernel tables cat reads, by path.
var procNet = map[string]string{
	"/proc/net/tcp": "tcp", "/proc/net/tcp6": "tcp6", "/proc/net/udp": "udp", "/proc/net/udp6": "udp6",
	"/proc/self/net/tcp": "tcp", "/proc/self/net/tcp6": "tcp6", "/proc/self/net/udp": "udp", "/proc/self/net/udp6": "udp6",
}

func (sh *shell) cat(argv []string) int {
	if len(argv) == 1 {
		fmt.Fprintln(sh.s.Err, "cat: reading standard input is not supported here; name a file")
		return 1
	}
	code := 0
	for _, path := range argv[1:] {
		b, err := sh.file(path)
		if err != nil {
			fmt.Fprintf(sh.s.Err, "cat: %s: %v\n", path, err)
			code = 1
			continue
		}
		sh.s.Out.Write(b)
	}
	return code
}

// file is the content of path as the pod sees it.
func (sh *shell) file(path string) ([]byte, error) {
	if table, ok := procNet[path]; ok {
		var b []byte
		err := sh.in(func() (err error) {
			// thread-self: the table of the namespace this thread is in
			// (/proc/self/net is the process's main thread's).
			b, err = os.ReadFile("/proc/thread-self/net/" + table)
			return err
		})
		return b, err
	}
	switch path {
	case "/etc/hostname":
		return []byte(hostName(sh.pod.Pod) + "\n"), nil
	case "/etc/resolv.conf":
		return []byte(sh.pod.ResolvConf), nil
	case "/etc/hosts":
		return []byte(hosts(sh)), nil
	}
	return nil, fmt.Errorf("No such file or directory (a pinlab pod has no file system; try help)")
}

// hosts is /etc/hosts as the kubelet writes it for a pod
// (managedHostsFileContent): localhost entries, then the pod's IP with its
// host name, and the hostAliases.
func hosts(sh *shell) string {
	var b strings.Builder
	b.WriteString("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	b.WriteString("fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n")
	p := sh.pod.Pod
	name := hostName(p)
	if p.Spec.Subdomain != "" {
		name = fmt.Sprintf("%s.%s.%s.svc.cluster.local\t%s", name, p.Spec.Subdomain, p.Namespace, name)
	}
	if p.Status.PodIP != "" {
		fmt.Fprintf(&b, "%s\t%s\n", p.Status.PodIP, name)
	}
	if len(p.Spec.HostAliases) > 0 {
		b.WriteString("\n# Entries added by HostAliases.\n")
		for _, a := range p.Spec.HostAliases {
			fmt.Fprintf(&b, "%s\t%s\n", a.IP, strings.Join(a.Hostnames, "\t"))
		}
	}
	return b.String()
}

// tcpStates are the kernel's TCP states as ss names them.
var tcpStates = map[uint8]string{
	1: "ESTAB", 2: "SYN-SENT", 3: "SYN-RECV", 4: "FIN-WAIT-1", 5: "FIN-WAIT-2", 6: "TIME-WAIT",
	7: "UNCONN", 8: "CLOSE-WAIT", 9: "LAST-ACK", 10: "LISTEN", 11: "CLOSING",
}

// ss lists sockets as ss(8) does, from sock_diag in the pod's namespace.
func (sh *shell) ss(argv []string) int {
	tcp, udp, listening, all := false, false, false, false
	for _, a := range argv[1:] {
		if !strings.HasPrefix(a, "-") || a == "-" {
			fmt.Fprintf(sh.s.Err, "ss: filters are not supported here (%q); flags: -t -u -l -a -n -p\n", a)
			return 2
		}
		for _, c := range a[1:] {
			switch c {
			case 't':
				tcp = true
			case 'u':
				udp = true
			case 'l':
				listening = true
			case 'a':
				all = true
			case 'n', 'p', '4', '6':
			default:
				fmt.Fprintf(sh.s.Err, "ss: -%c is not supported here; flags: -t -u -l -a -n -p\n", c)
				return 2
			}
		}
	}
	if !tcp && !udp {
		tcp = true
	}
	socks, err := sh.sockets(tcp, udp)
	if err != nil {
		fmt.Fprintf(sh.s.Err, "ss: %v\n", err)
		return 1
	}
	fmt.Fprintf(sh.s.Out, "%-5s %-10s %6s %6s %-28s %-28s\n", "Netid", "State", "Recv-Q", "Send-Q", "Local Address:Port", "Peer Address:Port")
	for _, r := range socks {
		state := tcpStates[r.state]
		if r.proto == "udp" {
			state = "UNCONN"
			if r.state == 1 {
				state = "ESTAB"
			}
		}
		listen := state == "LISTEN" || state == "UNCONN"
		if !all && listening != listen {
			continue
		}
		fmt.Fprintf(sh.s.Out, "%-5s %-10s %6d %6d %-28s %-28s\n", r.proto, state, r.rq, r.wq,
			endpoint(r.local, r.lport), endpoint(r.peer, r.pport))
	}
	return 0
}

// row is one socket as ss lists it.
type row struct {
	proto        string
	state        uint8 // the kernel's TCP state (UDP: 1 connected, 7 not)
	rq, wq       uint32
	local, peer  net.IP
	lport, pport uint16
}

func endpoint(ip net.IP, port uint16) string {
	host := "*"
	if ip != nil && !ip.IsUnspecified() {
		host = ip.String()
		if ip.To4() == nil {
			host = "[" + host + "]"
		}
	}
	p := "*"
	if port != 0 {
		p = fmt.Sprint(port)
	}
	return host + ":" + p
}
