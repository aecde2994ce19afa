package mco

// The update without a reboot: node disruption policies, as the
// machine-config-daemon computes and runs them.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/nodeward/nodeward/daemon/update"
	"github.com/nodeward/nodeward/disruption"
)

// ForceFile is the machine-config-daemon's force file, as seen on the
// host: present, the next update reboots whatever its policies say (and
// the file is consumed).
const ForceFile = "/run/machine-config-daemon-force"

// crioUnit is the unit a Special action reloads (registries.conf).
const crioUnit = "crio.service"

// MachineConfigurationResource is the operator's MachineConfiguration,
// whose status carries the node disruption policies.
var MachineConfigurationResource = schema.GroupVersionResource{Group: "operator.openshift.io", Version: "v1", Resource: "machineconfigurations"}

// ErrPoliciesNotReady is wrapped by a PolicySource while the cluster's
// policies cannot be read yet: the object is missing or its status lags
// its spec. The update waits, as the daemon's does, then reports Degraded
// (PolicyWait).
var ErrPoliciesNotReady = errors.New("NodeDisruptionPolicyStatus was not ready")

// PolicyWait is how long the daemon waits for the policies before it
// fails the update.
const PolicyWait = 2 * time.Minute

// PolicySource reads the cluster's node disruption policies from
// MachineConfiguration/cluster, which the machine-config operator keeps
// merged (its defaults and the user's) in its status.
type PolicySource struct {
	Dynamic dynamic.Interface
}

// Get returns the merged policies once the status describes the current
// spec (status.observedGeneration = metadata.generation).
func (s *PolicySource) Get(ctx context.Context) (disruption.Policies, error) {
	obj, err := s.Dynamic.Resource(MachineConfigurationResource).Get(ctx, "cluster", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return disruption.Policies{}, fmt.Errorf("%w: MachineConfiguration/cluster has not been created yet", ErrPoliciesNotReady)
	}
	if err != nil {
		return disruption.Policies{}, fmt.Errorf("read MachineConfiguration/cluster: %w", err)
	}
	if ready, why := disruption.Ready(obj.Object); !ready {
		return disruption.Policies{}, fmt.Errorf("%w: %s", ErrPoliciesNotReady, why)
	}
	p, err := disruption.PoliciesFrom(obj.Object)
	if err != nil {
		return disruption.Policies{}, fmt.Errorf("MachineConfiguration/cluster: %w", err)
	}
	return p, nil
}

// UnitActions runs the policies' actions on the host's systemd.
type UnitActions interface {
	Reload(ctx context.Context, unit string) error
	Restart(ctx context.Context, unit string) error
	DaemonReload(ctx context.Context) error
}

// Disruption implements update.LiveUpdater: the node disruption actions of
// the move from the config the host runs to target's, as the daemon
// computes them, kept in Host's record for ApplyLive. Without policies
// (Host.Policies nil) every update drains and reboots.
func (h *Host) Disruption(ctx context.Context, target string) (update.Disruption, error) {
	if h.Policies == nil {
		return update.Disruption{}, nil
	}
	rec, current, desired, err := h.move(ctx, target)
	if err != nil {
		return update.Disruption{}, err
	}
	if rec.Pending != target {
		return update.Disruption{}, fmt.Errorf("the host is moving to %q, not to %s", rec.Pending, target)
	}
	// The booted OS must already be the config's: a config that changes
	// it, or a new node that booted another (the first-boot pivot), boots.
	if ok, why, err := h.verifyOS(ctx, rec.PendingOS); err != nil || !ok {
		return update.Disruption{Reason: "the OS changes: " + why}, err
	}
	policies, err := h.Policies.Get(ctx)
	if err != nil {
		return update.Disruption{}, err
	}
	force := h.hostPath(ForceFile)
	forced, err := exists(force)
	if err != nil {
		return update.Disruption{}, err
	}
	plan, err := disruption.Compute(current, desired, policies, forced)
	if err != nil {
		return update.Disruption{}, fmt.Errorf("compute the node disruption actions of %s: %w", target, err)
	}
	rec.PendingActions = plan.Actions
	if err := h.save(rec); err != nil {
		return update.Disruption{}, err
	}
	// Consumed once the decision is kept, as the daemon consumes it.
	if forced {
		if err := os.Remove(force); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return update.Disruption{}, fmt.Errorf("failed to remove force validation file: %w", err)
		}
	}
	return update.Disruption{NoDrain: !plan.Drain, NoReboot: !plan.Reboot, Reason: strings.Join(plan.Reasons, "; ")}, nil
}

