package machineconfig

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestWriterDrift: each kind of drift is named by its path, with the MCD's
// wording where the MCD checks the same thing; putting the path back
// clears it.
func TestWriterDrift(t *testing.T) {
	sys := "etc/systemd/system"
	for _, tc := range []struct {
		name, path, field, msg string
		edit                   func(t *testing.T, root string)
	}{
		{"contents", "/etc/chrony.conf", "spec.config.storage.files[0].path",
			`content mismatch for file "/etc/chrony.conf"`,
			func(t *testing.T, root string) {
				write(t, filepath.Join(root, "etc/chrony.conf"), "pool evil\n", 0o600)
			}},
		{"mode", "/etc/chrony.conf", "spec.config.storage.files[0].path",
			`mode mismatch for file: "/etc/chrony.conf"; expected: -rw-------/384/0600; received: -rw-r--r--/420/0644`,
			func(t *testing.T, root string) { must(t, os.Chmod(filepath.Join(root, "etc/chrony.conf"), 0o644)) }},
		{"deleted", "/etc/new/dir/file", "spec.config.storage.files[1].path",
			`could not stat file "/etc/new/dir/file": lstat /etc/new/dir/file: no such file or directory`,
			func(t *testing.T, root string) { must(t, os.Remove(filepath.Join(root, "etc/new/dir/file"))) }},
		{"directory", "/etc/new/dir/file", "spec.config.storage.files[1].path",
			`mode mismatch for file: "/etc/new/dir/file"; expected: -rw-r--r--/420/0644; received: drwxr-xr-x/2147484141/020000000755`,
			func(t *testing.T, root string) {
				p := filepath.Join(root, "etc/new/dir/file")
				must(t, os.Remove(p))
				must(t, os.Mkdir(p, 0o755))
			}},
		{"dropin", "/etc/systemd/system/hello.service.d/10-nice.conf", "spec.config.systemd.units[0].dropins[0].name",
			`content mismatch for file "/etc/systemd/system/hello.service.d/10-nice.conf"`,
			func(t *testing.T, root string) {
				write(t, filepath.Join(root, sys, "hello.service.d/10-nice.conf"), "[Service]\nNice=-5\n", 0o644)
			}},
		{"unit", "/etc/systemd/system/hello.service", "spec.config.systemd.units[0].contents",
			`content mismatch for file "/etc/systemd/system/hello.service"`,
			func(t *testing.T, root string) {
				write(t, filepath.Join(root, sys, "hello.service"), "[Service]\n", 0o644)
			}},
		{"disabled", "/etc/systemd/system/multi-user.target.wants/hello.service", "spec.config.systemd.units[0].enabled",
			`unit "hello.service" expected enabled=true, but its link "/etc/systemd/system/multi-user.target.wants/hello.service" is missing`,
			func(t *testing.T, root string) {
				must(t, os.Remove(filepath.Join(root, sys, "multi-user.target.wants/hello.service")))
			}},
		{"unmasked", "/etc/systemd/system/bad.service", "spec.config.systemd.units[2].mask",
			`state validation: error while evaluation symlink for path "/etc/systemd/system/bad.service": lstat /etc/systemd/system/bad.service: no such file or directory`,
			func(t *testing.T, root string) { must(t, os.Remove(filepath.Join(root, sys, "bad.service"))) }},
		{"mask replaced", "/etc/systemd/system/bad.service", "spec.config.systemd.units[2].mask",
			`state validation: invalid unit masked setting. path: "/etc/systemd/system/bad.service"; expected: /dev/null; received: /etc/systemd/system/bad.service`,
			func(t *testing.T, root string) {
				p := filepath.Join(root, sys, "bad.service")
				must(t, os.Remove(p))
				write(t, p, "[Service]\n", 0o644)
			}},
		{"ssh keys", "/home/core/.ssh/authorized_keys.d/ignition", "spec.config.passwd.users",
			`content mismatch for file "/home/core/.ssh/authorized_keys.d/ignition"`,
			func(t *testing.T, root string) {
				write(t, filepath.Join(root, "var/home/core/.ssh/authorized_keys.d/ignition"), "ssh-rsa EVIL\n", 0o600)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, root := host(t)
			des := mustParse(t, desiredIgn, nil)
			must(t, w.Apply(context.Background(), nil, des))
			if d, err := w.Drift(des); d != nil || err != nil {
				t.Fatalf("Drift after Apply = %v, %v", d, err)
			}
			tc.edit(t, root)
			d, err := w.Drift(des)
			if err != nil || d == nil {
				t.Fatalf("Drift = %v, %v", d, err)
			}
			if d.Path != tc.path || d.Field != tc.field || d.Error() != tc.msg {
				t.Fatalf("Drift = %+v\nwant path %s field %s\n%s", *d, tc.path, tc.field, tc.msg)
			}
			if ok, err := w.Applied(des); ok || err != nil {
				t.Fatalf("Applied with drift = %v, %v", ok, err)
			}
			if tc.name != "directory" { // Apply refuses to replace a directory
				must(t, w.Apply(context.Background(), nil, des))
				if d, err := w.Drift(des); d != nil || err != nil {
					t.Fatalf("Drift after re-Apply = %v, %v", d, err)
				}
			}
		})
	}
}

func TestWriterPaths(t *testing.T) {
	w, root := host(t)
	des := mustParse(t, desiredIgn, nil)
	must(t, w.Apply(context.Background(), nil, des))
	paths, err := w.Paths(des)
	must(t, err)
	want := map[string]bool{
		filepath.Join(root, "etc/chrony.conf"):                                 false,
		filepath.Join(root, "etc/systemd/system/hello.service.d/10-nice.conf"): false,
		filepath.Join(root, "var/home/core/.ssh/authorized_keys.d/ignition"):   false,
	}
	for _, p := range paths {
		if _, ok := want[p]; ok {
			want[p] = true
		}
	}
	for p, seen := range want {
		if !seen {
			t.Errorf("Paths lacks %s: %v", p, paths)
		}
	}
}
