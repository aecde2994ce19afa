package node

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// process is one component of the node, in its own process group and
// killed by the kernel when the test binary dies (Pdeathsig).
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	waitErr error
}

// launch starts binary with its output in logPath (appended to). The
// holder gets a session of its own and SIGTERM on the test's death, so that
// it reaps the node; every other process gets SIGKILL.
func launch(name, logPath string, holder bool, binary string, args ...string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create log for %s: %w", name, err)
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if holder {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGTERM}
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		return true, fmt.Errorf("%s exited: %v (log: %s)", p.name, p.waitErr, p.logPath)
	default:
		return false, nil
	}
}

// stop sends SIGTERM to the process group and waits; after grace it kills
// the group and waits again.
func (p *process) stop(grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.done:
		return
	case <-timer.C:
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-p.done
}

// poll calls check until it reports done or ctx ends; a watched process
// that ends fails the wait at once, with its log.
func poll(ctx context.Context, what string, interval time.Duration, watch []*process, check func(context.Context) (bool, error)) error {
	var last error
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		for _, p := range watch {
			if gone, err := p.exited(); gone {
				return fmt.Errorf("waiting for %s: %w", what, err)
			}
		}
		ok, err := check(ctx)
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last error: %v)", what, ctx.Err(), last)
		case <-tick.C:
		}
	}
}

func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("reserve port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// cgroupHierarchies are the mounted cgroup hierarchies: one per controller
// on cgroup v1 (where the kubelet needs its cgroupRoot in every one), or
// the unified one.
func cgroupHierarchies() ([]string, error) {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return []string{"/sys/fs/cgroup"}, nil
	}
	procs, err := filepath.Glob("/sys/fs/cgroup/*/cgroup.procs")
	if err != nil || len(procs) == 0 {
		return nil, fmt.Errorf("no cgroup hierarchy under /sys/fs/cgroup")
	}
	var out []string
	for _, p := range procs {
		out = append(out, filepath.Dir(p))
	}
	return out, nil
}

// createCgroupRoot makes root in every hierarchy; cpuset's needs its CPUs
// and memory nodes copied from the parent before a process may join.
func createCgroupRoot(root string) error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		dir := filepath.Join(h, root)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(h, f)); err == nil {
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return fmt.Errorf("set %s of %s: %w", f, dir, err)
				}
			}
		}
	}
	return nil
}

// removeCgroupRoot removes what the holder left (it removes the cgroups
// itself once their processes are gone); errors are ignored, it is cleanup.
func removeCgroupRoot(root string) {
	hs, _ := cgroupHierarchies()
	for _, h := range hs {
		_ = os.Remove(filepath.Join(h, root))
	}
}
