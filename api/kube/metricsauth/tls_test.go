package metricsauth_test

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
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeward/nodeward/api/kube/metricsauth"
)

// TestSelfSigned: Kubernetes mode without files serves TLS on a
// certificate generated at start.
func TestSelfSigned(t *testing.T) {
	e, err := metricsauth.Setup(metricsauth.Config{Mode: metricsauth.None, CertFile: "", KeyFile: ""}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if base := serve(t, e); !strings.HasPrefix(base, "http://") {
		t.Errorf("None without files serves %s, want plain HTTP", base)
	}
	tc, err := metricsauth.ServerTLS("", "")
	if err != nil {
		t.Fatal(err)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", tc)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	conn, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // inspecting the self-signed certificate
	if err != nil {
		t.Fatalf("TLS handshake with the self-signed endpoint: %v", err)
	}
	defer conn.Close()
	cert := conn.ConnectionState().PeerCertificates[0]
	if !strings.HasPrefix(cert.Subject.CommonName, "nodeward-metrics@") || cert.Issuer.CommonName != cert.Subject.CommonName {
		t.Errorf("certificate subject %q issuer %q, want a self-signed nodeward-metrics@host", cert.Subject, cert.Issuer)
	}
	if err := cert.CheckSignature(cert.SignatureAlgorithm, cert.RawTBSCertificate, cert.Signature); err != nil {
		t.Errorf("certificate is not self-signed: %v", err)
	}
}

// TestCertificateFiles: given files are served (a client that trusts only
// their CA verifies the endpoint), and a renewed pair is picked up.
func TestCertificateFiles(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	pool := x509.NewCertPool()
	issue := func(serial int64) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "metrics.test"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, DNSNames: []string{"metrics.test"},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		cert, _ := x509.ParseCertificate(der)
		pool.AddCert(cert)
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
			t.Fatal(err)
		}
		// A renewal shows as a new modification time.
		if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		mtime := time.Now().Add(time.Duration(serial) * time.Second)
		if err := os.Chtimes(certFile, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	issue(1)
	if _, err := metricsauth.Setup(metricsauth.Config{Mode: metricsauth.None, CertFile: certFile}, nil, nil); err == nil {
		t.Error("a certificate without a key was accepted")
	}
	e, err := metricsauth.Setup(metricsauth.Config{Mode: metricsauth.None, CertFile: certFile, KeyFile: keyFile}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	base := serve(t, e)
	if !strings.HasPrefix(base, "https://") {
		t.Fatalf("certificate files given, but %s", base)
	}
	serial := func() int64 {
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "metrics.test"}, DisableKeepAlives: true}}
		resp, err := client.Get(base + "/readyz")
		if err != nil {
			t.Fatalf("verified TLS against the given certificate: %v", err)
		}
		defer resp.Body.Close()
		return resp.TLS.PeerCertificates[0].SerialNumber.Int64()
	}
	if got := serial(); got != 1 {
		t.Errorf("served certificate serial %d, want 1 (the given file)", got)
	}
	issue(2)
	if got := serial(); got != 2 {
		t.Errorf("after renewal, served certificate serial %d, want 2", got)
	}
}
