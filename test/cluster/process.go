package cluster

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

// Process is one control-plane component (or another helper process a test
// harness runs the same way, such as test/mco's controller), run in its own
// process group and killed by the kernel if the test binary dies
// (Pdeathsig), so that no component outlives a test run even after a panic
// or a timeout.
type Process struct {
	name    string
	binary  string
	args    []string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	waitErr error
}

func startProcess(name, binary, logDir string, args ...string) (*Process, error) {
	return launch(name, binary, filepath.Join(logDir, name+".log"), os.O_TRUNC, args)
}

// StartProcess starts binary with args as a Process whose stdout and stderr
// go to logPath (truncated). Stop or Kill it when done.
func StartProcess(name, binary, logPath string, args ...string) (*Process, error) {
	return launch(name, binary, logPath, os.O_TRUNC, args)
}

// LogPath is the file receiving the process's output.
func (p *Process) LogPath() string { return p.logPath }

// Done is closed once the process has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// Again starts the same command as p, which must have ended, appending to
// its log.
func (p *Process) Again() (*Process, error) {
	return launch(p.name, p.binary, p.logPath, os.O_APPEND, p.args)
}

// launch starts binary; logMode is os.O_TRUNC for a new log or os.O_APPEND
// to continue one.
func launch(name, binary, logPath string, logMode int, args []string) (*Process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|logMode, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create log for %s: %w", name, err)
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{name: name, binary: binary, args: args, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// Exited reports whether the process has ended, with its error.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, fmt.Errorf("%s exited: %v (log: %s)", p.name, p.waitErr, p.logPath)
	default:
		return false, nil
	}
}

// Kill sends SIGKILL to the process group and waits: a crash, no shutdown.
func (p *Process) Kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM to the process group and waits; after grace it kills
// the group and waits again.
func (p *Process) Stop(grace time.Duration) {
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
		return
	case <-time.After(grace):
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-p.done
}

// freePorts reserves n distinct loopback ports. The listeners are closed just
// before the components bind them; the window is small and ports are picked
// by the kernel, so collisions are rare.
func freePorts(n int) ([]int, error) {
	listeners := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("reserve port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// poll calls check until it reports done, fails, or ctx ends; each process in
// watch is checked too so that a crashed component fails fast with its log.
func poll(ctx context.Context, what string, interval time.Duration, watch []*Process, check func(context.Context) (bool, error)) error {
	var last error
	for {
		for _, p := range watch {
			if gone, err := p.Exited(); gone {
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
		case <-time.After(interval):
		}
	}
}
