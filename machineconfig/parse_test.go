package machineconfig

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"errors"
	"io/fs"
	"slices"
	"strings"
	"testing"
)

func gz(s string) string {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	w.Write([]byte(s))
	w.Close()
	return base64.StdEncoding.EncodeToString(b.Bytes())
}

func TestParseVersions(t *testing.T) {
	for _, v := range []string{"3.0.0", "3.1.0", "3.2.0", "3.3.0", "3.4.0", "3.5.0"} {
		t.Run(v, func(t *testing.T) {
			ign := `{"ignition":{"version":"` + v + `"},
			  "passwd":{"users":[{"name":"core","sshAuthorizedKeys":["ssh-ed25519 AAA a@b"]}]},
			  "storage":{"files":[
			    {"path":"/etc/a","contents":{"source":"data:,hello%20world%0A"},"mode":420},
			    {"path":"/etc/b","contents":{"source":"data:;base64,` + base64.StdEncoding.EncodeToString([]byte("bin\x00")) + `"},"mode":2541,"user":{"name":"core"},"group":{"id":5}}]},
			  "systemd":{"units":[{"name":"a.service","enabled":true,"contents":"[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n",
			    "dropins":[{"name":"10-x.conf","contents":"[Service]\nNice=1\n"}]},{"name":"b.service","mask":true}]}}`
			c := mustParse(t, ign, map[string]any{"osImageURL": "quay.io/os@sha256:1", "kernelArguments": []string{"a b", `c="d e"`}})
			if c.IgnitionVersion != v || c.Name != "rendered-worker-1" || c.OSImageURL != "quay.io/os@sha256:1" {
				t.Fatalf("header: %+v", c)
			}
			if !slices.Equal(c.KernelArgs, []string{"a", "b", `c="d e"`}) {
				t.Fatalf("kargs %q", c.KernelArgs)
			}
			if len(c.Files) != 2 || string(c.Files[0].Contents) != "hello world\n" || c.Files[0].Mode != 0o644 {
				t.Fatalf("file 0: %+v", c.Files[0])
			}
			f := c.Files[1]
			if string(f.Contents) != "bin\x00" || f.Mode != fs.ModeSetuid|0o755 || f.User.Name != "core" || *f.Group.ID != 5 {
				t.Fatalf("file 1: %+v", f)
			}
			if len(c.Units) != 2 || !*c.Units[0].Enabled || c.Units[0].Dropins[0].Name != "10-x.conf" || !c.Units[1].masked() {
				t.Fatalf("units: %+v", c.Units)
			}
			if !slices.Equal(c.SSHKeys, []string{"ssh-ed25519 AAA a@b"}) {
				t.Fatalf("keys %q", c.SSHKeys)
			}
		})
	}
}

func TestParseDefaults(t *testing.T) {
	c := mustParse(t, `{"ignition":{"version":"3.2.0"},"storage":{"files":[
	  {"path":"/etc/z","contents":{"source":"data:;base64,`+gz("zipped")+`","compression":"gzip"}},
	  {"path":"/etc/empty"}]}}`, nil)
	if string(c.Files[0].Contents) != "zipped" || c.Files[0].Mode != defaultFileMode {
		t.Fatalf("gzip file: %+v", c.Files[0])
	}
	if len(c.Files[1].Contents) != 0 {
		t.Fatalf("no source should be empty: %+v", c.Files[1])
	}
	if c := mustParse(t, "", nil); len(c.Files) != 0 || c.IgnitionVersion != "" {
		t.Fatalf("no config: %+v", c)
	}
}

