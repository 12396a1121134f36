package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestIssue: a serving certificate verifies for its IP and server auth
// only; a client certificate for client auth only, carrying its user and
// groups; another CA's pool refuses both.
func TestIssue(t *testing.T) {
	ca, err := NewCA("pinlab-test-ca")
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewCA("other")
	if err != nil {
		t.Fatal(err)
	}
	node := netip.MustParseAddr("10.244.15.254")
	tests := []struct {
		name   string
		leaf   Leaf
		usage  x509.ExtKeyUsage
		host   string
		pool   *x509.CertPool
		wantOK bool
	}{
		{name: "serving, its IP", leaf: Leaf{CommonName: "node", IPs: []netip.Addr{node}}, usage: x509.ExtKeyUsageServerAuth, host: node.String(), pool: ca.Pool(), wantOK: true},
		{name: "serving, another IP", leaf: Leaf{CommonName: "node", IPs: []netip.Addr{node}}, usage: x509.ExtKeyUsageServerAuth, host: "10.244.15.1", pool: ca.Pool()},
		{name: "serving used as a client", leaf: Leaf{CommonName: "node", IPs: []netip.Addr{node}}, usage: x509.ExtKeyUsageClientAuth, pool: ca.Pool()},
		{name: "client", leaf: Leaf{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"g"}}, usage: x509.ExtKeyUsageClientAuth, pool: ca.Pool(), wantOK: true},
		{name: "client used to serve", leaf: Leaf{CommonName: "c"}, usage: x509.ExtKeyUsageServerAuth, pool: ca.Pool()},
		{name: "another CA's pool", leaf: Leaf{CommonName: "c"}, usage: x509.ExtKeyUsageClientAuth, pool: other.Pool()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ca.IssueTLS(tt.leaf)
			if err != nil {
				t.Fatal(err)
			}
			leaf, err := x509.ParseCertificate(c.Certificate[0])
			if err != nil {
				t.Fatal(err)
			}
			_, err = leaf.Verify(x509.VerifyOptions{Roots: tt.pool, DNSName: tt.host, KeyUsages: []x509.ExtKeyUsage{tt.usage}})
			if (err == nil) != tt.wantOK {
				t.Errorf("Verify: %v, want ok %v", err, tt.wantOK)
			}
			if leaf.Subject.CommonName != tt.leaf.CommonName || len(leaf.Subject.Organization) != len(tt.leaf.Organization) {
				t.Errorf("subject %v, want CN %s O %v", leaf.Subject, tt.leaf.CommonName, tt.leaf.Organization)
			}
		})
	}
	if _, _, err := ca.Issue(Leaf{}); err == nil {
		t.Error("Issue without a common name: no error")
	}
}

// TestMutualTLS: a server with a serving certificate and a client with a
// client certificate of the same CA talk; a client without one is refused
// by a server that requires one.
func TestMutualTLS(t *testing.T) {
	ca, err := NewCA("ca")
	if err != nil {
		t.Fatal(err)
	}
	srvCert, err := ca.IssueTLS(Leaf{CommonName: "node", IPs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	cliCert, err := ca.IssueTLS(Leaf{CommonName: "client"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{srvCert}, ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan string, 2)
	go func() {
		for range 2 {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.SetDeadline(time.Now().Add(5 * time.Second))
			name := ""
			if err := c.(*tls.Conn).Handshake(); err == nil {
				name = c.(*tls.Conn).ConnectionState().PeerCertificates[0].Subject.CommonName
				c.Write([]byte("x"))
			}
			c.Close()
			done <- name
		}
	}()
	dial := func(certs []tls.Certificate) error {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), &tls.Config{RootCAs: ca.Pool(), Certificates: certs})
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = io.ReadFull(c, make([]byte, 1))
		return err
	}
	if err := dial([]tls.Certificate{cliCert}); err != nil {
		t.Errorf("with a client certificate: %v", err)
	}
	if got := <-done; got != "client" {
		t.Errorf("server saw client %q, want client", got)
	}
	if err := dial(nil); err == nil {
		t.Error("without a client certificate: no error")
	}
	<-done
}

// TestWriteLoad: a written CA loads back and signs; its files are 0600; a
// directory without them is an error.
func TestWriteLoad(t *testing.T) {
	dir := t.TempDir()
	ca, err := NewCA("ca")
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{CACertFile, CAKeyFile} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v; want 0600", f, err, st.Mode().Perm())
		}
	}
	back, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := back.IssueTLS(Leaf{CommonName: "x"})
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(c.Certificate[0])
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("signed by the loaded CA, verified by the original: %v", err)
	}
	if _, err := LoadCA(t.TempDir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadCA of an empty directory: %v, want not exist", err)
	}
}
