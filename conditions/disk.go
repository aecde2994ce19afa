package conditions

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// DiskProbe compares free bytes and inodes of the filesystems holding the
// configured paths with thresholds; paths on one device are measured once.
type DiskProbe struct {
	cfg     DiskConfig
	metrics *Metrics
}

// NewDiskProbe measures cfg.Paths.
func NewDiskProbe(cfg DiskConfig, m *Metrics) *DiskProbe {
	return &DiskProbe{cfg: cfg, metrics: orDiscard(m)}
}

func (p *DiskProbe) Interval() time.Duration             { return p.cfg.PollInterval.Duration }
func (p *DiskProbe) Name() string                        { return "disk" }
func (p *DiskProbe) Condition() corev1.NodeConditionType { return v1alpha1.ConditionDiskPressure }

// Sample statfs()es every path. A missing path is skipped (on many hosts
// /var/lib/containers does not exist); when no path can be measured, or one
// fails for another reason, the result is Unknown.
func (p *DiskProbe) Sample(context.Context) Signal {
	s := Signal{Condition: p.Condition(), At: time.Now()}
	seen := map[uint64]bool{}
	var problems, summary []string
	for _, path := range p.cfg.Paths {
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return p.unknown(s, fmt.Errorf("stat %s: %w", path, err))
		}
		if seen[st.Dev] {
			continue
		}
		seen[st.Dev] = true
		var sfs unix.Statfs_t
		if err := unix.Statfs(path, &sfs); err != nil {
			return p.unknown(s, fmt.Errorf("statfs %s: %w", path, err))
		}
		device := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
		size := float64(sfs.Blocks) * float64(sfs.Bsize)
		avail := float64(sfs.Bavail) * float64(sfs.Bsize)
		if p.metrics != nil {
			p.metrics.fsSize.WithLabelValues(device, path).Set(size)
			p.metrics.fsAvail.WithLabelValues(device, path).Set(avail)
			p.metrics.fsFiles.WithLabelValues(device, path).Set(float64(sfs.Files))
			p.metrics.fsFilesFree.WithLabelValues(device, path).Set(float64(sfs.Ffree))
		}
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
		return p.unknown(s, fmt.Errorf("none of the paths %v exists", p.cfg.Paths))
	}
	if len(problems) > 0 {
		s.Health, s.Reason, s.Message = Unhealthy, "DiskPressure", strings.Join(problems, "; ")
		return s
	}
	s.Health, s.Reason, s.Message = Healthy, "DiskSpaceAvailable", strings.Join(summary, "; ")
	return s
}

func (p *DiskProbe) unknown(s Signal, err error) Signal {
	p.metrics.ProbeError(p.Name())
	s.Health, s.Reason, s.Message = Unknown, "FilesystemUnreadable", err.Error()
	return s
}
