package disruption

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nodeward/nodeward/machineconfig"
)

// Plan is what applying a config change takes.
type Plan struct {
	// Actions are the post-change actions, in the order the daemon performs
	// them: one Reboot alone, one None alone, or the policies' actions
	// (file policies by path, then unit policies by name, then the SSH key
	// policy; repeats kept, as the daemon keeps them).
	Actions []Action
	// Drain says the node is drained before the change is applied.
	Drain bool
	// Reboot says Actions is a reboot.
	Reboot bool
	// Reasons explain each decision, in order, for logs and status
	// messages: which change forced a reboot, which policy matched a path,
	// which path had none, why the node is or is not drained.
	Reasons []string
}

// Compute decides the actions and the drain for moving a node from old to
// new under the policies p, as the daemon's
// calculatePostConfigChangeNodeDisruptionAction and
// isDrainRequiredForNodeDisruptionActions do. forceFile says the daemon's
// force file (/run/machine-config-daemon-force) is present, which makes the
// change a reboot. The only error is an undecodable registries.conf when
// the Special action asks whether its change is safe.
func Compute(old, new *machineconfig.Config, p Policies, forceFile bool) (Plan, error) {
	if old == nil || new == nil {
		return Plan{}, errors.New("computing node disruption: nil config")
	}
	plan := decide(Diff(old, new), p, forceFile)
	plan.Reboot = has(plan.Actions, Reboot)
	drain, why, err := drainFor(plan.Actions, old, new)
	if err != nil {
		return Plan{}, err
	}
	plan.Drain = drain
	plan.Reasons = append(plan.Reasons, why)
	return plan, nil
}

// decide is calculatePostConfigChangeNodeDisruptionAction once the policies
// are at hand.
func decide(c Change, p Policies, force bool) Plan {
	if force {
		return rebootPlan("the force file /run/machine-config-daemon-force is present")
	}
	if fields := c.Rebooting(); len(fields) > 0 {
		return rebootPlan(strings.Join(fields, ", ") + " changed: a reboot whatever the policies")
	}
	if c.Empty() {
		return Plan{Actions: []Action{{Type: None}}, Reasons: []string{"no change in files, units or SSH keys"}}
	}
	return fromPolicies(c, p)
}

func rebootPlan(reasons ...string) Plan {
	return Plan{Actions: []Action{{Type: Reboot}}, Reasons: reasons}
}

// fromPolicies is calculatePostConfigChangeNodeDisruptionActionFromMCDiffs:
// the actions of every changed file, unit and the SSH keys, where a file or
// unit without a policy makes the whole change a reboot.
func fromPolicies(c Change, p Policies) Plan {
	var plan Plan
	for _, path := range c.Files {
		policy, ok := closestFile(path, p.Files)
		if !ok {
			return rebootPlan(fmt.Sprintf("file %s changed and no file policy covers it: reboot", path))
		}
		plan.add(policy.Actions, fmt.Sprintf("file %s changed: policy %s says %s", path, policy.Path, list(policy.Actions)))
	}
	for _, name := range c.Units {
		i := slices.IndexFunc(p.Units, func(u UnitPolicy) bool { return u.Name == name })
		if i < 0 {
			return rebootPlan(fmt.Sprintf("unit %s changed and has no unit policy: reboot", name))
		}
		plan.add(p.Units[i].Actions, fmt.Sprintf("unit %s changed: its policy says %s", name, list(p.Units[i].Actions)))
	}
	if c.SSHKeys {
		plan.add(p.SSHKey, "SSH keys changed: the SSH key policy says "+list(p.SSHKey))
	}
	return reduce(plan)
}

func (p *Plan) add(actions []Action, reason string) {
	p.Actions = append(p.Actions, actions...)
	p.Reasons = append(p.Reasons, reason)
}

// reduce lets a Reboot stand alone and drops None beside other actions;
// a list of only None is one None.
func reduce(plan Plan) Plan {
	switch {
	case has(plan.Actions, Reboot):
		plan.Actions = []Action{{Type: Reboot}}
		plan.Reasons = append(plan.Reasons, "a policy says Reboot, which overrides every other action")
	case has(plan.Actions, None) && has(plan.Actions, Drain, Reload, Restart, DaemonReload, Special):
		plan.Actions = slices.DeleteFunc(plan.Actions, func(a Action) bool { return a.Type == None })
	case has(plan.Actions, None):
		plan.Actions = []Action{{Type: None}}
	}
	return plan
}

// closestFile is FindClosestFilePolicyPathMatch: of the policies whose path
// is the file's or a directory above it, the longest path (the first of
// equal lengths).
func closestFile(path string, policies []FilePolicy) (FilePolicy, bool) {
	best, found := FilePolicy{}, false
	for _, f := range policies {
		if (path == f.Path || under(f.Path, path)) && (!found || len(f.Path) > len(best.Path)) {
			best, found = f, true
		}
	}
	return best, found
}

// under is the MCO's IsSubdirectory: target lies below dir, both cleaned.
// Like the MCO it never matches below "/" (the cleaned dir becomes "//").
func under(dir, target string) bool {
	return strings.HasPrefix(filepath.Clean(target), filepath.Clean(dir)+"/")
}

// has reports whether any action is of one of the types.
func has(actions []Action, types ...ActionType) bool {
	return slices.ContainsFunc(actions, func(a Action) bool { return slices.Contains(types, a.Type) })
}

func list(actions []Action) string {
	if len(actions) == 0 {
		return "no action"
	}
	names := make([]string, len(actions))
	for i, a := range actions {
		names[i] = a.String()
	}
	return strings.Join(names, ", ")
}

// drainFor is isDrainRequiredForNodeDisruptionActions: Reboot and Drain
// drain; Special (registries.conf) drains only when its change is unsafe.
func drainFor(actions []Action, old, new *machineconfig.Config) (bool, string, error) {
	switch {
	case has(actions, Reboot, Drain):
		return true, "drain: the actions include Reboot or Drain", nil
	case has(actions, Special):
		safe, why, err := SafeRegistriesChange(fileContents(old, registriesConf), fileContents(new, registriesConf))
		if err != nil {
			return false, "", err
		}
		if safe {
			return false, "no drain: " + why, nil
		}
		return true, "drain: " + why, nil
	}
	return false, "no drain: no action needs one", nil
}

// fileContents is the first file of the path, or nil, as the daemon's
// GetIgnitionFileDataByPath.
func fileContents(c *machineconfig.Config, path string) []byte {
	for _, f := range c.Files {
		if f.Path == path {
			return f.Contents
		}
	}
	return nil
}
