package machineconfig

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"strings"

	v35 "github.com/coreos/ignition/v2/config/v3_5"
	ign "github.com/coreos/ignition/v2/config/v3_5/types"
	"github.com/coreos/vcontext/report"
)

// coreUser is the one user whose configuration the MCD (and nodeward)
// changes in place.
const coreUser = "core"

// defaultFileMode is the MCD's mode for a file whose config gives none.
const defaultFileMode fs.FileMode = 0o644

// parseIgnition fills cfg from spec.config.
func parseIgnition(raw json.RawMessage, cfg *Config) error {
	if isEmptyConfig(raw) {
		cfg.ign = ign.Config{Ignition: ign.Ignition{Version: maxIgnition.String()}}
		return nil
	}
	version, err := checkIgnitionVersion(raw)
	if err != nil {
		return err
	}
	parsed, rpt, err := v35.ParseCompatibleVersion(raw)
	if err != nil {
		return reportError(raw, rpt, err)
	}
	cfg.IgnitionVersion = version
	cfg.ign = parsed
	if cfg.Files, err = convertFiles(parsed.Storage.Files); err != nil {
		return err
	}
	if cfg.Units, err = convertUnits(parsed.Systemd.Units); err != nil {
		return err
	}
	cfg.SSHKeys = coreKeys(parsed.Passwd.Users)
	return nil
}

// reportError turns Ignition's first fatal report entry into a FieldError
// on the field it names, quoting the value found there in raw.
func reportError(raw []byte, rpt report.Report, err error) error {
	for _, e := range rpt.Entries {
		if !e.Kind.IsFatal() {
			continue
		}
		field := "spec.config" + formatPath(e.Context.Path)
		return fieldErr(field, valueAt(raw, e.Context.Path), e.Message)
	}
	return &FieldError{Field: "spec.config", Reason: "invalid Ignition config: " + err.Error()}
}

// formatPath writes a report path as .storage.files[2].contents.source.
func formatPath(p []interface{}) string {
	var b strings.Builder
	for _, e := range p {
		if i, ok := e.(int); ok {
			fmt.Fprintf(&b, "[%d]", i)
			continue
		}
		fmt.Fprintf(&b, ".%v", e)
	}
	return b.String()
}

// valueAt finds the JSON value at p in raw, for the error message only; it
// returns "" wherever the path leads nowhere.
func valueAt(raw []byte, p []interface{}) string {
	var v interface{}
	if json.Unmarshal(raw, &v) != nil {
		return ""
	}
	for _, e := range p {
		switch k := e.(type) {
		case string:
			m, ok := v.(map[string]interface{})
			if !ok {
				return ""
			}
			v = m[k]
		case int:
			a, ok := v.([]interface{})
			if !ok || k < 0 || k >= len(a) {
				return ""
			}
			v = a[k]
		}
	}
	if s, ok := v.(string); ok {
		return s
	}
	if v == nil {
		return ""
	}
	out, _ := json.Marshal(v)
	return string(out)
}

func convertFiles(in []ign.File) ([]File, error) {
	out := make([]File, 0, len(in))
	for i, f := range in {
		field := fmt.Sprintf("spec.config.storage.files[%d]", i)
		file, err := convertFile(field, f)
		if err != nil {
			return nil, err
		}
		out = append(out, file)
	}
	return out, nil
}

func convertFile(field string, f ign.File) (File, error) {
	if err := checkHostPath(f.Path); err != nil {
		return File{}, fieldErr(field+".path", f.Path, err.Error())
	}
	if len(f.Append) > 0 {
		// Appending is not idempotent: a re-run would append twice. The MCD
		// refuses it for the same reason.
		return File{}, fieldErr(field+".append", f.Path, "appending to files is not supported")
	}
	mode := defaultFileMode
	if f.Mode != nil {
		mode = fromUnixMode(uint32(*f.Mode))
	}
	contents, err := decodeContents(field+".contents", f.Contents)
	if err != nil {
		return File{}, err
	}
	return File{
		Path:      f.Path,
		Mode:      mode,
		User:      Owner{ID: f.User.ID, Name: deref(f.User.Name)},
		Group:     Owner{ID: f.Group.ID, Name: deref(f.Group.Name)},
		Contents:  contents,
		Overwrite: f.Overwrite,
	}, nil
}

// checkHostPath accepts absolute, clean paths only: a path with .. or
// duplicate slashes could mean another file than the one it reads as.
func checkHostPath(p string) error {
	if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
		return fmt.Errorf("must be an absolute, clean path")
	}
	return nil
}

func convertUnits(in []ign.Unit) ([]Unit, error) {
	out := make([]Unit, 0, len(in))
	for i, u := range in {
		field := fmt.Sprintf("spec.config.systemd.units[%d]", i)
		if err := checkFileName(u.Name); err != nil {
			return nil, fieldErr(field+".name", u.Name, err.Error())
		}
		unit := Unit{Name: u.Name, Contents: deref(u.Contents), Enabled: u.Enabled, Mask: u.Mask}
		for j, d := range u.Dropins {
			if err := checkFileName(d.Name); err != nil {
				return nil, fieldErr(fmt.Sprintf("%s.dropins[%d].name", field, j), d.Name, err.Error())
			}
			unit.Dropins = append(unit.Dropins, Dropin{Name: d.Name, Contents: deref(d.Contents)})
		}
		out = append(out, unit)
	}
	return out, nil
}

// checkFileName refuses names that would leave /etc/systemd/system: Ignition
// checks only their suffix.
func checkFileName(name string) error {
	if name == "" || strings.Contains(name, "/") || strings.HasPrefix(name, ".") {
		return fmt.Errorf("must be a file name without a slash or a leading dot")
	}
	return nil
}

// coreKeys concatenates the keys of every entry for core, in order; the MCD
// writes all keys it is given into core's one file.
func coreKeys(users []ign.PasswdUser) []string {
	var keys []string
	for _, u := range users {
		if u.Name != coreUser {
			continue
		}
		for _, k := range u.SSHAuthorizedKeys {
			keys = append(keys, string(k))
		}
	}
	return keys
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// fromUnixMode converts st_mode permission and special bits, as Ignition
// writes them, to Go's representation.
func fromUnixMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	if m&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if m&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

// toUnixMode is the inverse of fromUnixMode, for chmod and the journal.
func toUnixMode(mode fs.FileMode) uint32 {
	m := uint32(mode.Perm())
	if mode&fs.ModeSetuid != 0 {
		m |= 0o4000
	}
	if mode&fs.ModeSetgid != 0 {
		m |= 0o2000
	}
	if mode&fs.ModeSticky != 0 {
		m |= 0o1000
	}
	return m
}
