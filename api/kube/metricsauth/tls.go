package metricsauth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"os"
	"sync"
	"time"
)

// ServerTLS is the metrics server's TLS configuration: the certificate and
// key files when given (read again when the certificate file changes, as a
// mounted Secret does when it is renewed), else a self-signed certificate
// generated in memory now, as kube-rbac-proxy does. Scrapers of a
// self-signed endpoint skip verification (the ServiceMonitor's
// insecureSkipVerify); the bearer token is what authenticates.
func ServerTLS(certFile, keyFile string) (*tls.Config, error) {
	if (certFile == "") != (keyFile == "") {
		return nil, fmt.Errorf("metrics TLS: give both the certificate (%q) and the key (%q) file, or neither", certFile, keyFile)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if certFile == "" {
		cert, err := selfSigned(time.Now())
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
		return cfg, nil
	}
	files := &certFiles{cert: certFile, key: keyFile}
	if _, err := files.get(nil); err != nil {
		return nil, err
	}
	cfg.GetCertificate = files.get
	return cfg, nil
}

// certFiles loads a key pair and loads it again when the certificate file's
// modification time or size changes.
type certFiles struct {
	cert, key string

	mu      sync.Mutex
	loaded  *tls.Certificate
	modTime time.Time
	size    int64
}

func (f *certFiles) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, err := os.Stat(f.cert)
	if err != nil {
		if f.loaded != nil {
			return f.loaded, nil // mid-rotation: keep serving the last one
		}
		return nil, fmt.Errorf("metrics TLS certificate: %w", err)
	}
	if f.loaded != nil && st.ModTime().Equal(f.modTime) && st.Size() == f.size {
		return f.loaded, nil
	}
	cert, err := tls.LoadX509KeyPair(f.cert, f.key)
	if err != nil {
		if f.loaded != nil {
			return f.loaded, nil
		}
		return nil, fmt.Errorf("metrics TLS key pair: %w", err)
	}
	f.loaded, f.modTime, f.size = &cert, st.ModTime(), st.Size()
	return f.loaded, nil
}

// selfSigned makes an ECDSA P-256 certificate for the host's name,
// localhost and the loopback addresses, valid for a year from now.
func selfSigned(now time.Time) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("metrics TLS: generate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("metrics TLS: serial number: %w", err)
	}
	host, _ := os.Hostname()
	names := []string{"localhost"}
	if host != "" {
		names = append(names, host)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "nodeward-metrics@" + host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     names,
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("metrics TLS: self-sign: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
