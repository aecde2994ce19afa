package osupdate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nodeward/nodeward/hostexec"
)

// ErrTargetFailed refuses a target that already failed verification and
// was rolled back; it is not tried again until the target changes.
var ErrTargetFailed = errors.New("target failed before and was rolled back")

// ErrNotStaged refuses to finalize anything but the target nodeward staged.
var ErrNotStaged = errors.New("target is not the staged deployment")

// Config configures an Updater. Zero values take the documented defaults.
type Config struct {
	Binary string // rpm-ostree CLI; default "rpm-ostree"
	// HostRoot, when set, is the host's root filesystem mounted in the
	// agent's container: rpm-ostree and journalctl run chrooted into it
	// (package hostexec). Empty runs them directly (the agent on the host).
	HostRoot string
	Env      []string // extra environment for the CLI
	// AuthFile, when set, is the host's pull secret for image targets,
	// usually KubeletPullSecret: before a rebase, OstreeAuthFile is made a
	// link to it if it exists and OstreeAuthFile is absent (an existing
	// OstreeAuthFile that is not that link is left alone, with a warning).
	// An absolute host path; empty leaves OstreeAuthFile alone.
	AuthFile    string
	Policy      Policy
	KernelArgs  []string      // added to every target, one argument each; "!arg" deletes
	StatePath   string        // default /var/lib/nodeward/osupdate.json
	CmdlinePath string        // default /proc/cmdline
	Journal     JournalReader // default Journalctl{}
	Log         *slog.Logger

	StatusTimeout   time.Duration // status --json; default 2m
	StageTimeout    time.Duration // rebase/deploy/kargs, includes the pull; default 1h
	FinalizeTimeout time.Duration // finalize-deployment, rollback, cleanup; default 10m
	TransactionWait time.Duration // wait for another transaction to end; default 30m
	PollInterval    time.Duration // while waiting for a transaction; default 5s
	Backoff         Backoff
}

// Updater drives rpm-ostree. Its methods are safe to call again after a
// crash: state lives in rpm-ostree and in the state file.
type Updater struct {
	cfg Config
	run runner
}

// New returns an Updater after checking cfg.
func New(cfg Config) (*Updater, error) {
	cfg.Binary = cmp.Or(cfg.Binary, "rpm-ostree")
	cfg.StatePath = cmp.Or(cfg.StatePath, "/var/lib/nodeward/osupdate.json")
	cfg.CmdlinePath = cmp.Or(cfg.CmdlinePath, "/proc/cmdline")
	cfg.StatusTimeout = cmp.Or(cfg.StatusTimeout, 2*time.Minute)
	cfg.StageTimeout = cmp.Or(cfg.StageTimeout, time.Hour)
	cfg.FinalizeTimeout = cmp.Or(cfg.FinalizeTimeout, 10*time.Minute)
	cfg.TransactionWait = cmp.Or(cfg.TransactionWait, 30*time.Minute)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, 5*time.Second)
	host := hostexec.Host{Root: cfg.HostRoot}
	if err := host.Validate(); err != nil {
		return nil, fmt.Errorf("config hostRoot: %w", err)
	}
	if cfg.Journal == nil {
		cfg.Journal = Journalctl{Host: host}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.AuthFile != "" && !filepath.IsAbs(cfg.AuthFile) {
		return nil, fmt.Errorf("config authFile %q: must be an absolute path on the host", cfg.AuthFile)
	}
	if _, err := cfg.Policy.ParseTarget("localhost/check:policy"); err != nil {
		return nil, fmt.Errorf("config policy: %w", err)
	}
	// The same rules as a target's: `!` deletes, quotes allowed.
	for _, a := range cfg.KernelArgs {
		if err := validateKernelArg(strings.TrimPrefix(a, DeletePrefix)); err != nil {
			return nil, fmt.Errorf("config kernelArgs: %w", err)
		}
	}
	if _, err := cfg.Policy.ParseTarget("localhost/check:policy", cfg.KernelArgs...); err != nil {
		return nil, fmt.Errorf("config kernelArgs: %w", err) // an argument both added and deleted
	}
	return &Updater{cfg: cfg, run: newRunner(cfg.Binary, cfg.Env, host)}, nil
}

