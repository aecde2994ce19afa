package machineconfig

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// host is a fake host root: core's home under /var/home behind the /home
// link as on RHCOS, a unit shipped by the OS and a default in /usr/etc.
func host(t *testing.T) (Writer, string) {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"etc/passwd":                             "root:x:0:0:root:/root:/bin/bash\ncore:x:1000:1000:CoreOS Admin:/home/core:/bin/bash\n",
		"usr/lib/group":                          "root:x:0:\nwheel:x:10:\n",
		"etc/group":                              "core:x:1000:\n",
		"usr/lib/systemd/system/kubelet.service": "[Service]\nExecStart=/bin/kubelet\n[Install]\nWantedBy=multi-user.target\n",
		"usr/etc/chrony.conf":                    "pool default\n",
		"etc/chrony.conf":                        "pool default\n",
		"etc/systemd/system/multi-user.target.wants/.keep": "",
	}
	for p, c := range files {
		write(t, filepath.Join(root, p), c, 0o644)
	}
	must(t, os.MkdirAll(filepath.Join(root, "var/home/core"), 0o700))
	must(t, os.Symlink("var/home", filepath.Join(root, "home")))
	return Writer{Root: root, StateDir: t.TempDir()}, root
}

func write(t *testing.T, p, c string, mode fs.FileMode) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(p), 0o755))
	must(t, os.WriteFile(p, []byte(c), mode))
	must(t, os.Chmod(p, mode))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

