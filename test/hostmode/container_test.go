package hostmode_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeward/nodeward/test/hostmode"
)

// childRootVariable makes the test binary a container's parent and nothing
// else (see TestContainerDiesWithTheTest).
const childRootVariable = "NODEWARD_HOSTMODE_CHILD_ROOT"

// runChild boots a container from the root named by childRootVariable,
// prints its PID 1 and waits to be killed.
func runChild(root string) int {
	c, err := hostmode.Boot(context.Background(), hostmode.BootOptions{Name: "hm-orphan", Root: root, LogDir: filepath.Dir(root)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	pid, err := c.PID1(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("pid1 %d\n", pid)
	select {}
}

// TestContainerDiesWithTheTest: a test process killed with SIGKILL (a
// timeout, a crash) takes its container along — nspawn, the container's
// systemd and everything under it — even though nspawn alone would leave
// the container running.
func TestContainerDiesWithTheTest(t *testing.T) {
	requireHost(t)
	tarball, err := rootfs()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(t.TempDir(), "root")
	if err := hostmode.Extract(context.Background(), tarball, root); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/hostname"), []byte("hm-orphan\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hostmode.RemoveLeftovers("hm-orphan", root) })
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childRootVariable+"="+root)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	pid1 := 0
	select {
	case line, ok := <-lines:
		if !ok {
			t.Fatal("the child ended without booting its container")
		}
		pid1, err = strconv.Atoi(strings.TrimPrefix(line, "pid1 "))
		if err != nil {
			t.Fatalf("the child said %q", line)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the child did not boot its container in 2 min")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(15 * time.Second)
	for fileExists(fmt.Sprintf("/proc/%d", pid1)) || nspawnOf("hm-orphan") != "" {
		if time.Now().After(deadline) {
			t.Fatalf("15 s after its test process was killed, the container lives on: systemd PID %d exists %v, nspawn: %s",
				pid1, fileExists(fmt.Sprintf("/proc/%d", pid1)), nspawnOf("hm-orphan"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// nspawnOf lists the PIDs of systemd-nspawn processes running machine
// name, or "".
func nspawnOf(name string) string {
	var pids []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), "systemd-nspawn\x00") && strings.Contains(string(cmdline), "--machine="+name+"\x00") {
			pids = append(pids, e.Name())
		}
	}
	return strings.Join(pids, " ")
}
