package osupdate

import (
	// go-digest accepts sha384 and sha512 digests only when their hash is
	// linked in, as it is in the agent (TLS links both); link them here so
	// the library judges as it did in the agent.
	_ "crypto/sha256"
	_ "crypto/sha512"
	"errors"
	"strings"
	"testing"

	"github.com/distribution/reference"
)

// libraryImageRef is what parseImage did before imageref.go: the
// distribution library's ParseNormalizedNamed, then the rule that the
// reference starts with its registry host.
func libraryImageRef(s string) (imageRef, error) {
	named, err := reference.ParseNormalizedNamed(s)
	if err != nil {
		return imageRef{}, err
	}
	r := imageRef{Domain: reference.Domain(named), Path: reference.Path(named)}
	if !strings.HasPrefix(s, r.Domain+"/") {
		return imageRef{}, errors.New("must name its registry host")
	}
	if t, ok := named.(reference.Tagged); ok {
		r.Tag = t.Tag()
	}
	if d, ok := named.(reference.Digested); ok {
		r.Digest = d.Digest().String()
	}
	return r, nil
}

// checkAgainstLibrary fails t when parseImageRef and the library disagree
// on s: both accept or both refuse, and on acceptance they read the same
// host, path, tag and digest.
func checkAgainstLibrary(t *testing.T, s string) (accepted bool) {
	t.Helper()
	got, err := parseImageRef(s)
	want, wantErr := libraryImageRef(s)
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("parseImageRef(%q): error %v, library error %v", s, err, wantErr)
	}
	if err != nil {
		return false
	}
	// The library keeps docker.io's implicit "library/" in the path.
	if got.Domain == "docker.io" && !strings.Contains(got.Path, "/") {
		got.Path = "library/" + got.Path
	}
	if got != want {
		t.Fatalf("parseImageRef(%q) = %+v, library reads %+v", s, got, want)
	}
	return true
}

var (
	hex64  = strings.Repeat("0123456789abcdef", 4)
	hex96  = strings.Repeat("0123456789abcdef", 6)
	hex128 = strings.Repeat("0123456789abcdef", 8)
)

// imageRefCases are references with the verdict both parsers give and, for
// a refused one, a piece of the hand-written error.
var imageRefCases = []struct {
	in  string
	err string // "" when valid
}{
	{in: "quay.io/fedora/fedora-coreos:stable"},
	{in: "quay.io/fedora/fedora-coreos@sha256:" + hex64},
	{in: "quay.io/fedora/fedora-coreos:stable@sha256:" + hex64},
	{in: "quay.io/x@sha384:" + hex96},
	{in: "quay.io/x@sha512:" + hex128},
	{in: "registry.example.com:5000/a/b/c:v1.2.3-rc_1"},
	{in: "localhost/x"},
	{in: "localhost:5000/x:latest"},
	{in: "[::1]:5000/os/image:1"},
	{in: "[fe80::1]/x"},
	{in: "docker.io/fedora:40"},
	{in: "docker.io/library/fedora"},
	{in: "a.b/c.d_e__f---g/h-i"},
	{in: "quay.io/x:_"},
	{in: "quay.io/x:" + strings.Repeat("t", 128)},
	{in: "quay.io/" + strings.Repeat("a", 255)},
	{in: "docker.io/" + strings.Repeat("a", 247)},
	{in: "xn--bcher-kva.example/x"},
	{in: "1.2.3.4/x"},
	// Accepted by the library, so accepted here too, though no registry
	// host looks like this: a first component with an upper-case letter is
	// a host even without a dot or a port, a port has no range, brackets
	// hold any hex digits and colons.
	{in: "REGISTRY/x"},
	{in: "Quay.IO/x:TAG"},
	{in: "quay.io:99999999/x"},
	{in: "quay.io:0/x"},
	{in: "[ABC]/x"},
	{in: "[:]/x"},

	{in: "", err: "empty"},
	{in: "fedora", err: "registry host"},
	{in: "fedora:40", err: "registry host"},
	{in: "library/fedora", err: "registry host"},
	{in: "myregistry/x", err: "registry host"},
	{in: hex64, err: "registry host"},
	{in: "index.docker.io/fedora", err: "legacy name"},
	{in: "/x", err: "registry host"},
	{in: "quay.io/", err: "empty component"},
	{in: "quay.io//x", err: "empty component"},
	{in: "quay.io/x/", err: "empty component"},
	{in: "quay.io/UPPER/case:tag", err: `repository path "UPPER/case" must be lowercase`},
	{in: "quay.io/x.-y", err: "separator"},
	{in: "quay.io/x___y", err: "separator"},
	{in: "quay.io/x..y", err: "separator"},
	{in: "quay.io/-x", err: "between letters or digits"},
	{in: "quay.io/x-", err: "ends with a separator"},
	{in: "quay.io/x y", err: `holds ' '`},
	{in: "quay.io/x:", err: "empty tag"},
	{in: "quay.io/x:.t", err: "must start with"},
	{in: "quay.io/x:t+", err: `holds '+'`},
	{in: "quay.io/x:a:b", err: `holds ':'`},
	{in: "quay.io/x:" + strings.Repeat("t", 129), err: "more than 128"},
	{in: "quay.io/" + strings.Repeat("a", 256), err: "more than 255"},
	{in: "docker.io/" + strings.Repeat("a", 248), err: "more than 255"},
	{in: "quay.io/x@", err: "want algorithm:hex"},
	{in: "quay.io/x@sha256", err: "want algorithm:hex"},
	{in: "quay.io/x@sha256:" + hex64[:63], err: "wants 64 hex digits, got 63"},
	{in: "quay.io/x@sha256:" + strings.ToUpper(hex64), err: "lowercase hex"},
	{in: "quay.io/x@SHA256:" + hex64, err: "invalid format"},
	{in: "quay.io/x@md5:" + hex64, err: `unsupported algorithm "md5"`},
	{in: "quay.io/x@sha256:" + hex64 + "@sha256:" + hex64, err: "wants 64 hex digits"},
	{in: "quay.io/x:t@sha256:" + hex64 + "/y", err: "holds ':'"},
	{in: "quay_io/x", err: `"quay_io" is no host`},
	{in: "a_b.c/d", err: `domain component "a_b" holds '_'`},
	{in: "-quay.io/x", err: "must start and end"},
	{in: "quay..io/x", err: "empty domain component"},
	{in: "quay.io:/x", err: "not a port"},
	{in: "quay.io:80a/x", err: "not a port"},
	{in: "[::1/x", err: "unclosed"},
	{in: "[]/x", err: "registry host"},
	{in: "[::g]/x", err: "not an IPv6 address"},
	{in: "[::1]x/y", err: "not a port"},
	{in: "quay.io/ü", err: "holds"},
	{in: "Ä/x", err: "registry host"},
}

