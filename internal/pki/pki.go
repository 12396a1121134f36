// Package pki is a lab cluster's certificate authority: a CA made once per
// control plane, and the certificates it signs for the components that
// speak TLS to each other (the kubelet's serving certificate, the API
// server's client certificate for the kubelet API), as kubeadm lays them
// out: ECDSA P-256 keys, a CA valid for 10 years and leaves for one.
//
// The CA's key never leaves the process that made it unless written with
// WriteFiles (mode 0600 in a directory the caller owns).
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// Validity of what the CA signs, as kubeadm's defaults.
const (
	caValidity   = 10 * 365 * 24 * time.Hour // certutil's NewSelfSignedCACert
	leafValidity = 365 * 24 * time.Hour
)

// CA signs a lab cluster's certificates. Safe for concurrent use.
type CA struct {
	Cert *x509.Certificate
	key  crypto.Signer
}

// NewCA makes a CA named name (its common name).
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: CA key: %w", err)
	}
	cert, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: name}, key)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	return &CA{Cert: cert, key: key}, nil
}

// LoadCA reads a CA that WriteFiles wrote (CACertFile and CAKeyFile in
// dir).
func LoadCA(dir string) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CACertFile))
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	certs, err := certutil.ParseCertsPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", CACertFile, err)
	}
	k, err := keyutil.PrivateKeyFromFile(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	key, ok := k.(crypto.Signer)
	if !ok || !certs[0].IsCA {
		return nil, fmt.Errorf("pki: %s is not a CA with its key", dir)
	}
	return &CA{Cert: certs[0], key: key}, nil
}

// The files WriteFiles writes.
const (
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
)

// WriteFiles writes the CA's certificate and key into dir (mode 0600;
// dir must exist).
func (ca *CA) WriteFiles(dir string) error {
	key, err := keyutil.MarshalPrivateKeyToPEM(ca.key)
	if err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, CACertFile), ca.CertPEM(), 0o600); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, CAKeyFile), key, 0o600); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	return nil
}

// CertPEM is the CA's certificate in PEM, for a client's or server's
// trust pool.
func (ca *CA) CertPEM() []byte {
	out, _ := certutil.EncodeCertificates(ca.Cert) // encoding a parsed certificate cannot fail
	return out
}

// Pool is a pool holding the CA's certificate alone.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Leaf says what a certificate is for.
type Leaf struct {
	// CommonName is the subject's CN: for a client certificate, the user
	// name the API server and the kubelet authenticate (x509 client
	// authentication).
	CommonName string
	// Organization lists the subject's O: the user's groups.
	Organization []string
	// IPs and DNSNames are a serving certificate's subject alternative
	// names; a certificate with none is a client certificate.
	IPs      []netip.Addr
	DNSNames []string
}

// Issue signs a new key's certificate for leaf, valid for a year: a
// serving certificate (server auth) when leaf has alternative names, else
// a client certificate (client auth). It returns both as PEM.
func (ca *CA) Issue(leaf Leaf) (certPEM, keyPEM []byte, err error) {
	if leaf.CommonName == "" {
		return nil, nil, errors.New("pki: a certificate needs a common name")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("pki: serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: leaf.CommonName, Organization: leaf.Organization},
		NotBefore:    now.Add(-time.Minute).UTC(), // a little clock skew between components
		NotAfter:     now.Add(leafValidity).UTC(),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		DNSNames:     leaf.DNSNames,
	}
	for _, ip := range leaf.IPs {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.IP(ip.AsSlice()))
	}
	if len(tmpl.IPAddresses) > 0 || len(tmpl.DNSNames) > 0 {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: sign %s: %w", leaf.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %w", err)
	}
	certPEM, _ = certutil.EncodeCertificates(cert)
	keyPEM, err = keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %w", err)
	}
	return certPEM, keyPEM, nil
}

// IssueTLS is Issue returning a tls.Certificate, for a server or client in
// this process.
func (ca *CA) IssueTLS(leaf Leaf) (tls.Certificate, error) {
	c, k, err := ca.Issue(leaf)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(c, k)
}
