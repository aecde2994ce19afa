package hostmode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// RebootExitCode is systemd-nspawn's exit status when the container's
// systemd rebooted: systemd-nspawn@.service restarts on it
// (RestartForceExitStatus=133), and so does Container.
const RebootExitCode = 133

// Container is one machine booted by systemd-nspawn: systemd as PID 1 in
// Root, sharing the host's network (the test API server on the loopback is
// reachable; nspawn then keeps CAP_NET_ADMIN only because it is asked to).
// A reboot inside makes nspawn exit with RebootExitCode; the container is
// then booted again from the same root, as systemd-nspawn@.service does:
// /var persists, /run is new, the kernel hands out a new boot ID. Any other
// exit ends it.
//
// nspawn runs in cgroups of its own (one per mounted hierarchy), so that
// the payload/ and supervisor/ cgroups it creates next to itself, and
// leaves behind, are this container's and are removed after each boot,
// along with its entries under /run/systemd/nspawn. nspawn and everything
// in the container die with the test process (a process group and a
// parent-death signal; the container's PID 1 dies with nspawn).
type Container struct {
	Name string // machine name and host name
	Root string
	// LogPath receives nspawn's own output and the console of every boot.
	LogPath string
	log     func(format string, args ...any)
	cgroups []string

	mu       sync.Mutex
	cmd      *exec.Cmd
	pid1     int // host PID of the container's systemd; 0 until found and between boots
	boots    int // boots started
	changed  chan struct{}
	stopping bool
	done     chan struct{}
	exitErr  error
	bootedAt []time.Time // when each boot's nspawn started
}

// BootOptions configure Boot.
type BootOptions struct {
	Name, Root, LogDir string
	Log                func(format string, args ...any)
	// Timeout bounds the first boot until systemd reports the system
	// running; default 2 min.
	Timeout time.Duration
}

// Boot starts the container and returns once its systemd reports the
// system running (or degraded, with the failed units logged).
func Boot(ctx context.Context, o BootOptions) (*Container, error) {
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Minute
	}
	c := &Container{Name: o.Name, Root: o.Root, LogPath: filepath.Join(o.LogDir, "nspawn.log"), log: o.Log,
		changed: make(chan struct{}), done: make(chan struct{})}
	if err := c.makeCgroups(); err != nil {
		return nil, err
	}
	started := make(chan error, 1)
	go c.run(started)
	if err := <-started; err != nil {
		c.removeCgroups()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if err := c.WaitBoot(ctx, 1); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// cgroupRoots are the hierarchies nspawn places its cgroups in: the named
// systemd hierarchy (cgroup v1 and hybrid) and the unified one (hybrid:
// /sys/fs/cgroup/unified; pure v2: /sys/fs/cgroup).
func cgroupRoots() []string {
	var roots []string
	if fileExists("/sys/fs/cgroup/systemd/cgroup.procs") {
		roots = append(roots, "/sys/fs/cgroup/systemd")
	}
	switch {
	case fileExists("/sys/fs/cgroup/unified/cgroup.procs"):
		roots = append(roots, "/sys/fs/cgroup/unified")
	case fileExists("/sys/fs/cgroup/cgroup.controllers"):
		roots = append(roots, "/sys/fs/cgroup")
	}
	return roots
}

// cgroupPrefix names the containers' cgroups: the test process's PID and
// the machine name follow, so that concurrent runs do not meet and the
// leftovers of a killed run are recognized.
const cgroupPrefix = "nodeward-hostmode-"

func (c *Container) makeCgroups() error {
	for _, root := range cgroupRoots() {
		removeStaleCgroups(root)
		dir := filepath.Join(root, fmt.Sprintf("%s%d-%s", cgroupPrefix, os.Getpid(), c.Name))
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			c.removeCgroups()
			return fmt.Errorf("create cgroup for nspawn: %w", err)
		}
		c.cgroups = append(c.cgroups, dir)
	}
	return nil
}

// removeStaleCgroups removes the cgroups of containers whose test process
// is gone (it was killed before it could clean up; its containers died
// with it).
func removeStaleCgroups(root string) {
	dirs, _ := filepath.Glob(filepath.Join(root, cgroupPrefix+"*"))
	for _, dir := range dirs {
		pid, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(dir), cgroupPrefix), "-")
		if !ok {
			continue
		}
		if n, err := strconv.Atoi(pid); err == nil && !fileExists(fmt.Sprintf("/proc/%d", n)) {
			_ = removeCgroupTree(dir, true)
		}
	}
}