func linkTarget(t *testing.T, p string) string {
	t.Helper()
	s, err := os.Readlink(p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const desiredIgn = `{"ignition":{"version":"3.4.0"},
  "passwd":{"users":[{"name":"core","sshAuthorizedKeys":["ssh-ed25519 AAA one","ssh-rsa BBB two"]}]},
  "storage":{"files":[
    {"path":"/etc/chrony.conf","mode":384,"contents":{"source":"data:,pool%20ntp.example%0A"}},
    {"path":"/etc/new/dir/file","contents":{"source":"data:,new"},"user":{"name":"core"},"group":{"name":"wheel"}}]},
  "systemd":{"units":[
    {"name":"hello.service","enabled":true,"contents":"[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\nRequiredBy=foo.target\n",
     "dropins":[{"name":"10-nice.conf","contents":"[Service]\nNice=5\n"}]},
    {"name":"kubelet.service","enabled":true},
    {"name":"bad.service","mask":true}]}}`

func TestWriterApplyRestore(t *testing.T) {
	w, root := host(t)
	ctx := context.Background()
	write(t, filepath.Join(root, "etc/chrony.conf"), "pool mine\n", 0o640)
	des := mustParse(t, desiredIgn, nil)
	must(t, w.Apply(ctx, nil, des))

	sys := filepath.Join(root, "etc/systemd/system")
	if got := readFile(t, filepath.Join(root, "etc/chrony.conf")); got != "pool ntp.example\n" {
		t.Fatalf("chrony.conf = %q", got)
	}
	if fi, _ := os.Stat(filepath.Join(root, "etc/chrony.conf")); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
	if readFile(t, filepath.Join(sys, "hello.service.d/10-nice.conf")) != "[Service]\nNice=5\n" {
		t.Fatal("drop-in")
	}
	for link, target := range map[string]string{
		"multi-user.target.wants/hello.service":   "/etc/systemd/system/hello.service",
		"foo.target.requires/hello.service":       "/etc/systemd/system/hello.service",
		"multi-user.target.wants/kubelet.service": "/usr/lib/systemd/system/kubelet.service",
		"bad.service": "/dev/null",
	} {
		if got := linkTarget(t, filepath.Join(sys, link)); got != target {
			t.Fatalf("%s -> %s, want %s", link, got, target)
		}
	}
	keys := filepath.Join(root, "var/home/core/.ssh/authorized_keys.d/ignition")
	if readFile(t, keys) != "ssh-ed25519 AAA one\nssh-rsa BBB two\n" {
		t.Fatal("keys")
	}
	if fi, _ := os.Stat(filepath.Dir(keys)); fi.Mode().Perm() != 0o700 {
		t.Fatalf("key dir mode %v", fi.Mode())
	}
	if ok, err := w.Applied(des); !ok || err != nil {
		t.Fatalf("Applied = %v, %v", ok, err)
	}

	// A second Apply changes nothing: same inode, same journal.
	before, _ := os.Stat(filepath.Join(root, "etc/chrony.conf"))
	must(t, w.Apply(ctx, nil, des))
	after, _ := os.Stat(filepath.Join(root, "etc/chrony.conf"))
	if !os.SameFile(before, after) {
		t.Fatal("re-apply rewrote an unchanged file")
	}

	must(t, w.Restore(ctx))
	if got := readFile(t, filepath.Join(root, "etc/chrony.conf")); got != "pool mine\n" {
		t.Fatalf("restored chrony.conf = %q", got)
	}
	if fi, _ := os.Stat(filepath.Join(root, "etc/chrony.conf")); fi.Mode().Perm() != 0o640 {
		t.Fatalf("restored mode %v", fi.Mode())
	}
	for _, p := range []string{"etc/new/dir/file", "etc/systemd/system/hello.service", "etc/systemd/system/bad.service",
		"etc/systemd/system/multi-user.target.wants/kubelet.service", "var/home/core/.ssh/authorized_keys.d/ignition"} {
		if exists(filepath.Join(root, p)) {
			t.Fatalf("%s survived the restore", p)
		}
	}
	if ok, _ := w.Applied(des); ok {
		t.Fatal("Applied after Restore")
	}
	must(t, w.Restore(ctx)) // idempotent: no backup left
	if got := readFile(t, filepath.Join(root, "etc/chrony.conf")); got != "pool mine\n" {
		t.Fatal("second restore changed the host")
	}
}

func TestWriterCrashResume(t *testing.T) {
	w, root := host(t)
	ctx := context.Background()
	des := mustParse(t, desiredIgn, nil)
	// An Apply that died after journaling and writing its first path.
	p, err := buildPlan(root, nil, des)
	must(t, err)
	j, err := loadJournal(w.StateDir)
	must(t, err)
	must(t, j.record(p))
	must(t, put(p.ops[0].disk, p.ops[0].want))
	if readFile(t, filepath.Join(root, "etc/chrony.conf")) != "pool ntp.example\n" {
		t.Fatal("setup: first op not written")
	}

	must(t, w.Apply(ctx, nil, des))
	if ok, err := w.Applied(des); !ok || err != nil {
		t.Fatalf("Applied after resume = %v, %v", ok, err)
	}
	// The half-applied file must not have become the "previous" version.
	must(t, w.Restore(ctx))
	if got := readFile(t, filepath.Join(root, "etc/chrony.conf")); got != "pool default\n" {
		t.Fatalf("restore after resume gave %q", got)
	}
}

func TestWriterRemovesAndDisables(t *testing.T) {
	w, root := host(t)
	ctx := context.Background()
	cur := mustParse(t, desiredIgn, nil)
	must(t, w.Apply(ctx, nil, cur))
	must(t, w.Commit())
	if exists(filepath.Join(w.StateDir, backupDirName)) {
		t.Fatal("Commit left the backup")
	}
	des := mustParse(t, `{"ignition":{"version":"3.5.0"},
	  "systemd":{"units":[{"name":"kubelet.service","enabled":false},{"name":"bad.service","mask":false},
	    {"name":"moved.service","enabled":true,"contents":"[Install]\nWantedBy=graphical.target\n"}]}}`, nil)
	must(t, w.Apply(ctx, cur, des))
	sys := filepath.Join(root, "etc/systemd/system")
	for _, p := range []string{"multi-user.target.wants/kubelet.service", "bad.service", "hello.service",
		"hello.service.d/10-nice.conf", "multi-user.target.wants/hello.service", "foo.target.requires/hello.service"} {
		if exists(filepath.Join(sys, p)) {
			t.Fatalf("%s not removed", p)
		}
	}
	if got := readFile(t, filepath.Join(root, "etc/chrony.conf")); got != "pool default\n" {
		t.Fatalf("dropped file not reset to /usr/etc default: %q", got)
	}
	if exists(filepath.Join(root, "etc/new/dir/file")) {
		t.Fatal("dropped file without default not removed")
	}
	if readFile(t, filepath.Join(root, "var/home/core/.ssh/authorized_keys.d/ignition")) != "" {
		t.Fatal("dropped keys not emptied")
	}
	if linkTarget(t, filepath.Join(sys, "graphical.target.wants/moved.service")) != "/etc/systemd/system/moved.service" {
		t.Fatal("moved.service not enabled")
	}

	// A new WantedBy= moves the link.
	again := mustParse(t, `{"ignition":{"version":"3.5.0"},
	  "systemd":{"units":[{"name":"moved.service","enabled":true,"contents":"[Install]\nWantedBy=multi-user.target\n"}]}}`, nil)
	must(t, w.Apply(ctx, des, again))
	if exists(filepath.Join(sys, "graphical.target.wants/moved.service")) || !exists(filepath.Join(sys, "multi-user.target.wants/moved.service")) {
		t.Fatal("WantedBy change did not move the link")
	}
	// Both Applies since the Commit are rolled back: the host is as cur left it.
	must(t, w.Restore(ctx))
	if exists(filepath.Join(sys, "moved.service")) || exists(filepath.Join(sys, "multi-user.target.wants/moved.service")) {
		t.Fatal("restore kept moved.service")
	}
	if ok, err := w.Applied(cur); !ok || err != nil {
		t.Fatalf("Applied(cur) after restore = %v, %v", ok, err)
	}
}

func TestWriterRefusesEscapes(t *testing.T) {
	w, root := host(t)
	must(t, os.Symlink("../../../../outside", filepath.Join(root, "etc/esc")))
	must(t, os.Symlink("/etc", filepath.Join(root, "etc/abs")))
	des := mustParse(t, `{"ignition":{"version":"3.5.0"},"storage":{"files":[
	  {"path":"/etc/abs/inside","contents":{"source":"data:,ok"}},
	  {"path":"/etc/esc/f","contents":{"source":"data:,x"}}]}}`, nil)
	err := w.Apply(context.Background(), nil, des)
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "spec.config.storage.files[1].path" {
		t.Fatalf("got %v, want a FieldError on files[1]", err)
	}
	if exists(filepath.Join(root, "etc/inside")) {
		t.Fatal("refused Apply changed the host")
	}
	ok := mustParse(t, `{"ignition":{"version":"3.5.0"},"storage":{"files":[{"path":"/etc/abs/inside","contents":{"source":"data:,ok"}}]}}`, nil)
	must(t, w.Apply(context.Background(), nil, ok))
	if readFile(t, filepath.Join(root, "etc/inside")) != "ok" {
		t.Fatal("an absolute link inside the root was not followed inside the root")
	}
}

func TestWriterUnknownOwner(t *testing.T) {
	w, _ := host(t)
	des := mustParse(t, `{"ignition":{"version":"3.5.0"},"storage":{"files":[{"path":"/etc/x","user":{"name":"nobody"}}]}}`, nil)
	var fe *FieldError
	if err := w.Apply(context.Background(), nil, des); !errors.As(err, &fe) || fe.Field != "spec.config.storage.files[0].user" {
		t.Fatalf("got %v", err)
	}
}
