package osupdate

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseTarget(t *testing.T) {
	t.Parallel()
	sum := strings.Repeat("ab", 32)
	cases := []struct {
		in, policy, want, err string
	}{
		{in: "ostree-unverified-registry:quay.io/fedora/fedora-coreos:stable", want: "ostree-unverified-registry:quay.io/fedora/fedora-coreos:stable"},
		{in: "ostree-image-signed:docker://quay.io/fedora/fedora-coreos@sha256:" + strings.Repeat("1", 64), want: "ostree-image-signed:docker://quay.io/fedora/fedora-coreos@sha256:" + strings.Repeat("1", 64)},
		{in: "quay.io/fedora/fedora-coreos:stable", want: "ostree-image-signed:docker://quay.io/fedora/fedora-coreos:stable"},
		{in: "quay.io/fedora/fedora-coreos:stable", policy: TransportUnverifiedRegistry, want: "ostree-unverified-registry:quay.io/fedora/fedora-coreos:stable"},
		{in: sum + " nosmt mitigations=auto", want: sum + " mitigations=auto nosmt"},
		{in: "", err: "empty"},
		{in: "fedora-coreos:stable", err: "registry"},
		{in: "ostree-remote-image:fedora:docker://quay.io/x:y", err: "unsupported transport"},
		{in: "docker://quay.io/x:y", err: "unsupported transport"},
		{in: "quay.io/UPPER/case:tag", err: "quay.io/UPPER/case:tag"},
		{in: "quay.io/x:y =bad", err: "empty key"},
		{in: "quay.io/x:y", policy: "oci:", err: "policy default transport"},
		{in: strings.Repeat("ab", 31), err: "registry"},
		// Kernel arguments that must be absent, and quoted values.
		{in: "quay.io/x:y !oldarg karg1", want: "ostree-image-signed:docker://quay.io/x:y karg1 !oldarg"},
		{in: "quay.io/x:y !b !a !b c", want: "ostree-image-signed:docker://quay.io/x:y c !a !b"},
		{in: sum + ` foo="a b"  cgroup_no_v1="all"` + "\t!mitigations=off", want: sum + ` cgroup_no_v1="all" foo="a b" !mitigations=off`},
		{in: `quay.io/x:y acpi_osi=!Windows !dyndbg="file x.c +p"`, want: `ostree-image-signed:docker://quay.io/x:y acpi_osi=!Windows !dyndbg="file x.c +p"`},
		{in: `quay.io/x:y foo=a"b c"d`, want: `ostree-image-signed:docker://quay.io/x:y foo=a"b c"d`},
		{in: "quay.io/x:y nosmt !nosmt", err: `"nosmt" is both required and deleted`},
		{in: `quay.io/x:y foo="a" !foo=a`, err: `"foo=\"a\"" is both required and deleted`},
		{in: "quay.io/x:y !", err: `kernel argument "": empty key`},
		{in: "quay.io/x:y !=v", err: `kernel argument "=v": empty key`},
		{in: `quay.io/x:y foo="a b`, err: `unbalanced double quote in "foo=\"a b"`},
		{in: `quay.io/x:y "foo=a b"`, err: "quote in the key"},
		{in: "quay.io/x:y foo=\"a\tb\"", err: "control character"},
		{in: "quay.io/x:y foo=\"a\u00a0b\"", err: "whitespace other than a space"},
		{in: "quay.io/x:y foo=a\x01", err: `"foo=a\x01": contains a control character`},
		{in: "quay.io/x:y !foo=\x7f", err: "control character"},
	}
	for _, c := range cases {
		got, err := Policy{DefaultTransport: c.policy}.ParseTarget(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseTarget(%q) error = %v, want one containing %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || got.String() != c.want {
			t.Errorf("ParseTarget(%q) = %q, %v; want %q", c.in, got.String(), err, c.want)
		}
	}
	if _, err := (Policy{}).ParseTarget("quay.io/x:y", "bad arg"); err == nil || !strings.Contains(err.Error(), `"bad arg"`) {
		t.Errorf("extra kernel argument with a space: error %v, want one naming it", err)
	}
	got, err := (Policy{}).ParseTarget("quay.io/x:y a !b", `q="x y"`, "!c", "a")
	if want := `ostree-image-signed:docker://quay.io/x:y a q="x y" !b !c`; err != nil || got.String() != want {
		t.Errorf("extra kernel arguments: %q, %v; want %q", got.String(), err, want)
	}
	if !slices.Equal(got.KernelArgs, []string{"a", `q="x y"`}) || !slices.Equal(got.DeleteKernelArgs, []string{"b", "c"}) {
		t.Errorf("fields: add %q delete %q", got.KernelArgs, got.DeleteKernelArgs)
	}
}

func TestSplitKernelArgs(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want []string
		err  bool
	}{
		{in: "", want: nil},
		{in: " \t\n", want: nil},
		{in: "a  b\tc\n", want: []string{"a", "b", "c"}},
		{in: `foo="a b" c`, want: []string{`foo="a b"`, "c"}},
		{in: `"foo=a b" c`, want: []string{`"foo=a b"`, "c"}},
		{in: `x="" y`, want: []string{`x=""`, "y"}},
		{in: `a b="c`, want: []string{"a", `b="c`}, err: true},
		{in: `a b="c d`, want: []string{"a", `b="c d`}, err: true},
	}
	for _, c := range cases {
		got, err := SplitKernelArgs(c.in)
		if !slices.Equal(got, c.want) || (err != nil) != c.err {
			t.Errorf("SplitKernelArgs(%q) = %q, %v; want %q, error %v", c.in, got, err, c.want, c.err)
		}
	}
}