// nspawnArgs is the command line measured on this kind of machine (see the
// host-mode issue): --keep-unit and --register=no because no systemd runs
// the host; the host's network, with CAP_NET_ADMIN kept for the agent's
// netlink receive buffer.
func (c *Container) nspawnArgs() []string {
	return []string{"systemd-nspawn", "-D", c.Root, "--machine=" + c.Name, "--boot",
		"--register=no", "--keep-unit", "--console=passive", "--resolv-conf=off", "--link-journal=no",
		"--capability=CAP_NET_ADMIN"}
}

// supervisor is the shell between the test and nspawn. nspawn does not
// take its container down when it is killed (the container's systemd is
// not its child in the kernel's sense of a parent-death signal), so the
// supervisor does: it runs in the container's cgroups (wrapper/ of each),
// starts nspawn in machine/ (where nspawn creates its payload/ and
// supervisor/), and on SIGTERM — the parent-death signal it gets when the
// test process dies, or a kill from the test — kills every process in the
// cgroups: cgroup.kill where the kernel has it, else each listed process.
// SIGUSR1 asks nspawn for an orderly poweroff (nspawn's own SIGTERM).
// Arguments: the cgroup directories, "--", the nspawn command line.
const supervisor = `
cgs=
while [ "$1" != -- ]; do
	mkdir -p "$1/wrapper" "$1/machine" && echo $$ > "$1/wrapper/cgroup.procs" || exit 125
	cgs="$cgs $1"
	shift
done
shift
CGS="$cgs" sh -c 'for cg in $CGS; do echo $$ > "$cg/machine/cgroup.procs" || exit 125; done; exec "$@"' sh "$@" &
child=$!
killall() {
	for cg in $cgs; do [ -e "$cg/cgroup.kill" ] && echo 1 > "$cg/cgroup.kill"; done
	for i in 1 2 3 4 5 6 7 8 9 10; do
		for f in $(find $cgs -name cgroup.procs); do
			for p in $(cat "$f"); do [ "$p" != $$ ] && kill -9 "$p" 2>/dev/null; done
		done
		sleep 0.1
	done
	exit 137
}
trap killall TERM INT HUP
trap 'kill -TERM $child' USR1
while :; do
	wait $child
	rc=$?
	kill -0 $child 2>/dev/null || exit $rc
done
`

