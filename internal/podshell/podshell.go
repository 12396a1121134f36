// Package podshell is what `kubectl exec` runs in a pinlab pod. A pinlab
// pod is a server inside pinlab's process, not a container image with a
// file system and programs, so exec runs a small set of built-in commands
// that show what a process in the pod would see, in the pod's own network
// namespace when it has one (the real control plane tier's
// --pod-network netns) and the node's otherwise:
//
//	cat FILE...        /proc/net/tcp, tcp6, udp, udp6 (the kernel's tables,
//	                   as read in the pod's namespace), /etc/hostname,
//	                   /etc/hosts, /etc/resolv.conf (as the kubelet writes
//	                   them for the pod)
//	ss [-tulnap]       TCP (-t, the default) and UDP (-u) sockets, from the
//	                   kernel's sock_diag as ss(8) reads them; -l listening
//	                   only, -a all; -n, -p accepted and ignored
//	hostname           the pod's host name
//	env, printenv [NAME]  the container's environment
//	echo ARG...; true; false; exit [N]; help
//	sh, bash, ash      with -c 'COMMAND ARG...' (one simple command:
//	                   quotes, no pipes, redirections or variables), or
//	                   interactive, a command a line
//
// Any other command exits 127 with "NAME: command not found", as a shell
// says it. Exit codes follow the shell's: 0 success, 1 failure, 2 a usage
// error.
package podshell

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Netns runs f inside a pod's own network namespace (package podnet's
// Sandbox); nil is the node's.
type Netns interface {
	Do(f func() error) error
}

// Pod is what the commands read of a pod.
type Pod struct {
	// Pod is the pod object; the container is Spec.Containers[0] unless
	// Container names another.
	Pod       *corev1.Pod
	Container string
	// Netns is the pod's network namespace; nil: the node's.
	Netns Netns
	// ResolvConf is /etc/resolv.conf as the kubelet writes it for the pod.
	ResolvConf string
}

// Streams are a command's standard input, output and error; In may be nil
// (no input). With TTY they are a terminal's (kubectl exec -t): Err is
// ignored, everything goes to Out, and the input is echoed there.
type Streams struct {
	In       io.Reader
	Out, Err io.Writer
	TTY      bool
}

// Run runs argv in p and returns its exit code; it returns when the
// command ends or ctx ends (an interactive shell then exits 130).
func Run(ctx context.Context, p Pod, argv []string, s Streams) int {
	if len(argv) == 0 {
		fmt.Fprintln(s.Err, "exec: no command given")
		return 2
	}
	if s.TTY {
		s = terminal(s)
	}
	sh := &shell{ctx: ctx, pod: p, s: s}
	return sh.run(argv)
}

type shell struct {
	ctx context.Context
	pod Pod
	s   Streams
}

// builtins are the commands; each returns its exit code.
var builtins map[string]func(*shell, []string) int

func init() {
	builtins = map[string]func(*shell, []string) int{
		"cat": (*shell).cat, "ss": (*shell).ss, "hostname": (*shell).hostname,
		"env": (*shell).env, "printenv": (*shell).env, "echo": (*shell).echo,
		"true": func(*shell, []string) int { return 0 }, "false": func(*shell, []string) int { return 1 },
		"help": (*shell).help, "sh": (*shell).sh, "bash": (*shell).sh, "ash": (*shell).sh,
	}
}

func (sh *shell) run(argv []string) int {
	name := argv[0]
	if i := strings.LastIndexByte(name, '/'); i >= 0 && strings.HasPrefix(name, "/") {
		name = name[i+1:] // /bin/sh, /usr/bin/env
	}
	f, ok := builtins[name]
	if !ok {
		fmt.Fprintf(sh.s.Err, "%s: command not found (a pinlab pod runs built-in commands only; try help)\n", argv[0])
		return 127
	}
	return f(sh, argv)
}

