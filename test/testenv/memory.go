package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// MemoryThrash makes real memory pressure on this host: a memory cgroup
// with a small limit and a file several times that size on a disk-backed
// filesystem, read at random by test/memthrash from inside the cgroup.
// Evictions and refaults of the cgroup's page cache are memory stall in
// /proc/pressure/memory; nothing outside the cgroup is squeezed.
type MemoryThrash struct {
	cgroup, file, bin string
}

// NewMemoryThrash needs root and a memory cgroup controller (v1 or v2);
// it builds the thrasher and writes the file, and removes both with t.
func NewMemoryThrash(t testing.TB, limit int64) *MemoryThrash {
	t.Helper()
	RequireRoot(t)
	Require(t, fileExists("/proc/pressure/memory"), "kernel without PSI")
	var cgroup, limitFile string
	switch {
	case fileExists("/sys/fs/cgroup/cgroup.controllers"):
		cgroup, limitFile = "/sys/fs/cgroup", "memory.max"
	case fileExists("/sys/fs/cgroup/memory/memory.limit_in_bytes"):
		cgroup, limitFile = "/sys/fs/cgroup/memory", "memory.limit_in_bytes"
	default:
		Require(t, false, "no memory cgroup controller mounted under /sys/fs/cgroup")
	}
	cgroup = filepath.Join(cgroup, fmt.Sprintf("nodeward-thrash-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err := os.Mkdir(cgroup, 0o755); err != nil {
		t.Fatalf("create memory cgroup: %v", err)
	}
	t.Cleanup(func() { RemoveCgroup(t, cgroup) })
	if err := os.WriteFile(filepath.Join(cgroup, limitFile), []byte(strconv.FormatInt(limit, 10)), 0); err != nil {
		t.Fatalf("set the cgroup's memory limit: %v", err)
	}
	dir, err := os.MkdirTemp("/var/tmp", "nodeward-thrash-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	m := &MemoryThrash{cgroup: cgroup, file: filepath.Join(dir, "data"), bin: filepath.Join(dir, "memthrash")}
	if out, err := exec.Command("go", "build", "-o", m.bin, "github.com/nodeward/nodeward/test/memthrash").CombinedOutput(); err != nil {
		t.Fatalf("build memthrash: %v\n%s", err, out)
	}
	if err := writeUncached(m.file, 8*limit); err != nil {
		t.Fatalf("write the thrash file: %v", err)
	}
	return m
}

// Start starts a thrasher; the returned func kills it and waits.
func (m *MemoryThrash) Start(t testing.TB) (stop func()) {
	t.Helper()
	cmd := exec.Command(m.bin, "-cgroup", m.cgroup, "-file", m.file)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start memthrash: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cmd.Process.Kill()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

// writeUncached writes size bytes of incompressible data and drops them
// from the page cache, so that the thrasher's reads are charged to its
// own cgroup rather than found already cached (and charged) elsewhere.
func writeUncached(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i*7 + i>>8)
	}
	for written := int64(0); written < size; written += int64(len(buf)) {
		buf[0]++
		if _, err := f.Write(buf); err != nil {
			return err
		}
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}

// MakeCgroups makes the cgroups from below base down to leaf, removing
// them (deepest first, once their processes are gone) when t ends.
func MakeCgroups(t testing.TB, base, leaf string) {
	t.Helper()
	rel, err := filepath.Rel(base, leaf)
	if err != nil {
		t.Fatal(err)
	}
	dir := base
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		dir = filepath.Join(dir, part)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatalf("create cgroup %s: %v", dir, err)
		}
		cg := dir
		t.Cleanup(func() { RemoveCgroup(t, cg) })
	}
}

// RemoveCgroup waits for the cgroup's last process to be gone (a killed
// process leaves it a moment later) and removes it; a cgroup already gone
// is fine.
func RemoveCgroup(t testing.TB, cgroup string) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := os.Remove(cgroup)
		if err == nil || os.IsNotExist(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("remove cgroup %s: %v", cgroup, err)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