// command runs nspawn under the supervisor.
func (c *Container) command(logFile *os.File) *exec.Cmd {
	args := append([]string{"-c", supervisor, "sh"}, c.cgroups...)
	args = append(append(args, "--"), c.nspawnArgs()...)
	cmd := exec.Command("sh", args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	return cmd
}

// run boots the container until it exits other than by a reboot, or is
// stopped. started receives the first start's error.
func (c *Container) run(started chan<- error) {
	defer close(c.done)
	first := true
	for {
		logFile, err := os.OpenFile(c.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			c.finish(err, first, started)
			return
		}
		cmd := c.command(logFile)
		c.mu.Lock()
		if c.stopping {
			c.mu.Unlock()
			logFile.Close()
			c.finish(errors.New("stopped"), first, started)
			return
		}
		fmt.Fprintf(logFile, "\n==== boot %d at %s ====\n", c.boots+1, time.Now().Format(time.RFC3339Nano))
		if err := cmd.Start(); err != nil {
			c.mu.Unlock()
			logFile.Close()
			c.finish(fmt.Errorf("start systemd-nspawn: %w", err), first, started)
			return
		}
		c.cmd, c.pid1 = cmd, 0
		c.boots++
		c.bootedAt = append(c.bootedAt, time.Now())
		c.notifyLocked()
		c.mu.Unlock()
		if first {
			started <- nil
			first = false
		}
		exited, found := make(chan struct{}), make(chan struct{})
		go func() { defer close(found); c.findPID1(cmd, exited) }()
		err = cmd.Wait()
		close(exited)
		<-found
		logFile.Close()
		c.mu.Lock()
		c.cmd, c.pid1 = nil, 0
		stopping := c.stopping
		c.notifyLocked()
		c.mu.Unlock()
		c.cleanBoot()
		code := -1
		var exitErr *exec.ExitError
		switch {
		case err == nil:
			code = 0
		case errors.As(err, &exitErr):
			code = exitErr.ExitCode()
		}
		if code == RebootExitCode && !stopping {
			c.log("container %s rebooted (systemd-nspawn exit %d): booting it again", c.Name, code)
			continue
		}
		if stopping {
			err = nil
		} else {
			err = fmt.Errorf("systemd-nspawn exited: %v (log %s)", err, c.LogPath)
		}
		c.finish(err, false, started)
		return
	}
}

func (c *Container) finish(err error, first bool, started chan<- error) {
	c.mu.Lock()
	c.exitErr = err
	c.notifyLocked()
	c.mu.Unlock()
	if first {
		started <- err
	}
}

func (c *Container) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// findPID1 looks for the container's systemd among nspawn's children: the
// process whose PID in its own namespace is 1.
func (c *Container) findPID1(cmd *exec.Cmd, exited <-chan struct{}) {
	deadline := time.After(time.Minute)
	for {
		if pid := pid1Below(cmd.Process.Pid, 4); pid > 0 {
			c.mu.Lock()
			if c.cmd == cmd {
				c.pid1 = pid
				c.notifyLocked()
			}
			c.mu.Unlock()
			return
		}
		select {
		case <-exited:
			return
		case <-deadline:
			c.log("container %s: no systemd found below systemd-nspawn in a minute", c.Name)
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// pid1Below searches depth levels of descendants of pid for a process that
// is PID 1 of its PID namespace.
func pid1Below(pid, depth int) int {
	if depth == 0 {
		return 0
	}
	for _, child := range children(pid) {
		if nsPID(child) == 1 {
			return child
		}
		if found := pid1Below(child, depth-1); found > 0 {
			return found
		}
	}
	return 0
}

func children(pid int) []int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var out []int
	for _, t := range tasks {
		data, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(data)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// nsPID is the innermost PID of pid (the last field of NSpid).
func nsPID(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(rest)
			if len(f) < 2 {
				return 0
			}
			n, _ := strconv.Atoi(f[len(f)-1])
			return n
		}
	}
	return 0
}

// Boots counts the boots started so far (1 after Boot).
func (c *Container) Boots() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.boots
}

// BootStarted is when boot n (from 1) started.
func (c *Container) BootStarted(n int) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n < 1 || n > len(c.bootedAt) {
		return time.Time{}
	}
	return c.bootedAt[n-1]
}

// Running reports whether the container is up (between boots it is not).
func (c *Container) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pid1 != 0
}

// PID1 waits for the host PID of the container's systemd in the current
// boot.
func (c *Container) PID1(ctx context.Context) (int, error) {
	for {
		c.mu.Lock()
		pid, changed, exitErr := c.pid1, c.changed, c.exitErr
		c.mu.Unlock()
		select {
		case <-c.done:
			return 0, fmt.Errorf("container %s is gone: %v", c.Name, exitErr)
		default:
		}
		if pid != 0 {
			return pid, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("container %s: no systemd: %w", c.Name, ctx.Err())
		case <-changed:
		}
	}
}

