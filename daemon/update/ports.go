package update

import (
	"context"
	"errors"
	"time"

	"github.com/nodeward/nodeward/drain"
	corev1 "k8s.io/api/core/v1"
)

// The update machine talks to the world only through the small interfaces
// below, so that it can be tested with plain fakes and wired to the real
// drain, osupdate, systemd and protocol packages by thin adapters.

// OSUpdater is the rpm-ostree edge. Targets are opaque strings (an image
// reference or a version) compared for equality.
type OSUpdater interface {
	// Booted returns the target the running system booted.
	Booted(ctx context.Context) (string, error)
	// Stage downloads target and stages it with finalization locked, so
	// that no reboot can boot it by accident. Staging an already staged
	// target does nothing.
	Stage(ctx context.Context, target string) error
	// Finalize unlocks the staged deployment of target so that the next
	// boot uses it. It does not reboot. Finalizing twice does nothing.
	Finalize(ctx context.Context, target string) error
	// Rollback makes the previous deployment the default for the next
	// boot. It does not reboot.
	Rollback(ctx context.Context) error
}

// OSVerifier is implemented by OS updaters that can check the booted
// deployment more closely than by name (digest, checksum, kernel
// arguments). ok false with a reason is a failed verification, which rolls
// back; an error is retried.
type OSVerifier interface {
	VerifyBooted(ctx context.Context, target string) (ok bool, reason string, err error)
}

// Canonicalizer is implemented by OS updaters whose Booted returns a
// canonical form of the target.
type Canonicalizer interface {
	Canonical(target string) (string, error)
}

// Disruption is what applying a staged target asks of the node. The zero
// value is the whole disruption (cordon, drain, reboot): an OS updater that
// cannot tell gets it.
type Disruption struct {
	// NoDrain: the update neither cordons nor drains the node; its pods
	// stay and keep serving.
	NoDrain bool `json:"noDrain,omitempty"`
	// NoReboot: the target is applied in place (LiveUpdater.ApplyLive)
	// instead of finalized and booted.
	NoReboot bool `json:"noReboot,omitempty"`
	// Reason says why, for the step's reason and the logs.
	Reason string `json:"reason,omitempty"`
}

// LiveUpdater is implemented by OS updaters that can apply some targets
// with less than a drain and a reboot: the machine-config-daemon's node
// disruption policies (daemon/mco). The machine asks Disruption once, right
// after staging, and keeps the answer for the whole update, so that a
// restart mid-update never changes what the update does.
type LiveUpdater interface {
	// Disruption says what applying the staged target needs. An error is
	// retried (reported as the step's failure meanwhile).
	Disruption(ctx context.Context, target string) (Disruption, error)
	// ApplyLive applies the staged target in place, without a reboot. It
	// must be safe to call again after a crash. An error is the update's
	// failure, retried and reported; never a reason to reboot.
	ApplyLive(ctx context.Context, target string) error
}

// Releaser is implemented by Workloads whose drainer must hear that an
// update is over even when it did not cordon the node (the MCO's uncordon
// handshake, which the machine-config-daemon runs after every update).
// Release is called in Uncordon's place when the update cordoned nothing;
// it must never make schedulable a node someone else cordoned.
type Releaser interface {
	Release(ctx context.Context) error
}

// Rebooter restarts the machine. Reboot may return before the machine goes
// down; the agent waits for its own death.
type Rebooter interface {
	Reboot(ctx context.Context, reason string) error
}

// BootIDFunc returns the kernel boot ID (/proc/sys/kernel/random/boot_id),
// which changes at every boot.
type BootIDFunc func() (string, error)

// Workloads moves the node's workloads away before the reboot and lets
// them back after it: cordon, drain, uncordon.
type Workloads interface {
	// Cordon marks the node unschedulable and records on the node that
	// nodeward did it. When someone else had already cordoned the node it
	// changes nothing and returns false. When nodeward's own record is
	// there (a cordon before a crash) it returns true.
	Cordon(ctx context.Context) (byNodeward bool, err error)
	// Drain evicts the node's pods, honouring PDBs. It returns nil once
	// the node is drained and an error wrapping drain.ErrBlocked when a
	// PDB or a failing eviction keeps pods on the node.
	Drain(ctx context.Context) error
	// Undrained lists, from a fresh read, the pods on the node that a
	// drain would still move: pods bound after the drain finished (a
	// scheduler on a stale cache binds to a cordoned node). Checked right
	// before the node is finalized and rebooted.
	Undrained(ctx context.Context) ([]drain.PodRef, error)
	// ForceDrain drains like Drain, then deletes the pods still blocking
	// (a pool's onTimeout: Force, an explicit opt-in).
	ForceDrain(ctx context.Context) error
	// Uncordon makes the node schedulable again, only if nodeward's record
	// of its own cordon is present, and removes that record.
	Uncordon(ctx context.Context) error
	// ReportHooks publishes which lifecycle hooks of point hold the
	// update (the Drainable or Rebootable condition).
	ReportHooks(ctx context.Context, point drain.HookPoint, hooks []drain.Hook) error
}

