package machineconfig

import (
	"errors"
	"slices"
	"testing"
)

const baseIgn = `{"ignition":{"version":"3.2.0"},
  "passwd":{"users":[{"name":"core","sshAuthorizedKeys":["k1"]}]},
  "storage":{"files":[{"path":"/etc/a","contents":{"source":"data:,a"}}]},
  "systemd":{"units":[{"name":"a.service","enabled":true,"contents":"[Service]\nExecStart=/bin/true\n"}]}}`

func TestReconcileUnreconcilable(t *testing.T) {
	tests := []struct {
		name, ign string
		spec      map[string]any
		field     string
	}{
		{"fips", baseIgn, map[string]any{"fips": true}, "spec.fips"},
		{"kernel type", baseIgn, map[string]any{"kernelType": "realtime"}, "spec.kernelType"},
		{"extensions", baseIgn, map[string]any{"extensions": []string{"usbguard"}}, "spec.extensions"},
		{"disks", `{"ignition":{"version":"3.2.0"},"storage":{"disks":[{"device":"/dev/vdb","wipeTable":true}]}}`, nil, "spec.config.storage.disks"},
		{"filesystems", `{"ignition":{"version":"3.2.0"},"storage":{"filesystems":[{"device":"/dev/vdb","format":"xfs"}]}}`, nil, "spec.config.storage.filesystems"},
		{"raid", `{"ignition":{"version":"3.2.0"},"storage":{"raid":[{"name":"md","level":"raid1","devices":["/dev/vdb","/dev/vdc"]}]}}`, nil, "spec.config.storage.raid"},
		{"directories", `{"ignition":{"version":"3.2.0"},"storage":{"directories":[{"path":"/etc/d"}]}}`, nil, "spec.config.storage.directories"},
		{"links", `{"ignition":{"version":"3.2.0"},"storage":{"links":[{"path":"/etc/l","target":"/etc/a"}]}}`, nil, "spec.config.storage.links"},
		{"groups", `{"ignition":{"version":"3.2.0"},"passwd":{"groups":[{"name":"g"}]}}`, nil, "spec.config.passwd.groups"},
		{"other user", `{"ignition":{"version":"3.2.0"},"passwd":{"users":[{"name":"bob","sshAuthorizedKeys":["k"]}]}}`, nil, "spec.config.passwd.users[0]"},
		{"core shell", `{"ignition":{"version":"3.2.0"},"passwd":{"users":[{"name":"core","sshAuthorizedKeys":["k1"],"shell":"/bin/zsh"}]}}`, nil, "spec.config.passwd.users[0].shell"},
		{"core password", `{"ignition":{"version":"3.2.0"},"passwd":{"users":[{"name":"core","passwordHash":"x"}]}}`, nil, "spec.config.passwd.users[0].passwordHash"},
		{"config merge", `{"ignition":{"version":"3.2.0","config":{"merge":[{"source":"data:,%7B%7D"}]}}}`, nil, "spec.config.ignition.config"},
		{"ignition kargs", `{"ignition":{"version":"3.3.0"},"kernelArguments":{"shouldExist":["x"]}}`, nil, "spec.config.kernelArguments"},
	}
	cur := mustParse(t, baseIgn, nil)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			des := mustParse(t, tc.ign, tc.spec)
			_, err := Reconcile(cur, des)
			var ue *UnreconcilableError
			if !errors.As(err, &ue) || ue.Field != tc.field {
				t.Fatalf("got %v, want an UnreconcilableError on %s", err, tc.field)
			}
			// The same unsupported value on both sides is already on the host.
			if _, err := Reconcile(des, des); err != nil {
				t.Fatalf("unchanged config refused: %v", err)
			}
		})
	}
}

func TestReconcileExtensionsNeedRelayering(t *testing.T) {
	cur := mustParse(t, baseIgn, map[string]any{"extensions": []string{"usbguard"}, "osImageURL": "a"})
	des := mustParse(t, baseIgn, map[string]any{"extensions": []string{"usbguard"}, "osImageURL": "b"})
	var ue *UnreconcilableError
	if _, err := Reconcile(cur, des); !errors.As(err, &ue) || ue.Field != "spec.extensions" {
		t.Fatalf("got %v", err)
	}
}

func TestReconcileDiff(t *testing.T) {
	cur := mustParse(t, baseIgn, map[string]any{"osImageURL": "a", "kernelArguments": []string{`foo="a b" x`, "y"}})
	des := mustParse(t, `{"ignition":{"version":"3.4.0"},
	  "passwd":{"users":[{"name":"core","sshAuthorizedKeys":["k1","k2"]}]},
	  "storage":{"files":[{"path":"/etc/a","contents":{"source":"data:,a2"}},{"path":"/etc/b"}]},
	  "systemd":{"units":[{"name":"b.service","mask":true}]}}`,
		map[string]any{"osImageURL": "b", "kernelArguments": []string{"y", `foo="a b"`, "z=1"}})
	d, err := Reconcile(cur, des)
	if err != nil {
		t.Fatal(err)
	}
	if !d.OSImageChanged || d.OSImageURL != "b" || !d.SSHKeysChanged || !d.NeedsReboot() || d.Empty() {
		t.Fatalf("diff %+v", d)
	}
	if !slices.Equal(d.KernelArgsDelete, []string{`foo="a b"`, "x", "y"}) || !slices.Equal(d.KernelArgsAdd, []string{"y", `foo="a b"`, "z=1"}) {
		t.Fatalf("kargs -%q +%q", d.KernelArgsDelete, d.KernelArgsAdd)
	}
	if !slices.Equal(d.FilesChanged, []string{"/etc/a", "/etc/b"}) || len(d.FilesRemoved) != 0 {
		t.Fatalf("files %q %q", d.FilesChanged, d.FilesRemoved)
	}
	if !slices.Equal(d.UnitsChanged, []string{"b.service"}) || !slices.Equal(d.UnitsRemoved, []string{"a.service"}) {
		t.Fatalf("units %q %q", d.UnitsChanged, d.UnitsRemoved)
	}
}

func TestReconcileSameArgsRegrouped(t *testing.T) {
	cur := mustParse(t, baseIgn, map[string]any{"kernelArguments": []string{"a b", `c="d e"`}})
	des := mustParse(t, baseIgn, map[string]any{"kernelArguments": []string{"a", `b c="d e"`}})
	d, err := Reconcile(cur, des)
	if err != nil || !d.Empty() || d.NeedsReboot() {
		t.Fatalf("diff %+v, %v", d, err)
	}
}

func TestReconcileKeysOnly(t *testing.T) {
	cur := mustParse(t, baseIgn, nil)
	des := mustParse(t, `{"ignition":{"version":"3.5.0"},
	  "passwd":{"users":[{"name":"core","sshAuthorizedKeys":["k9"]}]},
	  "storage":{"files":[{"path":"/etc/a","contents":{"source":"data:,a"}}]},
	  "systemd":{"units":[{"name":"a.service","enabled":true,"contents":"[Service]\nExecStart=/bin/true\n"}]}}`, nil)
	d, err := Reconcile(cur, des)
	if err != nil || !d.SSHKeysChanged || d.NeedsReboot() {
		t.Fatalf("diff %+v, %v", d, err)
	}
}
