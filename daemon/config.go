package daemon

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/kube/metricsauth"
	"github.com/nodeward/nodeward/conditions"
	"github.com/nodeward/nodeward/daemon/health"
)

// FileConfig is the agent's configuration file (--config): the health
// configuration of package conditions, inline, and the settings only the
// agent process uses. Both sit at the top level of one YAML document.
type FileConfig struct {
	conditions.Config `json:",inline"`

	// MetricsAddress serves /metrics, /healthz and /readyz; loopback by
	// default, empty to disable.
	MetricsAddress string `json:"metricsAddress,omitempty"`
	// MetricsAuth guards /metrics: "kubernetes" serves TLS and lets only a
	// bearer token allowed get /metrics through (TokenReview,
	// SubjectAccessReview; the DaemonSet's setting), "none" (the default,
	// for the loopback address of a host service) lets anyone through.
	// The probes /livez, /healthz and /readyz are never guarded.
	MetricsAuth string `json:"metricsAuth,omitempty"`
	// MetricsTLSCertFile and MetricsTLSKeyFile are the serving key pair;
	// without them the kubernetes mode generates a self-signed one at
	// start.
	MetricsTLSCertFile string `json:"metricsTLSCertFile,omitempty"`
	MetricsTLSKeyFile  string `json:"metricsTLSKeyFile,omitempty"`
	// TextfileDirectory, when set, receives nodeward.prom for
	// node_exporter's textfile collector.
	TextfileDirectory string `json:"textfileDirectory,omitempty"`
	// LeaseRenewInterval is how often the agent renews its liveness Lease.
	LeaseRenewInterval metav1.Duration `json:"leaseRenewInterval"`
	// HostRoot is the host's root filesystem as the agent sees it ("/host"
	// in the DaemonSet): rpm-ostree, journalctl and systemctl run chrooted
	// into it (package hostexec). Empty runs them directly: the agent as a
	// host service.
	HostRoot string `json:"hostRoot,omitempty"`
	// OOMKills reports the kernel's OOM kills in the node's pods as
	// Warning Events on the Node (docs/health.md).
	OOMKills OOMKillsConfig `json:"oomKills"`
}

// OOMKillsConfig: the OOM kills of the kubepods memory cgroups.
type OOMKillsConfig struct {
	Enabled bool `json:"enabled"`
	// CgroupRoot is the kubepods cgroup watched (e.g.
	// /sys/fs/cgroup/kubepods.slice); empty: the first of
	// oomkill.DefaultRoots that exists, under CgroupFS.
	CgroupRoot string `json:"cgroupRoot,omitempty"`
	// CgroupFS is where the host's cgroup filesystem is mounted, in which
	// an empty CgroupRoot is looked for; empty: /sys/fs/cgroup. The
	// DaemonSet mounts the host's at /host/sys/fs/cgroup (its own
	// /sys/fs/cgroup shows only its container's cgroups).
	CgroupFS string `json:"cgroupFS,omitempty"`
}

// DefaultFileConfig is used where the file says nothing.
func DefaultFileConfig() FileConfig {
	return FileConfig{
		Config:             conditions.DefaultConfig(),
		MetricsAddress:     "127.0.0.1:9741",
		MetricsAuth:        string(metricsauth.None),
		LeaseRenewInterval: metav1.Duration{Duration: health.DefaultLeaseRenewInterval},
	}
}

// LoadFileConfig reads a YAML file over the defaults (ParseFileConfig).
// The warnings are for the operator's log.
func LoadFileConfig(path string) (FileConfig, []string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return FileConfig{}, nil, fmt.Errorf("read config: %w", err)
	}
	cfg, warnings, err := ParseFileConfig(data)
	if err != nil {
		return FileConfig{}, warnings, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, warnings, nil
}

// ParseFileConfig reads YAML over the defaults and validates the result
// (conditions.DecodeFile): every unknown field, value of the wrong type and
// invalid value is refused at once, each with its path, value and line. A
// file without apiVersion and kind loads with a warning.
func ParseFileConfig(data []byte) (FileConfig, []string, error) {
	cfg := DefaultFileConfig()
	// A list in the file replaces the default list whole.
	warnings, err := conditions.DecodeFile(data, &cfg, cfg.Validate)
	if err != nil {
		return FileConfig{}, warnings, err
	}
	return cfg, warnings, nil
}

// Validate refuses values the agent cannot run with, naming the field; the
// error is a conditions.FieldErrors.
func (c *FileConfig) Validate() error {
	var errs conditions.FieldErrors
	if err := c.Config.Validate(); err != nil && !errors.As(err, &errs) {
		return err
	}
	if c.HostRoot != "" && !filepath.IsAbs(c.HostRoot) {
		errs.Add("hostRoot", c.HostRoot, "must be an absolute path, or empty to run host commands directly")
	}
	if c.MetricsAddress != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddress); err != nil {
			errs.Add("metricsAddress", c.MetricsAddress, "must be host:port")
		}
	}
	if _, err := metricsauth.ParseMode(c.MetricsAuth); err != nil {
		errs.Add("metricsAuth", c.MetricsAuth, "must be kubernetes or none")
	}
	if (c.MetricsTLSCertFile == "") != (c.MetricsTLSKeyFile == "") {
		errs.Add("metricsTLSCertFile", c.MetricsTLSCertFile, "needs metricsTLSKeyFile, and the other way round")
	}
	if err := health.CheckLeaseRenewInterval(c.LeaseRenewInterval.Duration); err != nil {
		errs.Add("leaseRenewInterval", c.LeaseRenewInterval.Duration, err.Error())
	}
	return errs.Err()
}

// MetricsAuthConfig is the file's metrics settings for daemon.Config.
func (c *FileConfig) MetricsAuthConfig() metricsauth.Config {
	return metricsauth.Config{Mode: metricsauth.Mode(c.MetricsAuth),
		CertFile: c.MetricsTLSCertFile, KeyFile: c.MetricsTLSKeyFile}
}
