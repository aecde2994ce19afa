// Command rpm-ostree is a test double of the rpm-ostree CLI (the verbs
// nodeward calls). Its state lives in $RPMOSTREE_DOUBLE_DIR; see package
// github.com/nodeward/nodeward/test/rpmostree.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nodeward/nodeward/test/rpmostree"
)

func main() {
	dir := os.Getenv(rpmostree.EnvDir)
	if dir == "" {
		fmt.Fprintf(os.Stderr, "error: %s is not set\n", rpmostree.EnvDir)
		os.Exit(1)
	}
	// Serialize invocations as the real daemon serializes transactions.
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
	out, errOut, code := rpmostree.Run(dir, os.Args[1:])
	_ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	os.Stdout.Write(out)
	os.Stderr.Write(errOut)
	if code == rpmostree.ExitHang {
		time.Sleep(time.Hour) // killed by the caller's timeout
	}
	os.Exit(code)
}