// ApplyLive implements update.LiveUpdater: the files, units and SSH keys of
// target, then the recorded actions in order. An action that fails fails
// the update with the daemon's message; nothing reboots.
func (h *Host) ApplyLive(ctx context.Context, target string) error {
	rec, current, desired, err := h.move(ctx, target)
	if err != nil {
		return err
	}
	if rec.Pending != target {
		return fmt.Errorf("apply %s: the host is moving to %q, not to it", target, rec.Pending)
	}
	if err := h.Files.Apply(ctx, current, desired); err != nil {
		return fmt.Errorf("write the files, units and SSH keys of %s: %w", target, err)
	}
	for _, a := range rec.PendingActions {
		if err := h.run(ctx, a); err != nil {
			return err
		}
	}
	return nil
}

// run performs one action and records the daemon's Event for it.
func (h *Host) run(ctx context.Context, a disruption.Action) error {
	switch a.Type {
	case disruption.None:
		h.event(ctx, false, "SkipReboot", "Config changes do not require reboot.")
		return nil
	case disruption.Reload:
		return h.reload(ctx, a.Unit, func() error { return h.units().Reload(ctx, a.Unit) })
	case disruption.Special:
		return h.reload(ctx, crioUnit, func() error { return h.units().Reload(ctx, crioUnit) })
	case disruption.DaemonReload:
		return h.reload(ctx, "daemon-reload", func() error { return h.units().DaemonReload(ctx) })
	case disruption.Restart:
		if err := h.units().Restart(ctx, a.Unit); err != nil {
			h.event(ctx, true, "FailedServiceRestart", fmt.Sprintf("Restarting %s service failed. Error: %v", a.Unit, err))
			return fmt.Errorf("could not apply update: restarting %s service failed. Error: %w", a.Unit, err)
		}
		h.event(ctx, false, "ServiceRestart", fmt.Sprintf("Config changes do not require reboot. Service %s was restarted.", a.Unit))
		return nil
	case disruption.Drain:
		return nil // done before the files were written
	}
	return fmt.Errorf("could not apply update: unknown node disruption action %q", a.Type)
}

// reload runs a reload-like action (a unit's reload, daemon-reload) with
// the daemon's Events and message.
func (h *Host) reload(ctx context.Context, name string, do func() error) error {
	if err := do(); err != nil {
		h.event(ctx, true, "FailedServiceReload", fmt.Sprintf("Reloading service %s failed. Error: %v", name, err))
		return fmt.Errorf("could not apply update: reloading %s configuration failed. Error: %w", name, err)
	}
	h.event(ctx, false, "ServiceReload", fmt.Sprintf("Config changes do not require reboot. Service %s was reloaded.", name))
	return nil
}

// units is the host's systemd; an action with none fails rather than be
// skipped.
func (h *Host) units() UnitActions {
	if h.Units == nil {
		return noUnits{}
	}
	return h.Units
}

type noUnits struct{}

var errNoUnits = errors.New("no systemd connection configured")

func (noUnits) Reload(context.Context, string) error  { return errNoUnits }
func (noUnits) Restart(context.Context, string) error { return errNoUnits }
func (noUnits) DaemonReload(context.Context) error    { return errNoUnits }

func (h *Host) event(ctx context.Context, warning bool, reason, message string) {
	if h.Events != nil {
		h.Events(ctx, warning, reason, message)
	}
}

// hostPath is p (a path on the host) under the Writer's root.
func (h *Host) hostPath(p string) string {
	return filepath.Join(h.Files.Root, p)
}

func exists(p string) (bool, error) {
	_, err := os.Stat(p)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("check %s: %w", p, err)
}