// NodeSource gives the latest known state of this node (from a watch).
type NodeSource interface {
	Node(ctx context.Context) (*corev1.Node, error)
}

// Desired is what the coordinator asks of this node, read from the node.
type Desired struct {
	// Target is the OS target of the node's pool; empty when none.
	Target string
	// Grant is non-empty while the coordinator grants this node a slot;
	// its value identifies the grant.
	Grant string
	// GrantTarget is the target the grant was issued for: a grant for
	// another target than the one staged is never used.
	GrantTarget string
	// GrantTerm is the leader term the grant was issued in
	// (v1alpha1.AnnotationGrantTerm), as written; empty when the grant
	// carries none. A TermChecker judges it.
	GrantTerm string
	// ReleaseAtDone: the agent gives the grant back itself, in the same
	// write that reports Done for it.
	ReleaseAtDone bool
	// YieldOnDrainTimeout gives the slot back when a drain stays blocked
	// past DrainTimeout; otherwise the agent keeps retrying.
	YieldOnDrainTimeout bool
	// ForceOnDrainTimeout force-deletes the pods still blocking a drain
	// past DrainTimeout (the pool's explicit opt-in).
	ForceOnDrainTimeout bool
	// DrainTimeout overrides the agent's drain timeout when non-zero.
	DrainTimeout time.Duration
	// SkipDrain updates the node without cordoning or draining it: a
	// single-node cluster has nowhere to move its pods (the MCO's
	// SingleReplica topology). The reboot still waits for its grant.
	SkipDrain bool
}

// Protocol is the node annotation protocol with the coordinator (nodeward's
// own or the MCO).
type Protocol interface {
	// Desired reads what the coordinator asks of node. On an error the
	// machine keeps finishing what is safe without the coordinator's
	// wishes (docs/agent.md), so a partial answer is never acted on.
	Desired(ctx context.Context, node *corev1.Node) (Desired, error)
	// Report publishes the agent's state on the node. It must be
	// idempotent: the same state may be reported again after a crash.
	Report(ctx context.Context, st State) error
}

// TermChecker is implemented by protocols whose grants carry the leader
// term they were issued in (nodeward's own coordinator). The machine asks
// it once, before it takes a grant: a coordinator leader paused past its
// Lease (SIGSTOP, a VM freeze) may write, on resuming, a grant it planned
// before another replica took over, and that grant must disrupt nothing.
type TermChecker interface {
	// StaleTerm says why want's grant is not of the leader Lease's
	// current term (a malformed term too), "" when it is or when the
	// grant carries no term. An error means the Lease could not be read:
	// the grant is not taken until it can be.
	StaleTerm(ctx context.Context, want Desired) (string, error)
}

// ErrorReporter is implemented by protocols that publish a step that keeps
// failing (the machine-config-daemon reports Degraded while it retries).
// The machine calls it after every step: err is nil once the step
// succeeds, since is when the current run of failures began.
type ErrorReporter interface {
	ReportError(ctx context.Context, st State, err error, since time.Time) error
}

// ErrRefused is wrapped by an OSUpdater's Stage that will not apply the
// target at all — a change it cannot make, a malformed target — and has
// changed nothing on the host. The machine ends Degraded with State.Refused
// rather than retry.
var ErrRefused = errors.New("target refused")

// ServiceCheck tells whether the node is back in service after the reboot
// and may be uncordoned. It returns a reason when it is not.
type ServiceCheck func(ctx context.Context, node *corev1.Node) (ok bool, reason string, err error)

// EventSink records an Event on the node for a step.
type EventSink interface {
	Event(node *corev1.Node, warning bool, reason, message string)
}

// StatusSink receives a one-line status (systemd STATUS=).
type StatusSink interface {
	Status(line string)
}
