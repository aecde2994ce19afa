// Package kernelevents makes the kernel log real problems for tests: an
// ext4 filesystem on a loop device that the kernel remounts read-only after
// an error, an XFS filesystem the kernel shuts down, and records written to /dev/kmsg by a process (look-alikes,
// floods). Everything it makes is torn down when the test ends. It needs
// root: outside CI the tests skip, in CI they fail (testenv.RequireRoot).
package kernelevents

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodeward/nodeward/test/testenv"
)

// Lock gives t the kernel log to itself until it ends: tests of several
// packages read it, and one that floods it would overwrite the record
// another waits for. An flock on a file every test process shares.
func Lock(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "nodeward-kernel-log.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("lock the kernel log for the test: %v", err)
	}
	t.Cleanup(func() { f.Close() }) // closing the file releases the lock
}

// Filesystem is a filesystem in a file, attached to a loop device and
// mounted (ext4 with errors=remount-ro, or XFS).
type Filesystem struct {
	// Device is the loop device's name, as the kernel names it in its log
	// ("loop3"); Mount is where it is mounted.
	Device, Mount string
	fstype, path  string
	mounted       bool
}

// NewExt4 makes, attaches and mounts a 32 MiB ext4 filesystem mounted with
// errors=remount-ro; t's cleanup unmounts and detaches it.
func NewExt4(t testing.TB) *Filesystem {
	return newFilesystem(t, "ext4", 32<<20, "mkfs.ext4", []string{"-q", "-F"}, "errors=remount-ro")
}

// NewXFS makes, attaches and mounts a 320 MiB XFS filesystem (the
// smallest mkfs.xfs makes); t's cleanup unmounts and detaches it.
func NewXFS(t testing.TB) *Filesystem {
	return newFilesystem(t, "xfs", 320<<20, "mkfs.xfs", []string{"-q", "-f"}, "")
}

func newFilesystem(t testing.TB, fstype string, size int64, mkfs string, mkfsArgs []string, options string) *Filesystem {
	t.Helper()
	testenv.RequireRoot(t)
	mkfs = testenv.RequireBinary(t, mkfs)
	losetup := testenv.RequireBinary(t, "losetup")
	dir := t.TempDir()
	img := filepath.Join(dir, "fs.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	run(t, mkfs, append(mkfsArgs, img)...)
	dev := strings.TrimSpace(run(t, losetup, "--find", "--show", img))
	fs := &Filesystem{Device: filepath.Base(dev), Mount: filepath.Join(dir, "mnt"), fstype: fstype, path: dev}
	t.Cleanup(func() {
		fs.Unmount(t)
		if out, err := exec.Command(losetup, "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("detach %s: %v: %s", dev, err, out)
		}
	})
	if err := os.Mkdir(fs.Mount, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(dev, fs.Mount, fstype, 0, options); err != nil {
		t.Fatalf("mount %s (%s) on %s: %v", dev, fstype, fs.Mount, err)
	}
	fs.mounted = true
	return fs
}

// Fail makes the kernel fail the filesystem: an ext4 error
// (/sys/fs/ext4/<dev>/trigger_fs_error), which remounts it read-only and
// logs "EXT4-fs (<dev>): Remounting filesystem read-only"; an XFS
// shutdown (xfs_io -x -c shutdown), which logs "XFS (<dev>): ... Shutting
// down filesystem."
func (fs *Filesystem) Fail(t testing.TB) {
	t.Helper()
	switch fs.fstype {
	case "ext4":
		path := filepath.Join("/sys/fs/ext4", fs.Device, "trigger_fs_error")
		if err := os.WriteFile(path, []byte("nodeward test"), 0); err != nil {
			t.Fatalf("fail %s: %v", fs.Device, err)
		}
	case "xfs":
		run(t, testenv.RequireBinary(t, "xfs_io"), "-x", "-c", "shutdown", fs.Mount)
	}
}

// Unmount unmounts the filesystem, once.
func (fs *Filesystem) Unmount(t testing.TB) {
	t.Helper()
	if !fs.mounted {
		return
	}
	if err := unix.Unmount(fs.Mount, 0); err != nil {
		t.Errorf("unmount %s: %v", fs.Mount, err)
		return
	}
	fs.mounted = false
}

// WriteKmsg writes each line to /dev/kmsg as a process does (the kernel
// gives them facility LOG_USER whatever their prefix says). The kernel
// rate-limits each open file to 10 lines per 5 s unless printk_devkmsg is
// "on" (which a boot parameter can lock), so the lines go through a new
// open file every 10.
func WriteKmsg(t testing.TB, lines ...string) {
	t.Helper()
	testenv.RequireRoot(t)
	const burst = 10
	for start := 0; start < len(lines); start += burst {
		f, err := os.OpenFile("/dev/kmsg", os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines[start:min(start+burst, len(lines))] {
			if _, err := f.Write([]byte(l)); err != nil {
				f.Close()
				t.Fatalf("write %q to /dev/kmsg: %v", l, err)
			}
		}
		f.Close()
	}
}

// RingBufferSize is the size of the kernel's log ring buffer, in bytes.
func RingBufferSize(t testing.TB) int {
	t.Helper()
	n, err := unix.Klogctl(unix.SYSLOG_ACTION_SIZE_BUFFER, nil)
	if err != nil {
		t.Fatalf("size of the kernel log buffer: %v", err)
	}
	return n
}

// KernelRecord makes the kernel log a record of its own, now: a loop
// device attached to a small file logs its capacity change. It returns the
// device's name, which the record names.
func KernelRecord(t testing.TB) string {
	t.Helper()
	testenv.RequireRoot(t)
	losetup := testenv.RequireBinary(t, "losetup")
	img := filepath.Join(t.TempDir(), "record.img")
	if err := os.WriteFile(img, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	dev := strings.TrimSpace(run(t, losetup, "--find", "--show", img))
	t.Cleanup(func() { _ = exec.Command(losetup, "-d", dev).Run() })
	return filepath.Base(dev)
}

func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Lines makes n distinct look-alike lines of about size bytes each.
func Lines(prefix string, n, size int) []string {
	out := make([]string, n)
	pad := strings.Repeat("x", max(0, size-len(prefix)-12))
	for i := range out {
		out[i] = fmt.Sprintf("%s %d %s", prefix, i, pad)
	}
	return out
}
