package osupdate_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeward/nodeward/osupdate"
	"github.com/nodeward/nodeward/test/rpmostree"
)

// doubleDir holds the rpm-ostree double, built once per test binary and
// lazily, so that fuzz workers do not pay for it.
var (
	doubleDir   string
	buildDouble = sync.OnceValues(func() (string, error) { return rpmostree.Build(doubleDir) })
)

func TestMain(m *testing.M) {
	var err error
	if doubleDir, err = os.MkdirTemp("", "rpmostree-double-"); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(doubleDir)
	os.Exit(code)
}

const (
	oldRef   = "ostree-unverified-registry:quay.io/fedora/fedora-coreos:41"
	newImage = "quay.io/fedora/fedora-coreos:42"
	newRef   = "ostree-unverified-registry:" + newImage
	karg     = "nodeward.test=1"
)

var (
	oldSum    = strings.Repeat("0a", 32)
	newSum    = strings.Repeat("1b", 32)
	newDigest = "sha256:" + strings.Repeat("c", 64)
	target    = newRef + " " + karg
)

type host struct {
	*rpmostree.Double
	u *osupdate.Updater
}

func newHost(t *testing.T, tweak func(*osupdate.Config)) host {
	t.Helper()
	doubleBinary, err := buildDouble()
	if err != nil {
		t.Fatal(err)
	}
	d := rpmostree.New(t, doubleBinary,
		rpmostree.Deployment{Checksum: oldSum, ImageRef: oldRef, Digest: "sha256:" + strings.Repeat("a", 64), Kargs: []string{"rw"}},
		map[string]rpmostree.Image{newImage: {Checksum: newSum, Digest: newDigest, Version: "42.1"}})
	cfg := osupdate.Config{
		Binary:          d.Binary,
		Env:             d.Env(),
		Policy:          osupdate.Policy{DefaultTransport: osupdate.TransportUnverifiedRegistry},
		StatePath:       filepath.Join(t.TempDir(), "state", "osupdate.json"),
		CmdlinePath:     d.CmdlinePath(),
		Journal:         rpmostree.Journal{Dir: d.Dir},
		Log:             slog.New(slog.NewTextHandler(t.Output(), nil)),
		StatusTimeout:   5 * time.Second,
		StageTimeout:    5 * time.Second,
		FinalizeTimeout: 5 * time.Second,
		TransactionWait: 10 * time.Second,
		PollInterval:    20 * time.Millisecond,
		Backoff:         osupdate.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond, Attempts: 4},
	}
	if tweak != nil {
		tweak(&cfg)
	}
	u, err := osupdate.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return host{Double: d, u: u}
}

func (h host) booted(t *testing.T) rpmostree.Deployment {
	t.Helper()
	d, err := h.State(t).BootedDeployment()
	if err != nil {
		t.Fatal(err)
	}
	return *d
}

