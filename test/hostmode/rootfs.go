package hostmode

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The container's root: a minimal Debian with systemd as PID 1, D-Bus and
// logind (libpam-systemd pulls it in), ip and ps for the tests. The same
// systemd as RHEL 9 and Fedora CoreOS run in spirit (252), not in version.
const (
	RootfsSuite   = "bookworm"
	rootfsVariant = "minbase"
)

// RootfsPackages are installed on top of the variant.
var RootfsPackages = []string{"systemd", "systemd-sysv", "dbus", "libpam-systemd", "iproute2", "procps"}

// rootfsBuildTimeout bounds mmdebstrap (about 2 min here).
const rootfsBuildTimeout = 15 * time.Minute

// CacheDir is where built roots are kept: $XDG_CACHE_HOME/nodeward/hostmode
// (~/.cache/nodeward/hostmode).
func CacheDir() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "nodeward", "hostmode"), nil
}

// rootfsKey names the root by what is in it.
func rootfsKey() string {
	sum := sha256.Sum256([]byte(strings.Join(append([]string{RootfsSuite, rootfsVariant}, RootfsPackages...), "\n")))
	return RootfsSuite + "-" + rootfsVariant + "-" + hex.EncodeToString(sum[:])[:16]
}

// Rootfs returns the compressed root tarball, building it with mmdebstrap
// when the cache has none (about 2 min; once per machine and package list).
// Concurrent callers, in this process or others, wait for one build.
func Rootfs(ctx context.Context, log func(format string, args ...any)) (string, error) {
	path, cached, err := RootfsCached()
	if err != nil {
		return "", err
	}
	if cached {
		return path, nil
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", err
	}
	defer lock.Close() // unlocks
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	if _, err := os.Stat(path); err == nil {
		return path, nil // built by another process meanwhile
	}
	for _, bin := range []string{"mmdebstrap", "zstd"} {
		if _, err := exec.LookPath(bin); err != nil {
			return "", fmt.Errorf("%s is needed to build the container root (Debian package %s): %w", bin, bin, err)
		}
	}
	start := time.Now()
	log("building the container root %s with mmdebstrap (about 2 min, cached in %s)", rootfsKey(), dir)
	ctx, cancel := context.WithTimeout(ctx, rootfsBuildTimeout)
	defer cancel()
	tarball := fmt.Sprintf("%s.%d.tar", path, os.Getpid())
	defer os.Remove(tarball)
	args := []string{"--variant=" + rootfsVariant, "--include=" + strings.Join(RootfsPackages, ","), RootfsSuite, tarball}
	if out, err := exec.CommandContext(ctx, "mmdebstrap", args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("mmdebstrap %s: %w\n%s", strings.Join(args, " "), err, tail(string(out), 2000))
	}
	partial := fmt.Sprintf("%s.%d.partial", path, os.Getpid())
	defer os.Remove(partial)
	if out, err := exec.CommandContext(ctx, "zstd", "-q", "-T0", "-3", "-f", tarball, "-o", partial).CombinedOutput(); err != nil {
		return "", fmt.Errorf("zstd: %w: %s", err, out)
	}
	if err := os.Rename(partial, path); err != nil {
		return "", err
	}
	log("container root built in %s", time.Since(start).Round(time.Second))
	return path, nil
}

// RootfsCached returns where the root tarball is cached and whether it is
// there.
func RootfsCached() (path string, cached bool, err error) {
	dir, err := CacheDir()
	if err != nil {
		return "", false, err
	}
	path = filepath.Join(dir, "rootfs-"+rootfsKey()+".tar.zst")
	_, err = os.Stat(path)
	return path, err == nil, nil
}

// Extract unpacks the root tarball into dir (a few seconds), owners and
// modes kept.
func Extract(ctx context.Context, tarball, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, "tar", "--zstd", "--numeric-owner", "-xpf", tarball, "-C", dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("extract %s: %w: %s", tarball, err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "usr/lib/systemd/systemd")); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("extract %s: no systemd in the root", tarball)
	}
	return nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
