package cluster

import (
	"context"
	"fmt"
	"math/rand/v2"
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
	opts    LaunchOptions
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	waitErr error
}

// LaunchOptions say how Launch runs a process.
type LaunchOptions struct {
	// Append continues the log instead of truncating it.
	Append bool
	// Session starts the process in a session of its own and has the
	// kernel send it SIGTERM, not SIGKILL, when the test binary dies, so
	// that it can reap what it holds (test/node's holder of the node's
	// mount namespace).
	Session bool
}

func startProcess(name, binary, logDir string, args ...string) (*Process, error) {
	return Launch(name, binary, filepath.Join(logDir, name+".log"), LaunchOptions{}, args...)
}

// StartProcess starts binary with args as a Process whose stdout and stderr
// go to logPath (truncated). Stop or Kill it when done.
func StartProcess(name, binary, logPath string, args ...string) (*Process, error) {
	return Launch(name, binary, logPath, LaunchOptions{}, args...)
}

// LogPath is the file receiving the process's output.
func (p *Process) LogPath() string { return p.logPath }

// Done is closed once the process has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// Pid is the process's ID, also its process group's.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Again starts the same command as p, which must have ended, appending to
// its log.
func (p *Process) Again() (*Process, error) {
	opts := p.opts
	opts.Append = true
	return Launch(p.name, p.binary, p.logPath, opts, p.args...)
}

// Launch starts binary with args as a Process whose stdout and stderr go to
// logPath, as opts say. Stop or Kill it when done.
func Launch(name, binary, logPath string, opts LaunchOptions, args ...string) (*Process, error) {
	logMode := os.O_TRUNC
	if opts.Append {
		logMode = os.O_APPEND
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|logMode, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create log for %s: %w", name, err)
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if opts.Session {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGTERM}
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{name: name, binary: binary, args: args, opts: opts, cmd: cmd, logPath: logPath, done: make(chan struct{})}
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

// FreePorts reserves n distinct loopback ports below the kernel's
// ephemeral range (net.ipv4.ip_local_port_range, 32768-60999 by default).
// The listeners are closed just before the components bind them. A port
// from the ephemeral range can be taken in that window by the local end of
// any outgoing connection, and the test packages running in parallel open
// hundreds: a kubelet once found its port taken ("address already in use",
// CI at 053dd8a), most likely that way. Below the range only another
// listener can take it, and the ports are picked at random among 10000 and
// more.
func FreePorts(n int) ([]int, error) {
	lo, hi := 10000, ephemeralLow()-1
	// Too few ports below the range (an unusual ip_local_port_range): let
	// the kernel pick, as before.
	kernelPicks := hi-lo < 1000
	listeners := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for attempts := 0; len(ports) < n; attempts++ {
		addr := "127.0.0.1:0"
		if !kernelPicks && attempts <= 100*n {
			addr = fmt.Sprintf("127.0.0.1:%d", lo+rand.IntN(hi-lo+1))
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			if addr == "127.0.0.1:0" {
				return nil, fmt.Errorf("reserve port: %w", err)
			}
			continue // taken: another
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// FreeAddr is one loopback address "127.0.0.1:PORT" from FreePorts, for a
// server a test starts itself.
func FreeAddr() (string, error) {
	ports, err := FreePorts(1)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("127.0.0.1:%d", ports[0]), nil
}

// ephemeralLow is the lowest port the kernel gives outgoing connections.
func ephemeralLow() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	var low, high int
	if _, err := fmt.Sscan(string(data), &low, &high); err != nil || low <= 0 {
		return 32768
	}
	return low
}

// Poll calls check until it reports done, fails, or ctx ends; each process in
// watch is checked too so that a crashed component fails fast with its log.
func Poll(ctx context.Context, what string, interval time.Duration, watch []*Process, check func(context.Context) (bool, error)) error {
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
