package rpmostree

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// TestKargs runs `rpm-ostree kargs` as nodeward and the machine-config-daemon
// do, on a deployment with quoted arguments: the daemon's order (every
// append before every delete-if-present), exact-string checks, libostree's
// splitting and deletion errors, and quotes kept.
func TestKargs(t *testing.T) {
	t.Parallel()
	booted := []string{"rw", `dyndbg="file x.c +p"`, "console=tty0", "console=ttyS0", "quiet"}
	cases := []struct {
		name    string
		args    []string
		want    []string // staged kernel arguments; nil: nothing staged
		out     string   // in stdout
		err     string   // in stderr, exit 1
		locked  bool
		noStage bool
	}{
		{name: "display", args: []string{"kargs"}, out: `rw dyndbg="file x.c +p" console=tty0 console=ttyS0 quiet`, noStage: true},
		{name: "display with the lock flag only", args: []string{"kargs", "--lock-finalization"}, out: "rw dyndbg", noStage: true},
		{name: "append and delete in one locked call",
			args:   []string{"kargs", "--lock-finalization", "--delete-if-present=quiet", `--delete-if-present=dyndbg="file x.c +p"`, `--append-if-missing=foo="a b"`, "--append-if-missing=rw"},
			want:   []string{"rw", "console=tty0", "console=ttyS0", `foo="a b"`},
			locked: true},
		{name: "option value as the next argument", args: []string{"kargs", "--append-if-missing", `cgroup_no_v1="all"`, "--delete-if-present", "quiet"},
			want: []string{"rw", `dyndbg="file x.c +p"`, "console=tty0", "console=ttyS0", `cgroup_no_v1="all"`}},
		{name: "delete-if-present only sees the arguments before the call",
			args: []string{"kargs", "--delete-if-present=new", "--append-if-missing=new"},
			want: append(slices.Clone(booted), "new")},
		{name: "append-if-missing compares exact strings",
			args: []string{"kargs", `--append-if-missing=rw`, `--append-if-missing=dyndbg="file x.c +p"`, "--append-if-missing=quiet=1"},
			want: append(slices.Clone(booted), "quiet=1")},
		{name: "no changes", args: []string{"kargs", "--lock-finalization", "--append-if-missing=rw", "--delete-if-present=absent", "--delete-if-present=console"},
			out: "No changes.", noStage: true},
		{name: "append splits on spaces outside quotes", args: []string{"kargs", "--append=a b", `--append=c="d e"`},
			want: append(slices.Clone(booted), "a", "b", `c="d e"`)},
		{name: "delete by key of a single value", args: []string{"kargs", "--delete=dyndbg"}, want: []string{"rw", "console=tty0", "console=ttyS0", "quiet"}},
		{name: "delete one of several values", args: []string{"kargs", "--delete=console=ttyS0"}, want: []string{"rw", `dyndbg="file x.c +p"`, "console=tty0", "quiet"}},
		{name: "delete a missing key", args: []string{"kargs", "--delete=nosmt"}, err: "No key 'nosmt' found"},
		{name: "delete a key of several values", args: []string{"kargs", "--delete=console"}, err: "Multiple values for key 'console' found"},
		{name: "delete another value", args: []string{"kargs", "--delete=quiet=1"}, err: "No karg 'quiet=1' found"},
		{name: "unknown option", args: []string{"kargs", "--replace=a=b=c"}, err: "--replace"},
		{name: "missing value", args: []string{"kargs", "--append-if-missing"}, err: "Missing argument for --append-if-missing"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			d, err := Create(dir, "", Deployment{Checksum: strings.Repeat("0a", 32), Kargs: booted}, nil)
			if err != nil {
				t.Fatal(err)
			}
			out, errOut, code := Run(dir, c.args)
			if c.err != "" {
				if code != 1 || !strings.HasPrefix(string(errOut), "error: ") || !strings.Contains(string(errOut), c.err) {
					t.Fatalf("exit %d, stderr %q; want exit 1 with %q", code, errOut, c.err)
				}
				if d.State(t).Staged != nil {
					t.Fatal("a failed kargs staged a deployment")
				}
				return
			}
			if code != 0 || !strings.Contains(string(out), c.out) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want stdout with %q", code, out, errOut, c.out)
			}
			s := d.State(t)
			if c.noStage {
				if s.Staged != nil {
					t.Fatalf("staged %q, want nothing", s.Staged.Kargs)
				}
				return
			}
			if s.Staged == nil || !slices.Equal(s.Staged.Kargs, c.want) || s.Locked != c.locked {
				t.Fatalf("staged %+v locked %v; want kernel arguments %q locked %v", s.Staged, s.Locked, c.want, c.locked)
			}
		})
	}
}

// TestQuotedKargsBoot: the staged arguments keep their quotes in `kargs`
// (the BLS options line) and boot as GRUB passes them.
func TestQuotedKargsBoot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d, err := Create(dir, "", Deployment{Checksum: strings.Repeat("0a", 32), Kargs: []string{"rw"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := Run(dir, []string{"kargs", `--append-if-missing=foo="a b"`, `--append-if-missing=cgroup_no_v1="all"`, `--append-if-missing=x=a"b"c`}); code != 0 {
		t.Fatalf("kargs: %s", errOut)
	}
	out, _, _ := Run(dir, []string{"kargs"})
	if want := `rw foo="a b" cgroup_no_v1="all" x=a"b"c` + "\n"; string(out) != want {
		t.Errorf("kargs shows %q, want %q", out, want)
	}
	d.Boot(t)
	cmdline, err := os.ReadFile(d.CmdlinePath())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(cmdline), ` rw "foo=a b" cgroup_no_v1=all x=abc`+"\n") {
		t.Errorf("/proc/cmdline %q, want GRUB's spelling of the arguments", cmdline)
	}
	if got := SplitKargs(` a "b c" d="e f" g="h`); !slices.Equal(got, []string{"a", `"b c"`, `d="e f"`, `g="h`}) {
		t.Errorf("SplitKargs = %q", got)
	}
}
