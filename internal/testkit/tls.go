package testkit

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

// TLSCerts is a throw-away certificate authority and the certificates it
// signed, written as PEM files in a test's temporary directory.
type TLSCerts struct {
	// CAFile is the CA certificate.
	CAFile string
	// OtherCAFile is a second CA, which signed nothing here: trusting only
	// it must fail verification.
	OtherCAFile string
	// ServerCertFile and ServerKeyFile are a broker certificate for
	// 127.0.0.1, ::1 and localhost.
	ServerCertFile, ServerKeyFile string
	// ClientCertFile and ClientKeyFile are a client certificate (CN
	// "kstreamd-client") for mutual TLS.
	ClientCertFile, ClientKeyFile string

	caPool     *x509.CertPool
	serverCert tls.Certificate
}

// NewTLSCerts generates a CA, a server and a client certificate (ECDSA
// P-256, valid for an hour) into t.TempDir().
func NewTLSCerts(t testing.TB) *TLSCerts {
	t.Helper()
	dir := t.TempDir()
	c := &TLSCerts{
		CAFile:         filepath.Join(dir, "ca.pem"),
		OtherCAFile:    filepath.Join(dir, "other-ca.pem"),
		ServerCertFile: filepath.Join(dir, "server.pem"),
		ServerKeyFile:  filepath.Join(dir, "server-key.pem"),
		ClientCertFile: filepath.Join(dir, "client.pem"),
		ClientKeyFile:  filepath.Join(dir, "client-key.pem"),
	}
	caKey, caCert, caDER := newCA(t, "kstreamd test CA")
	writePEM(t, c.CAFile, "CERTIFICATE", caDER)
	_, _, otherDER := newCA(t, "kstreamd other CA")
	writePEM(t, c.OtherCAFile, "CERTIFICATE", otherDER)
	c.caPool = x509.NewCertPool()
	c.caPool.AddCert(caCert)

	server := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kstreamd test broker"},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	c.serverCert = issue(t, server, caCert, caKey, c.ServerCertFile, c.ServerKeyFile)
	client := &x509.Certificate{
		SerialNumber: big.NewInt(3),
		Subject:      pkix.Name{CommonName: "kstreamd-client"},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	issue(t, client, caCert, caKey, c.ClientCertFile, c.ClientKeyFile)
	return c
}

// ServerConfig returns a broker's TLS config: the server certificate and,
// when requireClientCert, mutual TLS against the CA.
func (c *TLSCerts) ServerConfig(requireClientCert bool) *tls.Config {
	cfg := &tls.Config{Certificates: []tls.Certificate{c.serverCert}, MinVersion: tls.VersionTLS12}
	if requireClientCert {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		cfg.ClientCAs = c.caPool
	}
	return cfg
}

func newCA(t testing.TB, name string) (*ecdsa.PrivateKey, *x509.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert, der
}

// issue signs tmpl with the CA, writes the certificate and its key to
// certFile and keyFile, and returns them as a tls.Certificate.
func issue(t testing.TB, tmpl, ca *x509.Certificate, caKey *ecdsa.PrivateKey, certFile, keyFile string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.NotBefore = time.Now().Add(-time.Minute)
	tmpl.NotAfter = time.Now().Add(time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "PRIVATE KEY", keyDER)
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
