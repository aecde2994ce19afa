package machineconfig

import (
	"fmt"
	"reflect"

	ign "github.com/coreos/ignition/v2/config/v3_5/types"
)

// checkIgnitionSections refuses changes to the Ignition sections nodeward
// does not model. Like the MCD it compares sections whole, after both
// configs were translated to one spec version; sections that only matter
// while Ignition fetches configs at first boot (proxy, timeouts, TLS) are
// not compared, as the MCD does not either.
func checkIgnitionSections(cur, des ign.Config) error {
	sections := []struct {
		field    string
		old, new interface{}
	}{
		{"spec.config.ignition.config", cur.Ignition.Config, des.Ignition.Config},
		{"spec.config.kernelArguments", cur.KernelArguments, des.KernelArguments},
		{"spec.config.storage.disks", cur.Storage.Disks, des.Storage.Disks},
		{"spec.config.storage.filesystems", cur.Storage.Filesystems, des.Storage.Filesystems},
		{"spec.config.storage.raid", cur.Storage.Raid, des.Storage.Raid},
		{"spec.config.storage.luks", cur.Storage.Luks, des.Storage.Luks},
		{"spec.config.storage.directories", cur.Storage.Directories, des.Storage.Directories},
		{"spec.config.passwd.groups", cur.Passwd.Groups, des.Passwd.Groups},
	}
	for _, s := range sections {
		if !reflect.DeepEqual(s.old, s.new) {
			return &UnreconcilableError{Field: s.field, Reason: "changes to this section are not applied in place"}
		}
	}
	// Dropping links is allowed, as in the MCD: the links stay on disk,
	// which is what an older config asked for.
	if len(des.Storage.Links) > 0 && !reflect.DeepEqual(cur.Storage.Links, des.Storage.Links) {
		return &UnreconcilableError{Field: "spec.config.storage.links", Reason: "changes to links are not applied in place"}
	}
	return checkUsers(cur.Passwd.Users, des.Passwd.Users)
}

// checkUsers allows one change only: the core user's sshAuthorizedKeys.
// Any other user, and any other field of core, must stay as it is.
func checkUsers(cur, des []ign.PasswdUser) error {
	if reflect.DeepEqual(cur, des) {
		return nil
	}
	old := make(map[string]ign.PasswdUser, len(cur))
	for _, u := range cur {
		old[u.Name] = u
	}
	seen := make(map[string]bool, len(des))
	for i, u := range des {
		seen[u.Name] = true
		field := fmt.Sprintf("spec.config.passwd.users[%d]", i)
		prev, existed := old[u.Name]
		if !existed {
			prev = ign.PasswdUser{Name: u.Name}
		}
		if u.Name != coreUser && !(existed && reflect.DeepEqual(prev, u)) {
			return &UnreconcilableError{Field: field, Reason: fmt.Sprintf("user %q: only the core user's SSH keys are applied in place", u.Name)}
		}
		if f := changedUserField(prev, u); f != "" {
			return &UnreconcilableError{Field: field + "." + f, Reason: "only sshAuthorizedKeys of the core user are applied in place"}
		}
	}
	for _, u := range cur {
		if !seen[u.Name] && u.Name != coreUser {
			return &UnreconcilableError{Field: "spec.config.passwd.users", Reason: fmt.Sprintf("user %q would be dropped; users are not removed in place", u.Name)}
		}
	}
	return nil
}

// changedUserField names the first field other than the keys that differs,
// by its JSON name, or "".
func changedUserField(a, b ign.PasswdUser) string {
	a.SSHAuthorizedKeys, b.SSHAuthorizedKeys = nil, nil
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	t := va.Type()
	for i := 0; i < t.NumField(); i++ {
		if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			return jsonName(t.Field(i))
		}
	}
	return ""
}

func jsonName(f reflect.StructField) string {
	tag := f.Tag.Get("json")
	for i := 0; i < len(tag); i++ {
		if tag[i] == ',' {
			return tag[:i]
		}
	}
	if tag == "" {
		return f.Name
	}
	return tag
}