func TestParseErrors(t *testing.T) {
	file := func(f string) string {
		return `{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/etc/ok"},` + f + `]}}`
	}
	unit := func(u string) string {
		return `{"ignition":{"version":"3.4.0"},"systemd":{"units":[` + u + `]}}`
	}
	tests := []struct {
		name, obj, field, value string
	}{
		{"api version", `{"apiVersion":"v1","kind":"MachineConfig","metadata":{"name":"x"}}`, "apiVersion", "v1"},
		{"kind", `{"apiVersion":"machineconfiguration.openshift.io/v1","kind":"Pod","metadata":{"name":"x"}}`, "kind", "Pod"},
		{"no name", `{"apiVersion":"machineconfiguration.openshift.io/v1","kind":"MachineConfig"}`, "metadata.name", ""},
		{"not json", `{`, "(object)", ""},
		{"kargs type", string(mc(t, "", map[string]any{"kernelArguments": "a"})), "spec.kernelArguments", "string"},
		{"version 2", string(mc(t, `{"ignition":{"version":"2.2.0"}}`, nil)), "spec.config.ignition.version", "2.2.0"},
		{"version 3.6", string(mc(t, `{"ignition":{"version":"3.6.0"}}`, nil)), "spec.config.ignition.version", "3.6.0"},
		{"version junk", string(mc(t, `{"ignition":{"version":"three"}}`, nil)), "spec.config.ignition.version", "three"},
		{"no version", string(mc(t, `{"storage":{}}`, nil)), "spec.config.ignition.version", ""},
		{"http source", string(mc(t, file(`{"path":"/etc/x","contents":{"source":"https://example.com/x"}}`), nil)), "spec.config.storage.files[1].contents.source", "https://example.com/x"},
		{"bad data url", string(mc(t, file(`{"path":"/etc/x","contents":{"source":"data:;base64,!!!"}}`), nil)), "spec.config.storage.files[1].contents.source", "data:;base64,!!!"},
		{"bad gzip", string(mc(t, file(`{"path":"/etc/x","contents":{"source":"data:,plain","compression":"gzip"}}`), nil)), "spec.config.storage.files[1].contents.compression", "gzip"},
		{"relative path", string(mc(t, file(`{"path":"etc/x"}`), nil)), "spec.config.storage.files[1].path", "etc/x"},
		{"dotdot path", string(mc(t, file(`{"path":"/etc/../x"}`), nil)), "spec.config.storage.files[1].path", "/etc/../x"},
		{"append", string(mc(t, file(`{"path":"/etc/x","append":[{"source":"data:,a"}]}`), nil)), "spec.config.storage.files[1].append", "/etc/x"},
		{"unit suffix", string(mc(t, unit(`{"name":"foo.conf"}`), nil)), "spec.config.systemd.units[0].name", "foo.conf"},
		{"unit slash", string(mc(t, unit(`{"name":"../x.service"}`), nil)), "spec.config.systemd.units[0].name", "../x.service"},
		{"dropin suffix", string(mc(t, unit(`{"name":"a.service","dropins":[{"name":"x.txt","contents":"[Unit]\n"}]}`), nil)), "spec.config.systemd.units[0].dropins[0].name", "x.txt"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.obj))
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("want *FieldError, got %v", err)
			}
			if fe.Field != tc.field || fe.Value != tc.value {
				t.Fatalf("got field %q value %q (%v), want %q %q", fe.Field, fe.Value, err, tc.field, tc.value)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("message %q lacks the field", err)
			}
		})
	}
}

func TestFieldErrorTruncates(t *testing.T) {
	long := "data:;base64," + strings.Repeat("!", 500)
	_, err := Parse(mc(t, `{"ignition":{"version":"3.5.0"},"storage":{"files":[{"path":"/etc/x","contents":{"source":"`+long+`"}}]}}`, nil))
	var fe *FieldError
	if !errors.As(err, &fe) || len(fe.Value) > maxValueLen+4 || !strings.HasSuffix(fe.Value, "…") {
		t.Fatalf("not truncated: %v", err)
	}
}

func TestSplitKernelArgs(t *testing.T) {
	tests := map[string][]string{
		"":                           nil,
		"  a  b\tc ":                 {"a", "b", "c"},
		`cgroup_no_v1="all" x`:       {`cgroup_no_v1="all"`, "x"},
		`foo="a b" bar`:              {`foo="a b"`, "bar"},
		`dyndbg="file x.c +p" quiet`: {`dyndbg="file x.c +p"`, "quiet"},
		`open="a b`:                  {`open="a b`},
	}
	for in, want := range tests {
		if got := splitKernelArgs(in); !slices.Equal(got, want) {
			t.Errorf("splitKernelArgs(%q) = %q, want %q", in, got, want)
		}
	}
}