func (h host) calls(t *testing.T, verb string) int {
	t.Helper()
	n := 0
	for _, c := range h.State(t).Calls {
		if len(c) > 0 && c[0] == verb {
			n++
		}
	}
	return n
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestStageFinalizeBootVerify(t *testing.T) {
	t.Parallel()
	h := newHost(t, nil)
	c := ctx(t)
	if got, err := h.u.Booted(c); err != nil || got != oldRef {
		t.Fatalf("Booted before = %q, %v; want %q", got, err, oldRef)
	}
	if err := h.u.Stage(c, target); err != nil {
		t.Fatal(err)
	}
	s := h.State(t)
	if s.Staged == nil || !s.Locked || s.Staged.Checksum != newSum || !slices.Contains(s.Staged.Kargs, karg) {
		t.Fatalf("staged = %+v locked=%v; want %s locked with %s", s.Staged, s.Locked, newSum, karg)
	}
	for _, c := range s.Calls {
		if (c[0] == "rebase" || c[0] == "kargs") && !slices.Contains(c, "--lock-finalization") {
			t.Errorf("%v ran without --lock-finalization", c)
		}
	}
	rebases := h.calls(t, "rebase")
	if err := h.u.Stage(c, target); err != nil {
		t.Fatal(err)
	}
	if h.calls(t, "rebase") != rebases {
		t.Error("staging an already staged target ran rebase again")
	}
	if err := h.u.Finalize(c, target); err != nil {
		t.Fatal(err)
	}
	if s := h.State(t); s.Locked || !s.RebootRequested {
		t.Fatalf("after Finalize locked=%v rebootRequested=%v", s.Locked, s.RebootRequested)
	}
	if err := h.u.Finalize(c, target); err != nil {
		t.Fatalf("second Finalize: %v", err)
	}
	h.Boot(t)
	if b := h.booted(t); b.Checksum != newSum {
		t.Fatalf("booted %s, want %s", b.Checksum, newSum)
	}
	if err := h.u.Verify(c, target); err != nil {
		t.Fatal(err)
	}
	want, _ := h.u.Canonical(target)
	if got, err := h.u.Booted(c); err != nil || got != want {
		t.Fatalf("Booted after = %q, %v; want %q", got, err, want)
	}
	if err := h.u.Stage(c, target); err != nil || h.State(t).Staged != nil {
		t.Fatalf("Stage of the booted target: %v, staged %+v; want a no-op", err, h.State(t).Staged)
	}
	if err := h.u.Finalize(c, target); err != nil {
		t.Fatalf("Finalize of the booted target: %v", err)
	}
	if n := len(h.State(t).Deployments); n != 2 {
		t.Errorf("%d deployments after update, want 2 (the rollback one kept)", n)
	}
}

func TestUnplannedBootBeforeFinalizeKeepsOldOS(t *testing.T) {
	t.Parallel()
	h := newHost(t, nil)
	c := ctx(t)
	if err := h.u.Stage(c, target); err != nil {
		t.Fatal(err)
	}
	h.Boot(t) // power cut, kernel panic, admin reboot
	if b := h.booted(t); b.Checksum != oldSum {
		t.Fatalf("unplanned boot applied the locked deployment: booted %s", b.Checksum)
	}
	if err := h.u.Verify(c, target); err == nil {
		t.Fatal("Verify passed on the old OS")
	}
	if err := h.u.Finalize(c, target); !errors.Is(err, osupdate.ErrNotStaged) {
		t.Fatalf("Finalize with nothing staged: %v, want ErrNotStaged", err)
	}
	if err := h.u.Stage(c, target); err != nil {
		t.Fatal(err)
	}
	if s := h.State(t); s.Staged == nil || !s.Locked {
		t.Fatal("re-staging after the unplanned boot left nothing locked and staged")
	}
}

func TestFinalizeRefusesOtherTargets(t *testing.T) {
	t.Parallel()
	h := newHost(t, nil)
	c := ctx(t)
	if err := h.u.Stage(c, target); err != nil {
		t.Fatal(err)
	}
	if err := h.u.Finalize(c, newRef); !errors.Is(err, osupdate.ErrNotStaged) {
		t.Errorf("Finalize of a different target (no kernel args): %v, want ErrNotStaged", err)
	}
	// Someone else restages the same reference to another build.
	h.Update(t, func(s *rpmostree.State) { s.Staged.Checksum = strings.Repeat("ee", 32) })
	if err := h.u.Finalize(c, target); !errors.Is(err, osupdate.ErrNotStaged) {
		t.Errorf("Finalize after the staged deployment changed: %v, want ErrNotStaged", err)
	}
	if s := h.State(t); !s.Locked || h.calls(t, "finalize-deployment") != 0 {
		t.Error("a refused Finalize unlocked something")
	}
	if err := h.u.Stage(c, "not a/valid:ref:x"); err == nil || !strings.Contains(err.Error(), "not a/valid:ref:x") {
		t.Errorf("invalid target: %v", err)
	}
}

func TestFailedFinalizeRollsBackIdempotently(t *testing.T) {
	t.Parallel()
	h := newHost(t, nil)
	c := ctx(t)
	if err := h.u.Stage(c, target); err != nil {
		t.Fatal(err)
	}
	if err := h.u.Finalize(c, target); err != nil {
		t.Fatal(err)
	}
	h.Update(t, func(s *rpmostree.State) { s.FailFinalize = true })
	h.Boot(t)
	err := h.u.Verify(c, target)
	var ve *osupdate.VerifyError
	if !errors.As(err, &ve) || len(ve.FinalizeJournal) == 0 || !strings.Contains(err.Error(), "No space left") {
		t.Fatalf("Verify = %v; want a VerifyError with the finalize journal", err)
	}
	if err := h.u.Rollback(c); err != nil {
		t.Fatal(err)
	}
	if b := h.booted(t); b.Checksum != oldSum {
		t.Fatalf("booted %s", b.Checksum)
	}
	h.Boot(t)
	if b := h.booted(t); b.Checksum != oldSum {
		t.Fatalf("reboot after rollback booted %s, want the old OS", b.Checksum)
	}
	// Rollback is idempotent: a second call (a crash before the agent
	// recorded the first) keeps the old OS and never rolls back further.
	if err := h.u.Rollback(c); err != nil {
		t.Errorf("second Rollback: %v, want nil (nothing left to do)", err)
	}
	h.Boot(t)
	if b := h.booted(t); b.Checksum != oldSum {
		t.Fatalf("reboot after the second rollback booted %s, want the old OS", b.Checksum)
	}
	if err := h.u.Stage(c, target); !errors.Is(err, osupdate.ErrTargetFailed) {
		t.Errorf("Stage of the failed target: %v, want ErrTargetFailed", err)
	}
	if failed, _, _ := h.u.FailedTarget(); !strings.HasPrefix(failed, newRef) {
		t.Errorf("FailedTarget = %q", failed)
	}
}

func TestBootIntoWrongDeploymentRollsBackToGoodOS(t *testing.T) {
	t.Parallel()
	h := newHost(t, nil)
	c := ctx(t)
	if err := h.u.Stage(c, target); err != nil {
		t.Fatal(err)
	}
	if err := h.u.Finalize(c, target); err != nil {
		t.Fatal(err)
	}
	h.Update(t, func(s *rpmostree.State) { s.BootWrong = true })
	h.Boot(t)
	if err := h.u.Verify(c, target); err == nil {
		t.Fatal("Verify passed after booting the wrong deployment")
	}
	if err := h.u.Rollback(c); err != nil {
		t.Fatal(err)
	}
	h.Boot(t)
	if b := h.booted(t); b.Checksum != oldSum {
		t.Fatalf("after rollback the next boot is %s, want the known-good %s", b.Checksum, oldSum)
	}
}

func TestBadTargetBootedRollsBack(t *testing.T) {
	t.Parallel()
	h := newHost(t, nil)
	c := ctx(t)
	for _, step := range []func(context.Context, string) error{h.u.Stage, h.u.Finalize} {
		if err := step(c, target); err != nil {
			t.Fatal(err)
		}
	}
	h.Boot(t)
	if err := h.u.Verify(c, target); err != nil {
		t.Fatal(err)
	}
	// The node never became healthy: the daemon asks for a rollback.
	if err := h.u.RollbackTarget(c, target, "node not Ready after reboot"); err != nil {
		t.Fatal(err)
	}
	h.Boot(t)
	if b := h.booted(t); b.Checksum != oldSum {
		t.Fatalf("booted %s after rollback, want %s", b.Checksum, oldSum)
	}
	if n := len(h.State(t).Deployments); n != 2 {
		t.Errorf("%d deployments, want both kept", n)
	}
}

func TestInjectedFailures(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		verb    string
		failure rpmostree.Failure
		wantErr string // empty: Stage succeeds after retries
	}{
		{name: "transient D-Bus timeout retried", verb: "rebase", failure: rpmostree.Failure{Mode: "exit", Times: 2,
			Stderr: "error: Timeout was reached"}},
		{name: "hung status retried", verb: "status", failure: rpmostree.Failure{Mode: "timeout", Times: 1}},
		{name: "transaction in progress waited for", verb: "*", failure: rpmostree.Failure{Mode: "busy", Times: 5}},
		{name: "permanent error keeps stderr", verb: "rebase", failure: rpmostree.Failure{Mode: "exit",
			Stderr: "error: reading manifest: manifest unknown"}, wantErr: "manifest unknown"},
		{name: "garbage status", verb: "status", failure: rpmostree.Failure{Mode: "garbage"}, wantErr: "decoding rpm-ostree status"},
		{name: "hung rebase", verb: "rebase", failure: rpmostree.Failure{Mode: "timeout"}, wantErr: "deadline exceeded"},
		{name: "failed kargs", verb: "kargs", failure: rpmostree.Failure{Mode: "exit", Stderr: "error: bad karg"}, wantErr: "bad karg"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHost(t, func(c *osupdate.Config) {
				c.StatusTimeout, c.StageTimeout = 300*time.Millisecond, 300*time.Millisecond
			})
			h.Inject(t, tc.verb, tc.failure)
			err := h.u.Stage(ctx(t), target)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if s := h.State(t); s.Staged == nil || !s.Locked {
					t.Fatal("not staged and locked")
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Stage error = %v, want one containing %q", err, tc.wantErr)
			}
			h.Boot(t)
			if b := h.booted(t); b.Checksum != oldSum {
				t.Fatalf("a failed stage changed the OS: booted %s", b.Checksum)
			}
		})
	}
}