// WaitBoot waits until boot n has started and its systemd reports the
// system running (or degraded: the failed units are logged).
func (c *Container) WaitBoot(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		boots, changed := c.boots, c.changed
		c.mu.Unlock()
		if boots >= n {
			break
		}
		select {
		case <-c.done:
			return fmt.Errorf("container %s is gone before boot %d: %v", c.Name, n, c.exitErr)
		case <-ctx.Done():
			return fmt.Errorf("container %s: boot %d did not start: %w", c.Name, n, ctx.Err())
		case <-changed:
		}
	}
	for {
		// --wait returns once the boot is over; the bus may not be up at
		// the first tries.
		out, _ := c.Exec(ctx, "systemctl", "is-system-running", "--wait")
		switch state := strings.TrimSpace(out); state {
		case "running":
			return nil
		case "degraded":
			failed, _ := c.Exec(ctx, "systemctl", "--failed", "--no-legend", "--plain")
			c.log("container %s boot %d degraded; failed units: %s", c.Name, n, strings.TrimSpace(failed))
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("container %s: boot %d not running (last: %q): %w", c.Name, n, strings.TrimSpace(out), ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Exec runs a command inside the container (all its namespaces, through
// nsenter) and returns its standard output; a failure carries the standard
// error. Each call is bounded by a minute.
func (c *Container) Exec(ctx context.Context, args ...string) (string, error) {
	pid, err := c.PID1(ctx)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(pid), "-a", "--"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("in %s: %s: %w: %s", c.Name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// Show returns properties of a unit (systemctl show -p).
func (c *Container) Show(ctx context.Context, unit string, props ...string) (map[string]string, error) {
	out, err := c.Exec(ctx, "systemctl", "show", "-p", strings.Join(props, ","), unit)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	return m, nil
}

// Journal returns journalctl's output inside the container for args
// (e.g. "-u", "nodeward", "-b"), or the error as text.
func (c *Container) Journal(ctx context.Context, args ...string) string {
	out, err := c.Exec(ctx, append([]string{"journalctl", "--no-pager", "-q"}, args...)...)
	if err != nil {
		return out + "\n(journalctl: " + err.Error() + ")"
	}
	return out
}

// Stop powers the container off (nspawn's SIGTERM: an orderly shutdown of
// its systemd), kills it after a minute, waits for it and removes its
// cgroups and /run/systemd/nspawn entries. It returns how the container
// ended before the stop, if it had.
func (c *Container) Stop() error {
	c.mu.Lock()
	c.stopping = true
	cmd := c.cmd
	exitErr := c.exitErr
	c.mu.Unlock()
	select {
	case <-c.done:
	default:
		if cmd != nil {
			_ = cmd.Process.Signal(syscall.SIGUSR1)
		}
		select {
		case <-c.done:
		case <-time.After(time.Minute):
			c.log("container %s did not power off in a minute: killing it", c.Name)
			c.kill()
			<-c.done
		}
	}
	c.removeCgroups()
	c.removeNspawnRun(true)
	return exitErr
}

// Kill kills the container and nspawn at once, as the test process dying
// does, and waits.
func (c *Container) Kill() {
	c.mu.Lock()
	c.stopping = true
	c.mu.Unlock()
	c.kill()
	<-c.done
	c.removeCgroups()
	c.removeNspawnRun(true)
}

// kill has the supervisor kill everything in the container's cgroups.
func (c *Container) kill() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd != nil {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
	}
}

// cleanBoot removes what a finished nspawn leaves: its payload/ and
// supervisor/ cgroups and its /run/systemd/nspawn entries.
func (c *Container) cleanBoot() {
	for _, cg := range c.cgroups {
		if err := removeCgroupTree(cg, false); err != nil {
			c.log("container %s: %v", c.Name, err)
		}
	}
	c.removeNspawnRun(false)
}

func (c *Container) removeCgroups() {
	for _, cg := range c.cgroups {
		if err := removeCgroupTree(cg, true); err != nil {
			c.log("container %s: %v", c.Name, err)
		}
	}
}

// removeCgroupTree removes the cgroups below dir, deepest first, and dir
// itself when self; a cgroup whose last process is still exiting is retried
// for a few seconds.
func removeCgroupTree(dir string, self bool) error {
	var dirs []string
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && (self || path != dir) {
			dirs = append(dirs, path)
		}
		return nil
	})
	sort.Slice(dirs, func(i, j int) bool { return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/") })
	deadline := time.Now().Add(10 * time.Second)
	for _, d := range dirs {
		for {
			err := os.Remove(d)
			if err == nil || errors.Is(err, fs.ErrNotExist) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("remove cgroup %s: %w", d, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// removeNspawnRun removes the machine's entries under /run/systemd/nspawn
// (nspawn cannot remove its propagation directory on a /run that is not a
// tmpfs, and a killed nspawn removes nothing): propagate/<name> and the
// lock of its root directory, and, when all, the directories nspawn
// created there if they are empty. Only empty directories are removed:
// never anything mounted.
func (c *Container) removeNspawnRun(all bool) {
	const base = "/run/systemd/nspawn"
	mine := filepath.Join(base, "propagate", c.Name)
	if entries, err := os.ReadDir(mine); err == nil {
		for _, e := range entries {
			_ = os.Remove(filepath.Join(mine, e.Name()))
		}
	}
	_ = os.Remove(mine)
	var st syscall.Stat_t
	if err := syscall.Stat(c.Root, &st); err == nil {
		_ = os.Remove(filepath.Join(base, "locks", fmt.Sprintf("inode-%d:%d", st.Dev, st.Ino)))
	}
	if all {
		for _, sub := range []string{"propagate", "locks", "unix-export", ""} {
			_ = os.Remove(filepath.Join(base, sub))
		}
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// RemoveLeftovers removes what the containers of dead test processes left
// behind: their cgroups, and the /run/systemd/nspawn entries of machine
// name with root directory root.
func RemoveLeftovers(name, root string) {
	for _, r := range cgroupRoots() {
		removeStaleCgroups(r)
	}
	(&Container{Name: name, Root: root}).removeNspawnRun(true)
}
