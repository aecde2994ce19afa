package metricsauth

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"k8s.io/client-go/rest"
)

// Mode says who may scrape /metrics.
type Mode string

const (
	// Kubernetes: TLS, and a bearer token allowed get on the path
	// (TokenReview, SubjectAccessReview). The manifests' mode.
	Kubernetes Mode = "kubernetes"
	// None: anyone who reaches the address; plain HTTP unless certificate
	// files are given. For a loopback address: the agent as a host service,
	// local runs.
	None Mode = "none"
)

// ParseMode reads "kubernetes" or "none".
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Kubernetes, None:
		return m, nil
	}
	return "", fmt.Errorf("metrics auth %q: want kubernetes or none", s)
}

// Config is how a component serves its metrics endpoint.
type Config struct {
	Mode Mode
	// CertFile and KeyFile are the serving key pair; both empty generates
	// a self-signed one in Kubernetes mode.
	CertFile, KeyFile string
	// Options tune the Authorizer of Kubernetes mode.
	Options Options
}

// Validate checks the mode and that the files come in pairs.
func (c Config) Validate() error {
	if _, err := ParseMode(string(c.Mode)); err != nil {
		return err
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return errors.New("metrics TLS: give both the certificate and the key file, or neither")
	}
	return nil
}

// Endpoint is a configured metrics endpoint: Protect wraps the handlers
// that need authorization (/metrics; never the kubelet's probes), Listener
// adds TLS to a listener when the endpoint speaks it.
type Endpoint struct {
	authorizer *Authorizer
	tls        *tls.Config
}

// Setup prepares the endpoint of cfg; cfg.Mode Kubernetes reviews through
// rc (with its request counting and rate limits).
func Setup(cfg Config, rc *rest.Config, log *slog.Logger) (*Endpoint, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Endpoint{}
	if cfg.Mode == Kubernetes || cfg.CertFile != "" {
		var err error
		if e.tls, err = ServerTLS(cfg.CertFile, cfg.KeyFile); err != nil {
			return nil, err
		}
	}
	if cfg.Mode == Kubernetes {
		opts := cfg.Options
		if opts.Log == nil {
			opts.Log = log
		}
		var err error
		if e.authorizer, err = New(rc, opts); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// Protect is h behind the Authorizer in Kubernetes mode, h itself in None.
func (e *Endpoint) Protect(h http.Handler) http.Handler {
	if e == nil || e.authorizer == nil {
		return h
	}
	return e.authorizer.Wrap(h)
}

// Listener is l, behind TLS when the endpoint speaks it.
func (e *Endpoint) Listener(l net.Listener) net.Listener {
	if e == nil || e.tls == nil {
		return l
	}
	return tls.NewListener(l, e.tls)
}

// Scheme is "https" or "http", for log lines.
func (e *Endpoint) Scheme() string {
	if e == nil || e.tls == nil {
		return "http"
	}
	return "https"
}
