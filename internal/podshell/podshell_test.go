package podshell

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func testPod() Pod {
	return Pod{
		Pod: &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "pricing-abc", Namespace: "shop"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "server", Env: []corev1.EnvVar{
				{Name: "MODE", Value: "fast"},
				{Name: "SECRET", ValueFrom: &corev1.EnvVarSource{}},
			}}}},
			Status: corev1.PodStatus{PodIP: "10.244.0.7"},
		},
		ResolvConf: "search shop.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n",
	}
}

func run(t *testing.T, argv []string, in string, tty bool) (int, string, string) {
	t.Helper()
	var out, errw bytes.Buffer
	s := Streams{Out: &out, Err: &errw, TTY: tty}
	if in != "" {
		s.In = strings.NewReader(in)
	}
	code := Run(context.Background(), testPod(), argv, s)
	return code, out.String(), errw.String()
}

func TestCommands(t *testing.T) {
	for _, c := range []struct {
		name      string
		argv      []string
		in        string
		tty       bool
		code      int
		out, errs string // substrings; "" checks nothing
		notOut    string
	}{
		{name: "hostname", argv: []string{"hostname"}, out: "pricing-abc\n"},
		{name: "etc hostname", argv: []string{"cat", "/etc/hostname"}, out: "pricing-abc\n"},
		{name: "resolv.conf", argv: []string{"cat", "/etc/resolv.conf"}, out: "nameserver 10.96.0.10"},
		{name: "hosts", argv: []string{"cat", "/etc/hosts"}, out: "10.244.0.7\tpricing-abc\n"},
		{name: "env", argv: []string{"env"}, out: "MODE=fast\n", notOut: "SECRET=\n"},
		{name: "printenv one", argv: []string{"printenv", "MODE"}, out: "fast\n"},
		{name: "printenv missing", argv: []string{"printenv", "NOPE"}, code: 1},
		{name: "unknown command", argv: []string{"curl", "localhost"}, code: 127, errs: "curl: command not found"},
		{name: "a path to a builtin", argv: []string{"/bin/hostname"}, out: "pricing-abc\n"},
		{name: "missing file", argv: []string{"cat", "/etc/passwd"}, code: 1, errs: "cat: /etc/passwd: No such file or directory"},
		{name: "sh -c", argv: []string{"sh", "-c", "echo 'a  b' \"c\""}, out: "a  b c\n"},
		{name: "sh -c exit", argv: []string{"sh", "-c", "exit 3"}, code: 3},
		{name: "sh -c pipe refused", argv: []string{"sh", "-c", "cat /proc/net/tcp | grep 1F"}, code: 2, errs: "pipes, redirections"},
		{name: "sh -c unknown", argv: []string{"sh", "-c", "wget x"}, code: 127},
		{name: "sh -c without command", argv: []string{"sh", "-c"}, code: 2},
		{name: "interactive", argv: []string{"sh"}, in: "hostname\nfalse\n", code: 1, out: "pricing-abc\n"},
		{name: "interactive exit", argv: []string{"bash"}, in: "exit 4\nhostname\n", code: 4, notOut: "pricing"},
		{name: "interactive line too long", argv: []string{"sh"}, in: "echo " + strings.Repeat("a", maxLine+1) + "\nhostname\n", code: 2, errs: "a line longer than", notOut: "pricing"},
		{name: "interactive long line", argv: []string{"sh"}, in: "echo " + strings.Repeat("a", 70000) + "\n", out: strings.Repeat("a", 70000) + "\n"},
		{name: "terminal echoes and ends lines with CR LF", argv: []string{"sh"}, in: "hostnamx\x7fe\r", tty: true, out: "$ hostnamx\b \be\r\npricing-abc\r\n"},
		{name: "terminal Ctrl-C drops the line", argv: []string{"sh"}, in: "false\x03exit\r", tty: true, code: 0, out: "^C"},
		{name: "ss flags refused", argv: []string{"ss", "-x"}, code: 2},
		{name: "no command", argv: nil, code: 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errs := run(t, c.argv, c.in, c.tty)
			if code != c.code {
				t.Errorf("exit %d, want %d (out %q, err %q)", code, c.code, out, errs)
			}
			if !strings.Contains(out, c.out) {
				t.Errorf("output %q does not contain %q", out, c.out)
			}
			if c.notOut != "" && strings.Contains(out, c.notOut) {
				t.Errorf("output %q contains %q", out, c.notOut)
			}
			if !strings.Contains(errs, c.errs) {
				t.Errorf("errors %q do not contain %q", errs, c.errs)
			}
		})
	}
}

// TestSockets: cat /proc/net/tcp and ss -lnt list a socket listening
// here (no pod namespace: the node's).
func TestSockets(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	_, out, _ := run(t, []string{"cat", "/proc/net/tcp"}, "", false)
	if want := fmt.Sprintf("0100007F:%04X 00000000:0000 0A", port); !strings.Contains(out, want) {
		t.Errorf("/proc/net/tcp lacks %q:\n%s", want, out)
	}
	code, out, errs := run(t, []string{"ss", "-lnt"}, "", false)
	if want := fmt.Sprintf("LISTEN"); code != 0 || !strings.Contains(out, want) || !strings.Contains(out, fmt.Sprintf("127.0.0.1:%d", port)) {
		t.Errorf("ss -lnt: exit %d, %q, errors %q; want a LISTEN row for 127.0.0.1:%d", code, out, errs, port)
	}
}

func TestSplit(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
		err  bool
	}{
		{in: "a b  c", want: []string{"a", "b", "c"}},
		{in: `a 'b c' "d \"e\""`, want: []string{"a", "b c", `d "e"`}},
		{in: "a'b'c", want: []string{"abc"}},
		{in: `echo a\ b`, want: []string{"echo", "a b"}},
		{in: `echo 'it'\''s'`, want: []string{"echo", "it's"}},
		{in: `a\$b`, want: []string{"a$b"}},
		{in: "echo # comment", want: []string{"echo"}},
		{in: "a 'b", err: true},
		{in: `a "b`, err: true},
		{in: "a > b", err: true},
		{in: "echo $HOME", err: true},
		{in: "", want: nil},
	} {
		got, err := split(c.in)
		if (err != nil) != c.err || fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("split(%q) = %q, %v; want %q, error %v", c.in, got, err, c.want, c.err)
		}
	}
}
