package xds

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

// TestMainArgs: the image's `xds serve` reads its args as the CLI's flags
// and exits as documented before it serves: 0 for --help, 2 for bad args,
// 1 without credentials or when its listener cannot be opened (through
// Host.Listen, the pod's network).
func TestMainArgs(t *testing.T) {
	refused := errors.New("address in use in the pod")
	var asked string
	listen := func(_ context.Context, addr string) (net.Listener, error) { asked = addr; return nil, refused }
	tests := []struct {
		name     string
		args     []string
		noREST   bool
		code     int
		out, err string
		listened string
		noFiles  bool
		noListen bool
	}{
		{name: "help", args: []string{"xds", "serve", "--help"}, code: 0, out: Usage},
		{name: "no serve", args: []string{"xds"}, code: 2, err: "want the serve command"},
		{name: "other command", args: []string{"xds", "watch"}, code: 2, err: "want the serve command"},
		{name: "unknown flag", args: []string{"xds", "serve", "--lsten", ":1"}, code: 2, err: "unknown flag: --lsten"},
		{name: "extra args", args: []string{"xds", "serve", "now"}, code: 2, err: `unexpected arguments ["now"]`},
		{name: "no credentials", args: []string{"xds", "serve"}, noREST: true, code: 1, err: "no in-cluster credentials"},
		{name: "default listen", args: []string{"xds", "serve"}, code: 1, err: refused.Error(), listened: ImageListen},
		{name: "bootstrap without files", args: []string{"xds", "serve", "--bootstrap", "/home/u/.bashrc"}, noFiles: true, code: 2, err: "--bootstrap /home/u/.bashrc: this node runs the container without a filesystem"},
		{name: "no network", args: []string{"xds", "serve"}, noListen: true, code: 1, err: "no network to listen on"},
		{name: "listen", args: []string{"xds", "serve", "--listen", "10.0.0.1:9", "-n", "shop"}, code: 1, err: refused.Error(), listened: "10.0.0.1:9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			asked = ""
			var out, errs bytes.Buffer
			h := Host{REST: &rest.Config{Host: "https://127.0.0.1:1"}, Listen: listen, Stdout: &out, Stderr: &errs}
			h.NoFiles = tt.noFiles
			if tt.noListen {
				h.Listen = nil
			}
			if tt.noREST {
				h.REST, h.NoREST = nil, rest.ErrNotInCluster
			}
			if code := Main(context.Background(), tt.args, h); code != tt.code {
				t.Errorf("exit %d, want %d; stderr %q", code, tt.code, errs.String())
			}
			if !strings.Contains(out.String(), tt.out) || !strings.Contains(errs.String(), tt.err) {
				t.Errorf("stdout %q, stderr %q: want %q and %q in them", out.String(), errs.String(), tt.out, tt.err)
			}
			if asked != tt.listened {
				t.Errorf("listened on %q, want %q", asked, tt.listened)
			}
		})
	}
}
