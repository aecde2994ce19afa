package conditions

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

const (
	diskName      = "disk"
	diskCondition = v1alpha1.ConditionDiskPressure
)

var diskKind = probeKind{
	name: diskName, conditions: []conditionRow{{diskCondition, "disk-pressure"}},
	section: func(c *Config) section { return &c.Disk },
	build:   func(c *Config, env *Env) []Probe { return []Probe{NewDiskProbe(c.Disk, env)} },
}

// DiskConfig: free bytes and inodes of the filesystems holding Paths.
type DiskConfig struct {
	Enabled bool     `json:"enabled"`
	Paths   []string `json:"paths"`
	// MinAvailablePercent and MinInodesFreePercent: below either is
	// pressure.
	MinAvailablePercent  float64         `json:"minAvailablePercent"`
	MinInodesFreePercent float64         `json:"minInodesFreePercent"`
	PollInterval         metav1.Duration `json:"pollInterval"`
}

func (c *DiskConfig) enabled() bool { return c.Enabled }

func (c *DiskConfig) setDefaults() {
	*c = DiskConfig{
		Enabled:             true,
		Paths:               []string{"/", "/var", "/var/lib/containers", "/var/lib/kubelet"},
		MinAvailablePercent: 10, MinInodesFreePercent: 5, PollInterval: metav1.Duration{Duration: 10 * time.Second},
	}
}

func (c *DiskConfig) validate(prefix string, errs *FieldErrors) {
	errs.positive(prefix+"pollInterval", c.PollInterval)
	errs.percent(prefix+"minAvailablePercent", c.MinAvailablePercent)
	errs.percent(prefix+"minInodesFreePercent", c.MinInodesFreePercent)
	if c.Enabled && len(c.Paths) == 0 {
		errs.Add(prefix+"paths", "[]", "must list at least one path while the disk probe is enabled")
	}
	for i, p := range c.Paths {
		if !strings.HasPrefix(p, "/") {
			errs.Add(fmt.Sprintf("%spaths[%d]", prefix, i), p, "must be an absolute path")
		}
	}
}

// diskMetrics are statfs figures, by device and mount point.
type diskMetrics struct {
	avail, size, files, filesFree *prometheus.GaugeVec
}

func newDiskMetrics(reg prometheus.Registerer) *diskMetrics {
	m := &diskMetrics{
		avail:     gaugeVec("filesystem_avail_bytes", "Bytes available to unprivileged users.", "device", "mountpoint"),
		size:      gaugeVec("filesystem_size_bytes", "Filesystem size.", "device", "mountpoint"),
		files:     gaugeVec("filesystem_files", "Filesystem inodes.", "device", "mountpoint"),
		filesFree: gaugeVec("filesystem_files_free", "Free inodes.", "device", "mountpoint"),
	}
	reg.MustRegister(m.avail, m.size, m.files, m.filesFree)
	return m
}

// DiskProbe compares free bytes and inodes of the filesystems holding the
// configured paths with thresholds; paths on one device are measured once.
type DiskProbe struct {
	cfg     DiskConfig
	metrics *diskMetrics
	now     func() time.Time
}

// NewDiskProbe measures cfg.Paths and registers its metrics on env's
// Registerer; a nil env stands for the defaults.
func NewDiskProbe(cfg DiskConfig, env *Env) *DiskProbe {
	return &DiskProbe{cfg: cfg, metrics: newDiskMetrics(env.registerer()), now: env.now()}
}

func (p *DiskProbe) Interval() time.Duration             { return p.cfg.PollInterval.Duration }
func (p *DiskProbe) Name() string                        { return diskName }
func (p *DiskProbe) Condition() corev1.NodeConditionType { return diskCondition }

// Sample statfs()es every path. A missing path is skipped (on many hosts
// /var/lib/containers does not exist); when no path can be measured, or one
// fails for another reason, the result is Unknown.
func (p *DiskProbe) Sample(context.Context) Signal {
	s := Signal{Condition: p.Condition(), At: p.now()}
	seen := map[uint64]bool{}
	var problems, summary []string
	for _, path := range p.cfg.Paths {
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return unknown(s, "FilesystemUnreadable", fmt.Errorf("stat %s: %w", path, err))
		}
		if seen[st.Dev] {
			continue
		}
		seen[st.Dev] = true
		var sfs unix.Statfs_t
		if err := unix.Statfs(path, &sfs); err != nil {
			return unknown(s, "FilesystemUnreadable", fmt.Errorf("statfs %s: %w", path, err))
		}
		device := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
		size := float64(sfs.Blocks) * float64(sfs.Bsize)
		avail := float64(sfs.Bavail) * float64(sfs.Bsize)
		p.metrics.size.WithLabelValues(device, path).Set(size)
		p.metrics.avail.WithLabelValues(device, path).Set(avail)
		p.metrics.files.WithLabelValues(device, path).Set(float64(sfs.Files))
		p.metrics.filesFree.WithLabelValues(device, path).Set(float64(sfs.Ffree))
		availPct := 100.0
		if sfs.Blocks > 0 {
			availPct = 100 * avail / size
		}
		// Filesystems without an inode limit (btrfs, some tmpfs) report 0.
		inodePct := 100.0
		if sfs.Files > 0 {
			inodePct = 100 * float64(sfs.Ffree) / float64(sfs.Files)
		}
		summary = append(summary, fmt.Sprintf("%s %.1f%% bytes, %.1f%% inodes free", path, availPct, inodePct))
		if availPct < p.cfg.MinAvailablePercent {
			problems = append(problems, fmt.Sprintf("%s has %.1f%% of bytes available, below %.1f%%", path, availPct, p.cfg.MinAvailablePercent))
		}
		if inodePct < p.cfg.MinInodesFreePercent {
			problems = append(problems, fmt.Sprintf("%s has %.1f%% of inodes free, below %.1f%%", path, inodePct, p.cfg.MinInodesFreePercent))
		}
	}
	if len(seen) == 0 {
		return unknown(s, "FilesystemUnreadable", fmt.Errorf("none of the paths %v exists", p.cfg.Paths))
	}
	if len(problems) > 0 {
		s.Verdict, s.Reason, s.Message = Unhealthy, "DiskPressure", strings.Join(problems, "; ")
		return s
	}
	s.Verdict, s.Reason, s.Message = Healthy, "DiskSpaceAvailable", strings.Join(summary, "; ")
	return s
}
