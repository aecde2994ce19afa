package osupdate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/nodeward/nodeward/hostexec"
)

// CommandError is a failed rpm-ostree invocation, with its stderr kept.
type CommandError struct {
	Args     []string
	ExitCode int // -1 when the command did not exit by itself
	Stderr   string
	Err      error
}

func (e *CommandError) Error() string {
	msg := strings.TrimSpace(e.Stderr)
	if len(msg) > 2000 {
		msg = msg[len(msg)-2000:]
	}
	return fmt.Sprintf("rpm-ostree %s: %v: %s", strings.Join(e.Args, " "), e.Err, msg)
}

func (e *CommandError) Unwrap() error { return e.Err }

// runner runs the rpm-ostree CLI with a timeout and a clean environment.
// rpmostree-client-go's own runner replaces the child's environment with a
// malformed one and drops stderr, which is why nodeward does not use it.
type runner struct {
	binary string
	env    []string
	host   hostexec.Host
}

func newRunner(binary string, extraEnv []string, host hostexec.Host) runner {
	env := []string{
		"PATH=" + hostexec.HostPath,
		"LANG=C.UTF-8",
		"RPMOSTREE_CLIENT_ID=nodeward",
	}
	return runner{binary: binary, env: append(env, extraEnv...), host: host}
}

// run executes rpm-ostree args and returns stdout. The child is killed when
// timeout passes or ctx ends.
func (r runner) run(ctx context.Context, timeout time.Duration, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := r.host.Command(ctx, r.binary, args...)
	cmd.Env = r.env
	cmd.WaitDelay = 2 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err == nil {
		return stdout.Bytes(), nil
	}
	ce := &CommandError{Args: args, ExitCode: -1, Stderr: stderr.String(), Err: err}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) && exitErr.Exited() {
		ce.ExitCode = exitErr.ExitCode()
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		ce.Err = fmt.Errorf("%w after %s", ctxErr, timeout)
	}
	return nil, ce
}

// transientMarkers are stderr fragments of failures worth retrying: D-Bus
// call timeouts, registry and DNS hiccups.
var transientMarkers = []string{
	"timeout was reached",
	"temporary failure in name resolution",
	"no such host",
	"i/o timeout",
	"connection refused",
	"connection reset",
	"tls handshake timeout",
	"too many requests",
	"503 service unavailable",
	"502 bad gateway",
	"504 gateway timeout",
	"unexpected eof",
}

// isTransient tells whether err is worth retrying as is.
func isTransient(err error) bool {
	var ce *CommandError
	if !errors.As(err, &ce) {
		return false
	}
	if errors.Is(ce.Err, context.DeadlineExceeded) {
		return true // our own per-call timeout; the parent context decides
	}
	s := strings.ToLower(ce.Stderr)
	for _, m := range transientMarkers {
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}

// isBusy tells whether rpm-ostree refused because a transaction runs.
func isBusy(err error) bool {
	var ce *CommandError
	return errors.As(err, &ce) && strings.Contains(strings.ToLower(ce.Stderr), "transaction in progress")
}

// Backoff is a capped exponential backoff.
type Backoff struct {
	Initial  time.Duration // first wait; default 1s
	Max      time.Duration // cap; default 1m
	Attempts int           // total attempts; default 5
}

func (b Backoff) withDefaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = time.Second
	}
	if b.Max <= 0 {
		b.Max = time.Minute
	}
	if b.Attempts <= 0 {
		b.Attempts = 5
	}
	return b
}

// retry runs op until it succeeds, fails permanently, runs out of attempts
// or ctx ends. Busy (transaction in progress) counts as transient.
func (b Backoff) retry(ctx context.Context, what string, op func() error) error {
	b = b.withDefaults()
	wait := b.Initial
	var err error
	for attempt := 1; ; attempt++ {
		if err = op(); err == nil {
			return nil
		}
		if !isTransient(err) && !isBusy(err) {
			return err
		}
		if attempt >= b.Attempts {
			return fmt.Errorf("%s: giving up after %d attempts: %w", what, attempt, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: %w (last error: %v)", what, ctx.Err(), err)
		case <-t.C:
		}
		wait = min(2*wait, b.Max)
	}
}
