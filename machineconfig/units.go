package machineconfig

import (
	"fmt"
	"path"
)

// Where the MCD writes units, and what a mask links to.
const (
	systemdDir = "/etc/systemd/system"
	devNull    = "/dev/null"
)

func unitFile(name string) string { return path.Join(systemdDir, name) }

func dropinFile(unit, name string) string { return path.Join(systemdDir, unit+".d", name) }

// rootFile is a unit file or drop-in: root-owned, 0644, as the MCD writes it.
func rootFile(contents string) state {
	uid, gid := ownerIfRoot(0, 0)
	return state{Kind: kindFile, Mode: 0o644, UID: uid, GID: gid, Contents: []byte(contents)}
}

var absent = state{Kind: kindAbsent, UID: -1, GID: -1}

func (p *plan) addUnits(units []Unit) error {
	for i, u := range units {
		if err := p.addUnit(u, fmt.Sprintf("spec.config.systemd.units[%d]", i)); err != nil {
			return err
		}
	}
	return nil
}

// addUnit plans a unit the way the MCD writes one: drop-ins (an empty one
// is removed), then the mask link or the unit file, then enablement.
func (p *plan) addUnit(u Unit, field string) error {
	for j, d := range u.Dropins {
		want := absent
		if d.Contents != "" {
			want = rootFile(d.Contents)
		}
		f := fmt.Sprintf("%s.dropins[%d].name", field, j)
		if err := p.add(op{hostPath: dropinFile(u.Name, d.Name), field: f, want: want}); err != nil {
			return err
		}
	}
	hostPath := unitFile(u.Name)
	switch {
	case u.masked():
		// A masked unit cannot be enabled; its enablement is left alone.
		want := state{Kind: kindSymlink, Target: devNull, UID: -1, GID: -1}
		return p.add(op{hostPath: hostPath, field: field + ".mask", want: want, unit: u.Name, role: roleMask})
	case u.Contents != "":
		if err := p.add(op{hostPath: hostPath, field: field + ".contents", want: rootFile(u.Contents)}); err != nil {
			return err
		}
	case u.Mask != nil:
		// mask: false lifts a mask an earlier config set.
		if err := p.unmask(hostPath, field+".mask"); err != nil {
			return err
		}
	}
	if u.Enabled == nil {
		// The MCD would run systemctl preset here; nodeward leaves the
		// unit's enablement as the host has it.
		return nil
	}
	return p.enablement(u, *u.Enabled, field+".enabled")
}

// unmask removes the unit path if, and only if, it is a mask link.
func (p *plan) unmask(hostPath, field string) error {
	disk, err := resolve(p.root, hostPath)
	if err != nil {
		return fieldErr(field, hostPath, err.Error())
	}
	s, err := readState(disk)
	if err != nil {
		return fmt.Errorf("inspecting unit %s: %w", hostPath, err)
	}
	if s.Kind != kindSymlink || s.Target != devNull {
		return nil
	}
	return p.add(op{hostPath: hostPath, field: field, want: absent, unit: path.Base(hostPath), role: roleMask})
}

// enablement plans the links systemctl enable would create, or removes
// every enablement link of the unit. Links to the unit that the current
// [Install] section no longer asks for are removed too: systemctl disable
// before rewriting a unit has the same effect in the MCD (OCPBUGS-33694).
func (p *plan) enablement(u Unit, enable bool, field string) error {
	inst, found, err := p.installOf(u)
	if err != nil {
		return fmt.Errorf("reading [Install] of %s: %w", u.Name, err)
	}
	if enable && !found {
		// Like the MCD: nothing to enable without a unit file.
		return nil
	}
	wanted := map[string]bool{}
	if enable {
		for _, l := range inst.links(u.Name) {
			wanted[l] = true
			want := state{Kind: kindSymlink, Target: inst.file, UID: -1, GID: -1}
			if err := p.add(op{hostPath: l, field: field, want: want, unit: u.Name, role: roleEnable}); err != nil {
				return err
			}
		}
	}
	existing, err := p.existingLinks(inst.linkName(u.Name), inst.aliasLinks())
	if err != nil {
		return fmt.Errorf("listing enablement links of %s: %w", u.Name, err)
	}
	for _, l := range existing {
		if !wanted[l] {
			if err := p.add(op{hostPath: l, field: field, want: absent, unit: u.Name, role: roleEnable}); err != nil {
				return err
			}
		}
	}
	return nil
}

func (p *plan) removeUnits(current, desired []Unit) error {
	kept := make(map[string]Unit, len(desired))
	for _, u := range desired {
		kept[u.Name] = u
	}
	for i, u := range current {
		field := fmt.Sprintf("spec.config.systemd.units[%d]", i)
		des, ok := kept[u.Name]
		if err := p.removeDropins(u, des, field); err != nil {
			return err
		}
		if ok {
			if err := p.dropMask(u, des, field); err != nil {
				return err
			}
			continue
		}
		if err := p.removeUnit(u, field); err != nil {
			return err
		}
	}
	return nil
}

// removeDropins reverts the drop-ins of cur that des lacks.
func (p *plan) removeDropins(cur, des Unit, field string) error {
	for j, d := range cur.Dropins {
		hostPath := dropinFile(cur.Name, d.Name)
		if p.planned(hostPath) {
			continue
		}
		if err := p.revert(hostPath, fmt.Sprintf("%s.dropins[%d].name", field, j)); err != nil {
			return err
		}
	}
	return nil
}

// dropMask lifts a mask the new config no longer sets.
func (p *plan) dropMask(cur, des Unit, field string) error {
	if !cur.masked() || des.masked() || p.planned(unitFile(cur.Name)) {
		return nil
	}
	return p.unmask(unitFile(cur.Name), field+".mask")
}

// removeUnit reverts a unit file or mask current wrote, after disabling
// it: its links would dangle. A unit current only enabled or gave drop-ins
// keeps its enablement (the MCD would reset it to the preset).
func (p *plan) removeUnit(u Unit, field string) error {
	if u.Contents == "" && !u.masked() {
		return nil
	}
	if u.Contents != "" {
		if err := p.enablement(u, false, field+".enabled"); err != nil {
			return err
		}
	}
	if p.planned(unitFile(u.Name)) {
		return nil
	}
	return p.revert(unitFile(u.Name), field+".name")
}