func TestParseImageRefAgainstLibrary(t *testing.T) {
	t.Parallel()
	for _, c := range imageRefCases {
		accepted := checkAgainstLibrary(t, c.in)
		if accepted != (c.err == "") {
			t.Errorf("parseImageRef(%q) accepted=%v, want %v", c.in, accepted, c.err == "")
			continue
		}
		if _, err := parseImageRef(c.in); c.err != "" && !strings.Contains(err.Error(), c.err) {
			t.Errorf("parseImageRef(%q) error %q, want it to contain %q", c.in, err, c.err)
		}
	}
}

// TestParseTargetNamesBadImage checks that a refused image reference's
// error names the reference and says what is wrong.
func TestParseTargetNamesBadImage(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"quay.io/x:.t", "ostree-unverified-registry:quay.io/X", "quay.io/x@sha256:ab"} {
		_, err := (Policy{}).ParseTarget(in)
		image := strings.TrimPrefix(in, TransportUnverifiedRegistry)
		if err == nil || !strings.Contains(err.Error(), `image reference "`+image+`": `) {
			t.Errorf("ParseTarget(%q) error %v, want it to name %q", in, err, image)
		}
	}
}

func TestIsChecksum(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		hex64: true, hex64[:63]: false, hex64 + "0": false, strings.ToUpper(hex64): false,
		"": false, hex64[:63] + "g": false, strings.Repeat("f", 64): true,
	} {
		if isChecksum(s) != want {
			t.Errorf("isChecksum(%q) = %v, want %v", s, !want, want)
		}
	}
}

// FuzzParseImageAgainstReference checks on arbitrary input that
// parseImageRef accepts exactly what the distribution library accepts
// (ParseNormalizedNamed plus the registry-host rule) and reads the same
// host, path, tag and digest. Seeds: the table above.
func FuzzParseImageAgainstReference(f *testing.F) {
	for _, c := range imageRefCases {
		f.Add(c.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if checkAgainstLibrary(t, s) {
			r, _ := parseImageRef(s)
			back := r.Domain + "/" + r.Path
			if r.Tag != "" {
				back += ":" + r.Tag
			}
			if r.Digest != "" {
				back += "@" + r.Digest
			}
			if back != s {
				t.Fatalf("parseImageRef(%q) = %+v, which spells %q", s, r, back)
			}
		}
	})
}

// TestParseImageRefAgainstLibraryExhaustive compares the two parsers on
// every sequence of up to four pieces of the grammar (88,741 references),
// so that each rule meets each other rule without waiting for the fuzzer.
// Up to five pieces (1.5 million references, 12 s) agreed as well when
// this was written.
func TestParseImageRefAgainstLibraryExhaustive(t *testing.T) {
	t.Parallel()
	pieces := []string{"a", "A", "0", ".", "_", "-", "/", ":", "@", "[", "]",
		"x.io", "localhost", "docker.io", "index.docker.io", "sha256:" + hex64, "sha384:" + hex96}
	const n = 4
	var walk func(prefix string, depth int)
	walk = func(prefix string, depth int) {
		checkAgainstLibrary(t, prefix)
		if depth == n {
			return
		}
		for _, p := range pieces {
			walk(prefix+p, depth+1)
		}
	}
	walk("", 0)
}
