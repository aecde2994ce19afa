package main

import (
	"github.com/spf13/cobra"

	"github.com/nodeward/nodeward/api/kube/metricsauth"
)

// metricsFlags are how the agent and the coordinator guard /metrics.
type metricsFlags struct {
	auth, certFile, keyFile string
}

func (f *metricsFlags) register(cmd *cobra.Command, defaultAuth string) {
	fl := cmd.Flags()
	fl.StringVar(&f.auth, "metrics-auth", defaultAuth,
		"who may scrape /metrics: kubernetes (TLS; a bearer token allowed get /metrics, checked with TokenReview and SubjectAccessReview) or none; the health probes are never guarded")
	fl.StringVar(&f.certFile, "metrics-tls-cert-file", "", "serving certificate of the metrics endpoint (default with --metrics-auth=kubernetes: self-signed, generated at start)")
	fl.StringVar(&f.keyFile, "metrics-tls-key-file", "", "private key of --metrics-tls-cert-file")
}

// config is the flags as a metricsauth.Config, checked.
func (f *metricsFlags) config() (metricsauth.Config, error) {
	mode, err := metricsauth.ParseMode(f.auth)
	if err != nil {
		return metricsauth.Config{}, err
	}
	c := metricsauth.Config{Mode: mode, CertFile: f.certFile, KeyFile: f.keyFile}
	return c, c.Validate()
}
