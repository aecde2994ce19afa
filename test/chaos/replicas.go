package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Replica is one `nodeward coordinator` process under a supervisor: it is
// started again a second after it exits on its own (a Deployment's
// restart; the coordinator exits when it loses its leadership), or after
// the chosen delay when chaos killed it. Whether it leads is read from its
// own log ("became leader", "leadership ended").
type Replica struct {
	Name    string
	Command func() *exec.Cmd // a fresh command each start
	LogDir  string
	Log     func(format string, args ...any)

	kills  chan time.Duration
	pauses chan time.Duration

	mu       sync.Mutex
	leading  bool
	starts   int
	killed   int
	selfExit int
}

// NewReplica returns a replica; Run supervises it.
func NewReplica(name, logDir string, command func() *exec.Cmd, log func(string, ...any)) *Replica {
	return &Replica{Name: name, Command: command, LogDir: logDir, Log: log, kills: make(chan time.Duration),
		pauses: make(chan time.Duration)}
}

// Leading reports whether the running process says it leads.
func (r *Replica) Leading() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leading
}

// Counts returns starts, chaos kills and exits of its own.
func (r *Replica) Counts() (starts, killed, selfExit int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.starts, r.killed, r.selfExit
}

// Kill asks for the process to be killed with SIGKILL and started again
// restartAfter later.
func (r *Replica) Kill(ctx context.Context, restartAfter time.Duration) bool {
	select {
	case r.kills <- restartAfter:
		return true
	case <-ctx.Done():
		return false
	}
}

// Pause asks for the whole process to be stopped with SIGSTOP (a VM
// freeze, a stalled host) and continued with SIGCONT d later: unlike a
// kill, it resumes where it stopped, writes it planned before the pause
// included.
func (r *Replica) Pause(ctx context.Context, d time.Duration) bool {
	select {
	case r.pauses <- d:
		return true
	case <-ctx.Done():
		return false
	}
}

// pause stops cmd's process group for d (or until ctx ends), then
// continues it.
func (r *Replica) pause(ctx context.Context, cmd *exec.Cmd, d time.Duration) {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGSTOP)
	r.Log("coordinator %s paused (SIGSTOP) for %s", r.Name, d.Round(time.Millisecond))
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
	r.Log("coordinator %s continued (SIGCONT)", r.Name)
}

// Run supervises the replica until ctx ends, then kills it.
func (r *Replica) Run(ctx context.Context) error {
	for {
		cmd, exited, err := r.start()
		if err != nil {
			return err
		}
		wait, done := r.supervise(ctx, cmd, exited)
		r.mu.Lock()
		r.leading = false
		r.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// supervise waits for the running cmd to end: killed when ctx ends (done)
// or on a Kill (then started again after the kill's delay), or on its own
// (started again after a second). Pauses stop and continue it meanwhile.
func (r *Replica) supervise(ctx context.Context, cmd *exec.Cmd, exited <-chan struct{}) (wait time.Duration, done bool) {
	for {
		select {
		case d := <-r.pauses:
			r.pause(ctx, cmd, d)
		case <-ctx.Done():
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
			return 0, true
		case d := <-r.kills:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
			r.mu.Lock()
			r.killed++
			r.mu.Unlock()
			return d, false
		case <-exited:
			r.mu.Lock()
			r.selfExit++
			r.mu.Unlock()
			r.Log("coordinator %s exited on its own (%v); restarting it in 1 s", r.Name, cmd.ProcessState)
			return time.Second, false
		}
	}
}

// start runs the command with its stderr (the JSON log) copied to
// LogDir/<name>.log and scanned for leadership changes.
func (r *Replica) start() (*exec.Cmd, chan struct{}, error) {
	logFile, err := os.OpenFile(filepath.Join(r.LogDir, r.Name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	cmd := r.Command()
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = logFile, pw
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, nil, fmt.Errorf("start coordinator %s: %w", r.Name, err)
	}
	r.mu.Lock()
	r.starts++
	r.leading = false
	r.mu.Unlock()
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			_, _ = logFile.Write(append(line, '\n'))
			var entry struct {
				Msg string `json:"msg"`
			}
			if json.Unmarshal(line, &entry) != nil {
				continue
			}
			switch entry.Msg {
			case "became leader":
				r.setLeading(true)
			case "leadership ended":
				r.setLeading(false)
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		pw.Close()
		<-scanned
		logFile.Close()
		r.setLeading(false)
		close(exited)
	}()
	return cmd, exited, nil
}

func (r *Replica) setLeading(v bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.leading != v {
		r.Log("coordinator %s leading=%v", r.Name, v)
	}
	r.leading = v
}