func TestFailedFinalizeCommandKeepsOldOS(t *testing.T) {
	t.Parallel()
	h := newHost(t, nil)
	c := ctx(t)
	if err := h.u.Stage(c, target); err != nil {
		t.Fatal(err)
	}
	h.Inject(t, "finalize-deployment", rpmostree.Failure{Mode: "exit", Stderr: "error: Expected staged base checksum"})
	if err := h.u.Finalize(c, target); err == nil || !strings.Contains(err.Error(), "Expected staged base checksum") {
		t.Fatalf("Finalize = %v", err)
	}
	h.Boot(t)
	if b := h.booted(t); b.Checksum != oldSum {
		t.Fatalf("booted %s after a failed finalize", b.Checksum)
	}
}

// BenchmarkStatusCall measures one `status --json` round trip through the
// exec path (process start, timeout context, parse) against the double.
func BenchmarkStatusCall(b *testing.B) {
	bin, err := buildDouble()
	if err != nil {
		b.Fatal(err)
	}
	d := rpmostree.New(b, bin, rpmostree.Deployment{Checksum: oldSum, ImageRef: oldRef}, nil)
	u, err := osupdate.New(osupdate.Config{Binary: bin, Env: d.Env(), StatePath: filepath.Join(b.TempDir(), "s.json")})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := u.Status(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

// TestStageDeletedAndQuotedKernelArgs stages a target that adds quoted
// kernel arguments and deletes others against the double, boots it (GRUB
// moves and drops the quotes on the command line) and verifies it.
func TestStageDeletedAndQuotedKernelArgs(t *testing.T) {
	t.Parallel()
	h := newHost(t, nil)
	h.Update(t, func(s *rpmostree.State) {
		s.Deployments[0].Kargs = []string{"rw", "mitigations=off", "oldarg", `dyndbg="file x.c +p"`}
	})
	c := ctx(t)
	const tg = newImage + ` nodeward.test=1 foo="a b" cgroup_no_v1="all" !mitigations=off !oldarg !dyndbg="file x.c +p" !absent`
	want := newRef + ` cgroup_no_v1="all" foo="a b" nodeward.test=1 !absent !dyndbg="file x.c +p" !mitigations=off !oldarg`
	if got, err := h.u.Canonical(tg); err != nil || got != want {
		t.Fatalf("Canonical = %q, %v; want %q", got, err, want)
	}
	if err := h.u.Stage(c, tg); err != nil {
		t.Fatal(err)
	}
	s := h.State(t)
	if s.Staged == nil || !s.Locked {
		t.Fatalf("staged %+v locked %v", s.Staged, s.Locked)
	}
	wantKargs := []string{"rw", "nodeward.test=1", `foo="a b"`, `cgroup_no_v1="all"`}
	if !sameSet(s.Staged.Kargs, wantKargs) {
		t.Errorf("staged kernel arguments %q, want %q", s.Staged.Kargs, wantKargs)
	}
	var kargsCalls [][]string
	for _, call := range s.Calls {
		if call[0] == "kargs" {
			kargsCalls = append(kargsCalls, call)
		}
	}
	wantCall := []string{"kargs", "--lock-finalization", "--delete-if-present=absent", `--delete-if-present=dyndbg="file x.c +p"`,
		"--delete-if-present=mitigations=off", "--delete-if-present=oldarg",
		`--append-if-missing=cgroup_no_v1="all"`, `--append-if-missing=foo="a b"`, "--append-if-missing=nodeward.test=1"}
	if len(kargsCalls) != 1 || !slices.Equal(kargsCalls[0], wantCall) {
		t.Errorf("kargs calls %q, want one: %q", kargsCalls, wantCall)
	}
	// Staging again changes nothing (the record and the lock say staged).
	if err := h.u.Stage(c, tg); err != nil || h.calls(t, "kargs") != 1 {
		t.Fatalf("second Stage: %v, %d kargs calls", err, h.calls(t, "kargs"))
	}
	if err := h.u.Finalize(c, tg); err != nil {
		t.Fatal(err)
	}
	h.Boot(t)
	cmdline, err := os.ReadFile(h.CmdlinePath())
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range []string{`"foo=a b"`, " cgroup_no_v1=all", " nodeward.test=1"} {
		if !strings.Contains(string(cmdline), part) {
			t.Errorf("booted command line %q lacks %s", cmdline, part)
		}
	}
	if err := h.u.Verify(c, tg); err != nil {
		t.Fatal(err)
	}
	if got, err := h.u.Booted(c); err != nil || got != want {
		t.Fatalf("Booted = %q, %v; want %q", got, err, want)
	}

	// A deleted argument back on the command line (someone's kargs, a
	// bootloader drop-in): not the target any more, and the reason says
	// which argument.
	if err := os.WriteFile(h.CmdlinePath(), append(bytes.TrimSpace(cmdline), " oldarg\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	err = h.u.Verify(c, tg)
	var ve *osupdate.VerifyError
	if !errors.As(err, &ve) || !slices.Contains(ve.Reasons, "deleted kernel arguments present: oldarg") || len(ve.Reasons) != 1 {
		t.Fatalf("Verify with a deleted argument present = %v; want only that reason", err)
	}
	if got, err := h.u.Booted(c); err != nil || got != newRef {
		t.Fatalf("Booted with a deleted argument present = %q, %v; want the image reference %q", got, err, newRef)
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// TestDigestPinnedBootedImageIsAdopted: a target that pins the digest of
// the booted image is the booted OS: nothing is staged, BootedIs holds,
// Adopt makes Booted answer the target and Verify pass, with no boot. A
// kernel argument more is not the booted OS.
func TestDigestPinnedBootedImageIsAdopted(t *testing.T) {
	t.Parallel()
	h := newHost(t, nil)
	c := ctx(t)
	pinned := "ostree-unverified-registry:quay.io/fedora/fedora-coreos@sha256:" + strings.Repeat("a", 64)
	if same, err := h.u.BootedIs(c, pinned+" "+karg); err != nil || same {
		t.Fatalf("BootedIs with a kernel argument more = %v, %v; want false", same, err)
	}
	if err := h.u.Stage(c, pinned); err != nil {
		t.Fatal(err)
	}
	if h.calls(t, "rebase") != 0 || h.State(t).Staged != nil {
		t.Fatalf("staging the booted image by digest ran rebase or staged %+v", h.State(t).Staged)
	}
	if same, err := h.u.BootedIs(c, pinned); err != nil || !same {
		t.Fatalf("BootedIs = %v, %v; want true", same, err)
	}
	if err := h.u.Adopt(c, pinned); err != nil {
		t.Fatal(err)
	}
	want, _ := h.u.Canonical(pinned)
	if got, err := h.u.Booted(c); err != nil || got != want {
		t.Fatalf("Booted after Adopt = %q, %v; want %q", got, err, want)
	}
	if err := h.u.Verify(c, pinned); err != nil {
		t.Fatalf("Verify after Adopt: %v", err)
	}
	if s := h.State(t); s.Boots != 0 || s.RebootRequested {
		t.Fatalf("boots %d, reboot requested %v; want none", s.Boots, s.RebootRequested)
	}
	if err := h.u.Adopt(c, newRef); err == nil {
		t.Fatal("Adopt of another image succeeded")
	}
}
