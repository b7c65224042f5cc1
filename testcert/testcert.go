// Package testcert issues throw-away certificates for tests: a CA, and the
// server (127.0.0.1) and client certificates it signs, as PEM files in the
// test's temporary directory and as values. It is for tests only; the keys
// are ECDSA P-256 and the certificates are valid for an hour either side of
// now.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority for one test. Its methods fail the test on
// error; they are not safe for concurrent use.
type CA struct {
	// File is the CA certificate, PEM.
	File string
	// Pool holds the CA certificate, for a verifying tls.Config.
	Pool *x509.CertPool

	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	dir    string
	serial int64
}

// Leaf is a certificate the CA signed, with its key.
type Leaf struct {
	// CertFile and KeyFile are the certificate and its key, PEM.
	CertFile, KeyFile string
	// TLS is the same pair for a tls.Config.
	TLS tls.Certificate
}

// NewCA makes a CA named name, its certificate written under t.TempDir().
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	ca := &CA{dir: t.TempDir(), key: newKey(t)}
	ca.cert = ca.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}, &ca.key.PublicKey, true)
	ca.File = ca.write(t, "ca.pem", "CERTIFICATE", ca.cert.Raw)
	ca.Pool = x509.NewCertPool()
	ca.Pool.AddCert(ca.cert)
	return ca
}

// Server signs a server certificate for 127.0.0.1 named name.
func (ca *CA) Server(t testing.TB, name string) Leaf {
	t.Helper()
	return ca.leaf(t, name, x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1)})
}

// Client signs a client certificate named name.
func (ca *CA) Client(t testing.TB, name string) Leaf {
	t.Helper()
	return ca.leaf(t, name, x509.ExtKeyUsageClientAuth, nil)
}

func (ca *CA) leaf(t testing.TB, name string, usage x509.ExtKeyUsage, ips []net.IP) Leaf {
	t.Helper()
	k := newKey(t)
	c := ca.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: name}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips}, &k.PublicKey, false)
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return Leaf{
		CertFile: ca.write(t, name+".pem", "CERTIFICATE", c.Raw),
		KeyFile:  ca.write(t, name+".key", "EC PRIVATE KEY", kder),
		TLS:      tls.Certificate{Certificate: [][]byte{c.Raw}, PrivateKey: k},
	}
}

// issue signs tmpl (self-signed when self is set) for pub.
func (ca *CA) issue(t testing.TB, tmpl *x509.Certificate, pub *ecdsa.PublicKey, self bool) *x509.Certificate {
	t.Helper()
	ca.serial++
	tmpl.SerialNumber = big.NewInt(ca.serial)
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	parent := ca.cert
	if self {
		parent = tmpl
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (ca *CA) write(t testing.TB, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(ca.dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