func (sh *shell) help(_ []string) int {
	names := make([]string, 0, len(builtins))
	for n := range builtins {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(sh.s.Out, "A pinlab pod is a gRPC server inside pinlab, not a container image: exec runs these\n"+
		"built-in commands, in the pod's network namespace:\n  %s\n"+
		"cat reads /proc/net/{tcp,tcp6,udp,udp6}, /etc/hostname, /etc/hosts, /etc/resolv.conf.\n", strings.Join(names, " "))
	return 0
}

func (sh *shell) echo(argv []string) int {
	fmt.Fprintln(sh.s.Out, strings.Join(argv[1:], " "))
	return 0
}

func (sh *shell) hostname(_ []string) int {
	fmt.Fprintln(sh.s.Out, hostName(sh.pod.Pod))
	return 0
}

// hostName is the pod's host name as the kubelet sets it: spec.hostname,
// else the pod's name, cut to 63 bytes.
func hostName(p *corev1.Pod) string {
	h := p.Name
	if p.Spec.Hostname != "" {
		h = p.Spec.Hostname
	}
	if len(h) > 63 {
		h = strings.TrimRight(h[:63], "-.")
	}
	return h
}

// container is the exec'd container of the pod.
func (sh *shell) container() *corev1.Container {
	cs := sh.pod.Pod.Spec.Containers
	for i := range cs {
		if cs[i].Name == sh.pod.Container {
			return &cs[i]
		}
	}
	if len(cs) == 0 {
		return &corev1.Container{}
	}
	return &cs[0]
}

// environ is the container's environment: HOSTNAME and the literal values
// of env; a value from a reference (valueFrom) is shown as unresolved.
func (sh *shell) environ() [][2]string {
	out := [][2]string{{"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, {"HOSTNAME", hostName(sh.pod.Pod)}}
	for _, e := range sh.container().Env {
		v := e.Value
		if e.ValueFrom != nil {
			v = "(from a reference pinlab does not resolve)"
		}
		out = append(out, [2]string{e.Name, v})
	}
	return out
}

func (sh *shell) env(argv []string) int {
	env := sh.environ()
	if argv[0] == "printenv" && len(argv) > 1 {
		code := 1
		for _, name := range argv[1:] {
			for _, kv := range env {
				if kv[0] == name {
					fmt.Fprintln(sh.s.Out, kv[1])
					code = 0
				}
			}
		}
		return code
	}
	if len(argv) > 1 {
		fmt.Fprintf(sh.s.Err, "%s: running a command in a changed environment is not supported here\n", argv[0])
		return 125
	}
	for _, kv := range env {
		fmt.Fprintf(sh.s.Out, "%s=%s\n", kv[0], kv[1])
	}
	return 0
}

// sh runs -c COMMAND, or reads commands a line each from standard input.
func (sh *shell) sh(argv []string) int {
	if len(argv) >= 2 && argv[1] == "-c" {
		if len(argv) < 3 {
			fmt.Fprintf(sh.s.Err, "%s: -c: option requires an argument\n", argv[0])
			return 2
		}
		return sh.line(argv[0], argv[2])
	}
	if len(argv) > 1 {
		fmt.Fprintf(sh.s.Err, "%s: %s: cannot run scripts here; use -c 'COMMAND' or no argument\n", argv[0], argv[1])
		return 127
	}
	if sh.s.In == nil {
		return 0
	}
	return sh.interactive(argv[0])
}

// line runs one command line.
func (sh *shell) line(name, text string) int {
	words, err := split(text)
	if err != nil {
		fmt.Fprintf(sh.s.Err, "%s: %v\n", name, err)
		return 2
	}
	if len(words) == 0 {
		return 0
	}
	if words[0] == "exit" {
		return exitCode(words)
	}
	return sh.run(words)
}

// maxLine bounds an input line of an interactive shell.
const maxLine = 1 << 20

// interactive reads lines from standard input and runs each, until end of
// input, exit or ctx's end.
func (sh *shell) interactive(name string) int {
	lines := make(chan string)
	var readErr error // set before lines closes
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(sh.s.In)
		sc.Buffer(make([]byte, 0, 64<<10), maxLine)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-sh.ctx.Done():
				return
			}
		}
		readErr = sc.Err()
	}()
	code := 0
	for {
		if sh.s.TTY {
			io.WriteString(sh.s.Out, "$ ")
		}
		select {
		case <-sh.ctx.Done():
			return 130
		case text, ok := <-lines:
			if !ok {
				if errors.Is(readErr, bufio.ErrTooLong) {
					fmt.Fprintf(sh.s.Err, "%s: a line longer than %d bytes: not run, and input ends here\n", name, maxLine)
					return 2
				}
				return code
			}
			if w, err := split(text); err == nil && len(w) > 0 && w[0] == "exit" {
				if len(w) == 1 {
					return code
				}
				return exitCode(w)
			}
			code = sh.line(name, text)
		}
	}
}

func exitCode(words []string) int {
	if len(words) < 2 {
		return 0
	}
	var n int
	if _, err := fmt.Sscan(words[1], &n); err != nil {
		return 2
	}
	return n & 0xff
}

// split splits a command line into words as a shell does for one simple
// command: blanks separate words, a backslash keeps the next character,
// single quotes keep everything, double quotes keep everything but
// backslash escapes of " and \. Pipes,
// redirections, lists and expansions are refused.
func split(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			if inWord {
				words, inWord = append(words, cur.String()), false
				cur.Reset()
			}
		case c == '\\':
			if i+1 < len(s) {
				i++
				cur.WriteByte(s[i])
			}
			inWord = true
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("unterminated quoted string")
			}
			cur.WriteString(s[i+1 : i+1+j])
			i, inWord = i+1+j, true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '\\') {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, errors.New("unterminated quoted string")
			}
			inWord = true
		case strings.IndexByte("|&;<>()$`*?", c) >= 0:
			return nil, fmt.Errorf("%q: pipes, redirections, lists and expansions are not supported here (one simple command a line)", c)
		case c == '#' && !inWord:
			i = len(s)
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}
