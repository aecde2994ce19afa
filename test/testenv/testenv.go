// Package testenv decides what a test may skip. Outside CI a test that needs
// root, a binary or the control plane skips with the reason; in CI (CI=true)
// every test must run, so the same situation is a failure.
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// InCI reports whether the tests run under CI, where no skip is allowed.
func InCI() bool { return os.Getenv("CI") == "true" }

// Require skips the test with reason when ok is false, or fails it in CI.
func Require(t testing.TB, ok bool, reason string) {
	t.Helper()
	if ok {
		return
	}
	if InCI() {
		t.Fatalf("CI must run every test, but: %s", reason)
	}
	t.Skip(reason)
}

// RequireRoot needs an effective UID of 0 (network namespaces, mounts,
// starting containerd).
func RequireRoot(t testing.TB) {
	t.Helper()
	Require(t, os.Geteuid() == 0, "needs root")
}

// RequireBinary needs name on PATH and returns its path.
func RequireBinary(t testing.TB, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	Require(t, err == nil, name+" not found on PATH")
	return path
}