// ParseTarget validates target with the configured policy and kernel args.
func (u *Updater) ParseTarget(target string) (Target, error) {
	return u.cfg.Policy.ParseTarget(target, u.cfg.KernelArgs...)
}

// Canonical returns the canonical string of target, the form Booted returns.
func (u *Updater) Canonical(target string) (string, error) {
	t, err := u.ParseTarget(target)
	return t.String(), err
}

// Status reads `rpm-ostree status --json`, retrying transient failures.
func (u *Updater) Status(ctx context.Context) (*Status, error) {
	var st *Status
	err := u.cfg.Backoff.retry(ctx, "rpm-ostree status", func() error {
		out, err := u.run.run(ctx, u.cfg.StatusTimeout, "status", "--json")
		if err != nil {
			return err
		}
		st, err = ParseStatus(out)
		return err
	})
	return st, err
}

// idleStatus waits, bounded, until no transaction runs: another client's
// transaction is waited for, not fought.
func (u *Updater) idleStatus(ctx context.Context) (*Status, error) {
	ctx, cancel := context.WithTimeout(ctx, u.cfg.TransactionWait)
	defer cancel()
	for {
		st, err := u.Status(ctx)
		if err != nil {
			return nil, err
		}
		if !st.TransactionActive {
			return st, nil
		}
		u.cfg.Log.Info("rpm-ostree transaction in progress, waiting", "transaction", st.Transaction)
		t := time.NewTimer(u.cfg.PollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("waiting for the running rpm-ostree transaction to end: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// mutate runs a state-changing verb, waiting for other transactions first
// and retrying transient failures.
func (u *Updater) mutate(ctx context.Context, timeout time.Duration, args ...string) error {
	return u.cfg.Backoff.retry(ctx, "rpm-ostree "+args[0], func() error {
		if _, err := u.idleStatus(ctx); err != nil {
			return err
		}
		_, err := u.run.run(ctx, timeout, args...)
		return err
	})
}

// Booted returns the canonical target of the booted OS: the target nodeward
// staged when that is what booted (kernel arguments included), otherwise the
// booted image reference or checksum.
func (u *Updater) Booted(ctx context.Context) (string, error) {
	st, err := u.Status(ctx)
	if err != nil {
		return "", err
	}
	b := st.Booted()
	state, err := loadState(u.cfg.StatePath)
	if err != nil {
		return "", err
	}
	if rec := state.Staged; rec != nil && rec.Checksum == b.Checksum {
		if t, err := u.ParseTarget(rec.Target); err == nil {
			if missing, present, err := u.kernelArgMismatch(t); err == nil && len(missing) == 0 && len(present) == 0 {
				return rec.Target, nil
			}
		}
	}
	if b.ContainerImageReference != "" {
		return b.ContainerImageReference, nil
	}
	return b.GetBaseChecksum(), nil
}

// Stage downloads target and stages it with finalization locked, kernel
// arguments included. It does nothing when target is staged or booted.
func (u *Updater) Stage(ctx context.Context, target string) error {
	t, err := u.ParseTarget(target)
	if err != nil {
		return err
	}
	state, err := loadState(u.cfg.StatePath)
	if err != nil {
		return err
	}
	if slices.Contains(state.RolledBack, t.String()) {
		return fmt.Errorf("staging %s: %w (%s)", t, ErrTargetFailed, state.FailureReason)
	}
	st, err := u.idleStatus(ctx)
	if err != nil {
		return fmt.Errorf("staging %s: %w", t, err)
	}
	if u.stagedOrBooted(st, state, t) {
		return nil
	}
	if err := u.stageDeployment(ctx, t); err != nil {
		return err
	}
	staged, err := u.checkStaged(ctx, t)
	if err != nil {
		return err
	}
	state.Staged = &stagedRecord{Target: t.String(), Checksum: staged.Checksum, Digest: staged.ContainerImageReferenceDigest}
	if err := saveState(u.cfg.StatePath, state); err != nil {
		return err
	}
	u.cfg.Log.Info("staged OS update with finalization locked", "target", t.String(), "checksum", staged.Checksum, "digest", staged.ContainerImageReferenceDigest)
	return nil
}

// BootedIs tells whether the booted deployment already is target's OS
// (its image digest or checksum, its kernel arguments) with nothing
// staged, though it was booted under another name: a target that pins the
// booted image's digest, say. Adopt then makes it the booted target
// without a reboot.
func (u *Updater) BootedIs(ctx context.Context, target string) (bool, error) {
	t, err := u.ParseTarget(target)
	if err != nil {
		return false, err
	}
	st, err := u.idleStatus(ctx)
	if err != nil {
		return false, fmt.Errorf("checking %s: %w", t, err)
	}
	if st.Staged() != nil || !deploymentMatches(st.Booted(), t, "") {
		return false, nil
	}
	missing, present, err := u.kernelArgMismatch(t)
	if err != nil {
		return false, fmt.Errorf("checking %s: %w", t, err)
	}
	return len(missing) == 0 && len(present) == 0, nil
}

// Adopt records the booted deployment as target's (BootedIs must hold):
// Booted answers target from then on, as after a boot into it. It changes
// nothing on the host.
func (u *Updater) Adopt(ctx context.Context, target string) error {
	ok, err := u.BootedIs(ctx, target)
	if err != nil {
		return err
	}
	t, _ := u.ParseTarget(target)
	if !ok {
		return fmt.Errorf("adopting %s: the booted deployment is not it", t)
	}
	st, err := u.Status(ctx)
	if err != nil {
		return fmt.Errorf("adopting %s: %w", t, err)
	}
	state, err := loadState(u.cfg.StatePath)
	if err != nil {
		return err
	}
	b := st.Booted()
	state.Staged = &stagedRecord{Target: t.String(), Checksum: b.Checksum, Digest: b.ContainerImageReferenceDigest}
	if err := saveState(u.cfg.StatePath, state); err != nil {
		return err
	}
	u.cfg.Log.Info("the booted deployment is the target already: adopted without a reboot", "target", t.String(), "checksum", b.Checksum)
	return nil
}

// stagedOrBooted tells whether Stage has nothing to do for t: what it
// recorded staging for t is still staged or has booted, or t is booted,
// kernel arguments included, with nothing staged.
func (u *Updater) stagedOrBooted(st *Status, state persisted, t Target) bool {
	if rec := state.Staged; rec != nil && rec.Target == t.String() {
		if s := st.Staged(); s != nil && s.Checksum == rec.Checksum {
			return true // already staged (locked, or finalized by us)
		}
		if st.Booted().Checksum == rec.Checksum {
			return true // already booted
		}
	}
	if deploymentMatches(st.Booted(), t, "") && st.Staged() == nil {
		if missing, present, err := u.kernelArgMismatch(t); err == nil && len(missing) == 0 && len(present) == 0 {
			return true
		}
	}
	return false
}

// stageDeployment has rpm-ostree stage t, locked (rebase to an image,
// deploy of a checksum), then t's kernel arguments.
func (u *Updater) stageDeployment(ctx context.Context, t Target) error {
	var err error
	if t.IsImage() {
		if err := u.linkAuthFile(); err != nil {
			return fmt.Errorf("staging %s: %w", t, err)
		}
		err = u.mutate(ctx, u.cfg.StageTimeout, "rebase", "--lock-finalization", t.ImageRef)
	} else {
		err = u.mutate(ctx, u.cfg.StageTimeout, "deploy", "--lock-finalization", t.Checksum)
	}
	if err != nil {
		return fmt.Errorf("staging %s: %w", t, err)
	}
	if args := kargsArgs(t); args != nil {
		if err := u.mutate(ctx, u.cfg.StageTimeout, args...); err != nil {
			return fmt.Errorf("staging kernel arguments of %s: %w", t, err)
		}
	}
	return nil
}

// checkStaged reads back what rpm-ostree staged for t: a deployment of t,
// finalization-locked. An unlocked one is removed before the error, since
// any reboot would apply it.
func (u *Updater) checkStaged(ctx context.Context, t Target) (*Deployment, error) {
	st, err := u.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading status after staging %s: %w", t, err)
	}
	staged := st.Staged()
	switch {
	case staged == nil:
		return nil, fmt.Errorf("staging %s: rpm-ostree reported success but nothing is staged", t)
	case !st.FinalizationLocked:
		// An unlocked staged deployment would be applied by any reboot.
		_ = u.mutate(ctx, u.cfg.FinalizeTimeout, "cleanup", "-p")
		return nil, fmt.Errorf("staging %s: staged deployment %s is not finalization-locked; removed it", t, staged.Checksum)
	case !deploymentMatches(staged, t, ""):
		return nil, fmt.Errorf("staging %s: staged deployment is %q %s, not the target", t, staged.ContainerImageReference, staged.Checksum)
	}
	return staged, nil
}

// stagedFor returns the staged deployment when it is exactly what nodeward
// staged for t.
func (u *Updater) stagedFor(st *Status, t Target) (*Deployment, *stagedRecord, error) {
	state, err := loadState(u.cfg.StatePath)
	if err != nil {
		return nil, nil, err
	}
	rec := state.Staged
	staged := st.Staged()
	if rec == nil || rec.Target != t.String() || staged == nil || staged.Checksum != rec.Checksum || !deploymentMatches(staged, t, rec.Digest) {
		return nil, rec, fmt.Errorf("finalizing %s: %w", t, ErrNotStaged)
	}
	return staged, rec, nil
}

// Finalize unlocks the staged deployment of target with
// `rpm-ostree finalize-deployment <checksum>`. rpm-ostree reboots the host
// itself once unlocked; the caller's Reboot is then a harmless repeat. It
// never finalizes anything but the deployment staged for target, and does
// nothing when that one is already unlocked.
func (u *Updater) Finalize(ctx context.Context, target string) error {
	t, err := u.ParseTarget(target)
	if err != nil {
		return err
	}
	st, err := u.idleStatus(ctx)
	if err != nil {
		return fmt.Errorf("finalizing %s: %w", t, err)
	}
	staged, _, err := u.stagedFor(st, t)
	if err != nil {
		if b := st.Booted(); st.Staged() == nil && b != nil && deploymentMatches(b, t, "") {
			return nil // finalized and booted already
		}
		return err
	}
	if !st.FinalizationLocked {
		return nil
	}
	if err := u.mutate(ctx, u.cfg.FinalizeTimeout, "finalize-deployment", staged.Checksum); err != nil {
		return fmt.Errorf("finalizing %s: %w", t, err)
	}
	u.cfg.Log.Info("finalized staged deployment", "target", t.String(), "checksum", staged.Checksum)
	return nil
}

// VerifyError lists why the booted OS is not the target.
type VerifyError struct {
	Target  string
	Reasons []string
	// FinalizeJournal holds error lines of ostree-finalize-staged from the
	// previous boot, when it failed to write the staged deployment.
	FinalizeJournal []string
}

func (e *VerifyError) Error() string {
	s := fmt.Sprintf("booted OS is not %s: %s", e.Target, strings.Join(e.Reasons, "; "))
	if len(e.FinalizeJournal) > 0 {
		s += "; " + FinalizeUnit + " failed in the previous boot: " + strings.Join(e.FinalizeJournal, " | ")
	}
	return s
}

// Verify checks, after the reboot, that the booted deployment is target:
// reference and digest (the one staged) or checksum, and kernel arguments.
// On failure it returns a *VerifyError, with the previous boot's
// finalization errors when there were any.
func (u *Updater) Verify(ctx context.Context, target string) error {
	t, err := u.ParseTarget(target)
	if err != nil {
		return err
	}
	st, err := u.Status(ctx)
	if err != nil {
		return fmt.Errorf("verifying %s: %w", t, err)
	}
	state, err := loadState(u.cfg.StatePath)
	if err != nil {
		return err
	}
	digest := ""
	if state.Staged != nil && state.Staged.Target == t.String() {
		digest = state.Staged.Digest
	}
	ve := &VerifyError{Target: t.String()}
	b := st.Booted()
	if !deploymentMatches(b, t, digest) {
		ve.Reasons = append(ve.Reasons, fmt.Sprintf("booted deployment %s is %q digest %q checksum %s", b.ID, b.ContainerImageReference, b.ContainerImageReferenceDigest, b.Checksum))
	}
	if state.Staged != nil && state.Staged.Target == t.String() && b.Checksum != state.Staged.Checksum {
		ve.Reasons = append(ve.Reasons, fmt.Sprintf("booted checksum %s, staged %s", b.Checksum, state.Staged.Checksum))
	}
	missing, present, err := u.kernelArgMismatch(t)
	if err != nil {
		return fmt.Errorf("verifying %s: %w", t, err)
	}
	if len(missing) > 0 {
		ve.Reasons = append(ve.Reasons, "kernel arguments missing: "+strings.Join(missing, " "))
	}
	if len(present) > 0 {
		ve.Reasons = append(ve.Reasons, "deleted kernel arguments present: "+strings.Join(present, " "))
	}
	if len(ve.Reasons) == 0 {
		return nil
	}
	if lines, err := u.cfg.Journal.PreviousBoot(ctx, FinalizeUnit); err != nil {
		ve.Reasons = append(ve.Reasons, err.Error())
	} else {
		ve.FinalizeJournal = finalizeErrors(lines)
	}
	return ve
}

// kargsArgs is the one `rpm-ostree kargs` call that gives the staged
// deployment t's kernel arguments, or nil when t has none. rpm-ostree
// takes both flags in one call, with --lock-finalization (one transaction,
// one new staged deployment, still locked); it applies every
// --append-if-missing before every --delete-if-present, whatever their
// order, and ParseTarget refuses an argument both added and deleted.
//
// The machine-config-daemon runs `kargs --delete-if-present=OLD...
// --append=NEW...`: it diffs the old and the new MachineConfig, deletes
// every argument the old one applied and appends the whole new list, so
// --append reproduces the MachineConfig's repeats exactly. nodeward's
// target is a desired state, not a diff, and Stage may run again on a
// deployment that already has the arguments (a retry, a restart, the merge
// of the booted deployment's arguments into a rebase): --append would add
// a duplicate at every run, --append-if-missing (an exact-string check
// against the deployment's arguments) leaves them alone. The price: a
// target cannot ask for the very same argument twice.
func kargsArgs(t Target) []string {
	if len(t.KernelArgs) == 0 && len(t.DeleteKernelArgs) == 0 {
		return nil
	}
	args := []string{"kargs", "--lock-finalization"}
	for _, a := range t.DeleteKernelArgs {
		args = append(args, "--delete-if-present="+a)
	}
	for _, a := range t.KernelArgs {
		args = append(args, "--append-if-missing="+a)
	}
	return args
}

// kernelArgMismatch compares t's kernel arguments with the booted command
// line: missing are required arguments not on it, present are deleted ones
// still on it. Arguments compare as the kernel reads them (SplitKernelArgs,
// quotes removed), so that foo="a b" matches the "foo=a b" GRUB passes.
func (u *Updater) kernelArgMismatch(t Target) (missing, present []string, err error) {
	if len(t.KernelArgs) == 0 && len(t.DeleteKernelArgs) == 0 {
		return nil, nil, nil
	}
	data, err := os.ReadFile(u.cfg.CmdlinePath)
	if err != nil {
		return nil, nil, fmt.Errorf("reading kernel command line: %w", err)
	}
	// A bootloader may leave an unbalanced quote: take the rest as one
	// argument, as the kernel does.
	have, _ := splitKernelArgs(string(data))
	onCmdline := func(arg string) bool {
		return slices.ContainsFunc(have, func(h string) bool { return sameKernelArg(h, arg) })
	}
	for _, a := range t.KernelArgs {
		if !onCmdline(a) {
			missing = append(missing, a)
		}
	}
	for _, a := range t.DeleteKernelArgs {
		if onCmdline(a) {
			present = append(present, a)
		}
	}
	return missing, present, nil
}