func TestKargsArgs(t *testing.T) {
	t.Parallel()
	tg, err := Policy{}.ParseTarget(`quay.io/x:y z=1 foo="a b" !old !mitigations=off`)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"kargs", "--lock-finalization", "--delete-if-present=mitigations=off", "--delete-if-present=old",
		`--append-if-missing=foo="a b"`, "--append-if-missing=z=1"}
	if got := kargsArgs(tg); !slices.Equal(got, want) {
		t.Errorf("kargsArgs = %q, want %q", got, want)
	}
	if got := kargsArgs(Target{ImageRef: "x"}); got != nil {
		t.Errorf("kargsArgs without kernel arguments = %q, want nil", got)
	}
}

// TestKernelArgMismatch compares targets with command lines as GRUB writes
// them: quotes moved or dropped, an unbalanced quote at the end.
func TestKernelArgMismatch(t *testing.T) {
	t.Parallel()
	cmdline := filepath.Join(t.TempDir(), "cmdline")
	u := &Updater{cfg: Config{CmdlinePath: cmdline}}
	cases := []struct {
		cmdline, target  string
		missing, present []string
	}{
		{cmdline: `BOOT_IMAGE=/vmlinuz rw "foo=a b" cgroup_no_v1=all`, target: `foo="a b" cgroup_no_v1="all" !rw`, present: []string{"rw"}},
		{cmdline: "rw nosmt=force", target: "nosmt !nosmt=force !quiet", missing: []string{"nosmt"}, present: []string{"nosmt=force"}},
		// The kernel reads an unterminated quote to the end: foo is "a b".
		{cmdline: `rw foo="a b`, target: `foo="a b" !rw`, present: []string{"rw"}},
		{cmdline: "rw\n", target: "!rw=1 !r rw", missing: nil},
	}
	for _, c := range cases {
		if err := os.WriteFile(cmdline, []byte(c.cmdline), 0o600); err != nil {
			t.Fatal(err)
		}
		tg, err := Policy{}.ParseTarget("quay.io/x:y " + c.target)
		if err != nil {
			t.Fatal(err)
		}
		missing, present, err := u.kernelArgMismatch(tg)
		if err != nil || !slices.Equal(missing, c.missing) || !slices.Equal(present, c.present) {
			t.Errorf("cmdline %q, target %q: missing %q present %q (%v); want %q %q", c.cmdline, c.target, missing, present, err, c.missing, c.present)
		}
	}
}

// FuzzParseTarget: whatever parses is canonical — its string parses back to
// the same target — and keeps the invariants Stage relies on.
func FuzzParseTarget(f *testing.F) {
	sum := strings.Repeat("ab", 32)
	for _, seed := range []string{
		"quay.io/fedora/fedora-coreos:stable",
		"ostree-unverified-registry:quay.io/x/y:1 nosmt mitigations=auto",
		sum + " a !b",
		`quay.io/x:y foo="a b" cgroup_no_v1="all" !dyndbg="file x.c +p"`,
		`quay.io/x:y !old karg1 karg1 !old`,
		`quay.io/x:y foo="a b`,
		`quay.io/x:y "foo=a b"`,
		"quay.io/x:y foo=\"a\tb\" !",
		`quay.io/x:y a="x"y"z" !b=c"d e"`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tg, err := Policy{}.ParseTarget(s)
		if err != nil {
			return
		}
		again, err := Policy{}.ParseTarget(tg.String())
		if err != nil {
			t.Fatalf("canonical %q of %q does not parse: %v", tg.String(), s, err)
		}
		if again.String() != tg.String() || !slices.Equal(again.KernelArgs, tg.KernelArgs) || !slices.Equal(again.DeleteKernelArgs, tg.DeleteKernelArgs) {
			t.Fatalf("%q: canonical %q parses to %q", s, tg.String(), again.String())
		}
		for _, list := range [][]string{tg.KernelArgs, tg.DeleteKernelArgs} {
			if !slices.IsSorted(list) || len(slices.Compact(slices.Clone(list))) != len(list) {
				t.Fatalf("%q: kernel arguments %q not sorted and unique", s, list)
			}
			for _, a := range list {
				if err := validateKernelArg(a); err != nil {
					t.Fatalf("%q: kept an invalid argument: %v", s, err)
				}
				if split, err := SplitKernelArgs(a); err != nil || len(split) != 1 || split[0] != a {
					t.Fatalf("%q: argument %q is not one argument for rpm-ostree: %q %v", s, a, split, err)
				}
			}
		}
		for _, d := range tg.DeleteKernelArgs {
			if slices.ContainsFunc(tg.KernelArgs, func(a string) bool { return sameKernelArg(a, d) }) {
				t.Fatalf("%q: %q both required and deleted", s, d)
			}
		}
	})
}
