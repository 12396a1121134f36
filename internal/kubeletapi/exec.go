package kubeletapi

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"

	"github.com/pinlab/pinlab/internal/podshell"
)

// serveExec runs a command in a pod's container, as the kubelet's
// getExec: the command (query parameter command, repeated) with the
// streams the client asks for (input, output, error, tty), over SPDY or
// WebSocket through k8s.io/cri-streaming's remotecommand, which reports
// the exit code to kubectl. What runs is package podshell's built-in
// commands: a pinlab pod is no container image.
func (s *Server) serveExec(w http.ResponseWriter, r *http.Request) {
	ns, name, uid, container := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("uid"), r.PathValue("container")
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	cmd := r.URL.Query()["command"]
	if len(cmd) == 0 {
		http.Error(w, "missing command", http.StatusBadRequest)
		return
	}
	p, ok := s.streamTarget(w, ns, name, uid, container)
	if !ok {
		return
	}
	s.session(w, p, execGrace, func(w http.ResponseWriter) {
		remotecommand.ServeExec(w, r, shellExecutor{s: s, namespace: ns}, p.Name, string(p.UID), container, cmd, opts,
			StreamIdleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
	})
}

// serveAttach streams a container's output from now on, as `kubectl
// attach` reads it (the kubelet's getAttach): the lines the container
// writes until it ends, the pod is gone or the server closes (a client
// that leaves a quiet container is noticed at its next line). A pinlab
// pod reads no standard input: what the client sends is discarded.
func (s *Server) serveAttach(w http.ResponseWriter, r *http.Request) {
	ns, name, uid, container := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("uid"), r.PathValue("container")
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p, ok := s.streamTarget(w, ns, name, uid, container)
	if !ok {
		return
	}
	s.session(w, p, 0, func(w http.ResponseWriter) {
		remotecommand.ServeAttach(w, r, attacher{s: s, namespace: ns}, p.Name, string(p.UID), container, opts,
			StreamIdleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
	})
}

// streamTarget finds the pod and checks the container, answering 404 (no
// such pod, UID or container) or 400 (an ephemeral container, which never
// runs here, or a container not running) itself when it reports false:
// refused before the upgrade, as the kubelet's (kubectl: "unable to
// upgrade connection: ...").
func (s *Server) streamTarget(w http.ResponseWriter, ns, name, uid, container string) (*corev1.Pod, bool) {
	p, ok := s.cfg.Node.Pod(ns, name)
	if !ok || (uid != "" && string(p.UID) != uid) {
		http.Error(w, fmt.Sprintf("pod %s/%s not found", ns, name), http.StatusNotFound)
		return nil, false
	}
	for _, e := range p.Spec.EphemeralContainers {
		if e.Name == container {
			http.Error(w, fmt.Sprintf("container %q in pod %q (image %q): the lab's node runs no ephemeral container but pinlab-agent, in-process, which has no shell to exec or attach to", container, name, e.Image), http.StatusBadRequest)
			return nil, false
		}
	}
	if !hasContainer(p, container) {
		http.Error(w, fmt.Sprintf("container %q not found in pod %q", container, name), http.StatusNotFound)
		return nil, false
	}
	if _, err := s.cfg.Node.Shell(ns, name, container); err != nil {
		http.Error(w, fmt.Sprintf("container %q in pod %q is not running: %v", container, name, err), http.StatusBadRequest)
		return nil, false
	}
	return p, true
}

// execPodCheck is how often an exec session looks whether its pod is
// still there; execGrace how long after its pod is gone the session's
// connection stays, for the exec to report its end (exit 137).
const (
	execPodCheck = 250 * time.Millisecond
	execGrace    = 2 * time.Second
)

// shellExecutor runs package podshell's commands.
type shellExecutor struct {
	s         *Server
	namespace string
}

// ExecInContainer runs cmd in the pod's container; a non-zero exit is a
// utilexec.ExitError, which ServeExec reports to the client as the exit
// code.
func (e shellExecutor) ExecInContainer(ctx context.Context, name, uid, container string, cmd []string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, _ time.Duration) error {
	if resize != nil {
		go drain(resize) // ends when the stream does, which closes it
	}
	sp, err := e.s.cfg.Node.Shell(e.namespace, name, container)
	if err != nil {
		return err
	}
	if string(sp.Pod.UID) != uid {
		return fmt.Errorf("pod %s/%s not found", e.namespace, name)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var gone atomic.Bool
	go func() {
		t := time.NewTicker(execPodCheck)
		defer t.Stop()
		for {
			select {
			case <-e.s.done:
				cancel()
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if p, ok := e.s.cfg.Node.Pod(e.namespace, name); !ok || string(p.UID) != uid {
					gone.Store(true)
					cancel()
					return
				}
			}
		}
	}()
	code := podshell.Run(ctx, sp, cmd, podshell.Streams{In: in, Out: writerOr(out), Err: writerOr(errw), TTY: tty})
	if gone.Load() {
		// The container was killed under it, as a runtime ends an exec
		// when its container stops.
		fmt.Fprintf(writerOr(errw), "pod %s/%s is gone: the command was killed\n", e.namespace, name)
		code = 137
	}
	if code != 0 {
		return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with exit code %d", code), Code: code}
	}
	return nil
}

// attacher streams a container's output.
type attacher struct {
	s         *Server
	namespace string
}

// AttachContainer writes the container's output lines from now on to out
// until the container ends, ctx ends or the server closes; in is
// discarded. Lines end in CR LF when the container has a terminal (its
// spec's tty, as the runtime attaches it).
func (a attacher) AttachContainer(ctx context.Context, name, uid, container string, in io.Reader, out, _ io.WriteCloser, _ bool, resize <-chan remotecommand.TerminalSize) error {
	if resize != nil {
		go drain(resize) // ends when the stream does, which closes it
	}
	if in != nil {
		go io.Copy(io.Discard, in) // ends with the stream
	}
	p, ok := a.s.cfg.Node.Pod(a.namespace, name)
	if !ok || string(p.UID) != uid {
		return fmt.Errorf("pod %s/%s not found", a.namespace, name)
	}
	tty := false
	for _, c := range p.Spec.Containers {
		if c.Name == container {
			tty = c.TTY
		}
	}
	l, err := a.s.cfg.Node.Logs(a.namespace, name, false)
	if err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	lines, next, grew, closed := l.Read(0)
	_ = lines // what was written before attaching is not shown, as attach does
	for !closed {
		select {
		case <-grew:
		case <-ctx.Done():
			return nil
		case <-a.s.done:
			return nil
		}
		lines, next, grew, closed = l.Read(next)
		for _, line := range lines {
			text := line.Text + "\n"
			if tty {
				text = line.Text + "\r\n"
			}
			if _, err := io.WriteString(out, text); err != nil {
				return nil
			}
		}
	}
	return nil
}

// drain reads a resize channel until it closes: the terminal's size does
// not matter to the built-in commands.
func drain(c <-chan remotecommand.TerminalSize) {
	for range c {
	}
}

// writerOr is w, or io.Discard for a stream the client did not ask for.
func writerOr(w io.WriteCloser) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
