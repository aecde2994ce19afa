package machineconfig

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/coreos/go-systemd/v22/unit"
)

// Unit file directories searched for a unit the config does not write, in
// systemd's order of precedence (the parts that matter on rpm-ostree hosts).
var unitDirs = []string{systemdDir, "/usr/lib/systemd/system", "/lib/systemd/system"}

// install is a unit file's [Install] section and where the file is.
//
// Enablement is done here in Go rather than with systemctl because the
// agent's image has no systemctl (the MCD runs it on the host). This
// covers what MachineConfigs use: WantedBy=, RequiredBy=, UpheldBy=,
// Alias= and DefaultInstance= of the unit file itself. Also= and
// specifiers (%i) are not interpreted, and [Install] lines in drop-ins are
// ignored, as systemctl ignores them.
type install struct {
	file            string // host path the links point to
	wantedBy        []string
	requiredBy      []string
	upheldBy        []string
	alias           []string
	defaultInstance string
}

// installOf finds u's unit file, the config's contents first.
func (p *plan) installOf(u Unit) (install, bool, error) {
	if u.Contents != "" {
		inst, err := parseInstall(u.Contents)
		inst.file = unitFile(u.Name)
		return inst, err == nil, err
	}
	for _, dir := range unitDirs {
		for _, name := range unitFileNames(u.Name) {
			hostPath := path.Join(dir, name)
			disk, err := resolve(p.root, hostPath)
			if err != nil {
				return install{}, false, err
			}
			s, err := readState(disk)
			if err != nil {
				return install{}, false, err
			}
			if s.Kind != kindFile {
				continue // absent, or a mask or alias link
			}
			inst, err := parseInstall(string(s.Contents))
			inst.file = hostPath
			return inst, err == nil, err
		}
	}
	return install{}, false, nil
}

// unitFileNames lists the files that can define a unit: an instance
// (foo@bar.service) is defined by its template (foo@.service) too.
func unitFileNames(name string) []string {
	at := strings.IndexByte(name, '@')
	ext := path.Ext(name)
	if at < 0 || at+1 >= len(name)-len(ext) {
		return []string{name}
	}
	return []string{name, name[:at+1] + ext}
}

func parseInstall(contents string) (install, error) {
	opts, err := unit.DeserializeOptions(strings.NewReader(contents))
	if err != nil {
		return install{}, fmt.Errorf("parsing unit file: %w", err)
	}
	var inst install
	for _, o := range opts {
		if o.Section != "Install" {
			continue
		}
		values := strings.Fields(o.Value)
		switch o.Name {
		case "WantedBy":
			inst.wantedBy = append(inst.wantedBy, values...)
		case "RequiredBy":
			inst.requiredBy = append(inst.requiredBy, values...)
		case "UpheldBy":
			inst.upheldBy = append(inst.upheldBy, values...)
		case "Alias":
			inst.alias = append(inst.alias, values...)
		case "DefaultInstance":
			inst.defaultInstance = o.Value
		}
	}
	return inst, nil
}

// linkName is the name the links carry: the unit's own, or for a bare
// template its default instance ("" if it has none: nothing to enable).
func (inst install) linkName(name string) string {
	at := strings.IndexByte(name, '@')
	ext := path.Ext(name)
	if at < 0 || at+1 < len(name)-len(ext) {
		return name
	}
	if inst.defaultInstance == "" {
		return ""
	}
	return name[:at+1] + inst.defaultInstance + ext
}

// links are the paths systemctl enable creates for the unit.
func (inst install) links(name string) []string {
	ln := inst.linkName(name)
	if ln == "" {
		return nil
	}
	var out []string
	for _, dep := range []struct {
		suffix  string
		targets []string
	}{{".wants", inst.wantedBy}, {".requires", inst.requiredBy}, {".upholds", inst.upheldBy}} {
		for _, t := range dep.targets {
			out = append(out, path.Join(systemdDir, t+dep.suffix, ln))
		}
	}
	return append(out, inst.aliasLinks()...)
}

func (inst install) aliasLinks() []string {
	var out []string
	for _, a := range inst.alias {
		if !strings.Contains(a, "/") {
			out = append(out, path.Join(systemdDir, a))
		}
	}
	return out
}

// existingLinks finds the symlinks named linkName in every .wants,
// .requires and .upholds directory of /etc/systemd/system, plus the alias
// links that exist: what systemctl disable removes.
func (p *plan) existingLinks(linkName string, aliases []string) ([]string, error) {
	if linkName == "" {
		return nil, nil
	}
	dir, err := resolveDir(p.root, systemdDir)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(filepath.Join(p.root, dir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var candidates []string
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() && (strings.HasSuffix(n, ".wants") || strings.HasSuffix(n, ".requires") || strings.HasSuffix(n, ".upholds")) {
			candidates = append(candidates, path.Join(systemdDir, n, linkName))
		}
	}
	return p.symlinksAmong(append(candidates, aliases...))
}

func (p *plan) symlinksAmong(hostPaths []string) ([]string, error) {
	var out []string
	for _, hp := range hostPaths {
		disk, err := resolve(p.root, hp)
		if err != nil {
			return nil, err
		}
		if fi, err := os.Lstat(disk); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			out = append(out, hp)
		}
	}
	return out, nil
}
