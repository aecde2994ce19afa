package osupdate

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
)

// Transports understood in an ostree container image reference, as rpm-ostree
// spells them. A reference without one gets Policy.DefaultTransport.
const (
	TransportUnverifiedRegistry = "ostree-unverified-registry:"
	TransportUnverifiedImage    = "ostree-unverified-image:docker://"
	TransportImageSigned        = "ostree-image-signed:docker://"
)

// Policy says how a plain image reference (no transport) becomes an ostree
// image reference.
type Policy struct {
	// DefaultTransport prefixes plain image references; one of the
	// Transport* constants. Empty means TransportImageSigned: a plain
	// reference is only trusted when signed.
	DefaultTransport string
}

// Target is what a node should boot: an ostree container image reference or
// an OSTree commit checksum, plus kernel arguments that must be present and
// kernel arguments that must be absent.
type Target struct {
	// ImageRef is the full ostree image reference with its transport, e.g.
	// "ostree-unverified-registry:quay.io/fedora/fedora-coreos:stable".
	ImageRef string
	// Image is ImageRef without its transport (a docker reference).
	Image string
	// Digest is set when the image reference pins a digest.
	Digest string
	// Checksum is set for an OSTree commit target instead of an image.
	Checksum string
	// KernelArgs must all be on the booted kernel command line. Sorted,
	// deduplicated, spelled as given (quotes kept: `foo="a b"`).
	KernelArgs []string
	// DeleteKernelArgs must all be absent from the booted kernel command
	// line (written `!arg` in the target string). Sorted, deduplicated,
	// spelled as given, without the `!`.
	DeleteKernelArgs []string
}

// DeletePrefix marks a kernel argument of a target string that must be
// absent: `IMAGE nosmt !mitigations=off`.
const DeletePrefix = "!"

// String is the canonical form of the target, comparable for equality:
// the reference or checksum, the required kernel arguments, then the
// deleted ones with their `!`, each group sorted. ParseTarget(t.String())
// gives t back.
func (t Target) String() string {
	s := t.ImageRef
	if t.Checksum != "" {
		s = t.Checksum
	}
	for _, a := range t.KernelArgs {
		s += " " + a
	}
	for _, a := range t.DeleteKernelArgs {
		s += " " + DeletePrefix + a
	}
	return s
}

// IsImage tells an image target from a checksum target.
func (t Target) IsImage() bool { return t.ImageRef != "" }

// ParseTarget validates s and returns its canonical Target. s is an image
// reference (with or without an ostree transport) or a 64-hex OSTree
// checksum, optionally followed by kernel arguments (so that an opaque pool
// target string can carry them): `key`, `key=value` or `key="quoted value"`
// must be present, `!key…` must be absent. The fields are split as the
// kernel splits its command line (SplitKernelArgs): whitespace separates
// them except inside double quotes. extraKernelArgs, one argument each
// (`!` allowed), are added.
func (p Policy) ParseTarget(s string, extraKernelArgs ...string) (Target, error) {
	fields, err := SplitKernelArgs(s)
	if err != nil {
		return Target{}, fmt.Errorf("target %q: %w", s, err)
	}
	if len(fields) == 0 {
		return Target{}, fmt.Errorf("target %q: empty", s)
	}
	ref := fields[0]
	var t Target
	if isChecksum(ref) {
		t.Checksum = ref
	} else {
		if err := p.parseImage(ref, &t); err != nil {
			return Target{}, fmt.Errorf("target %q: %w", s, err)
		}
	}
	for _, field := range append(fields[1:], extraKernelArgs...) {
		arg, deleted := strings.CutPrefix(field, DeletePrefix)
		if err := validateKernelArg(arg); err != nil {
			return Target{}, fmt.Errorf("target %q: %w", s, err)
		}
		list := &t.KernelArgs
		if deleted {
			list = &t.DeleteKernelArgs
		}
		if !slices.Contains(*list, arg) {
			*list = append(*list, arg)
		}
	}
	// Compared by what the kernel sees: foo="a" and !foo=a contradict.
	for _, d := range t.DeleteKernelArgs {
		for _, a := range t.KernelArgs {
			if sameKernelArg(a, d) {
				return Target{}, fmt.Errorf("target %q: kernel argument %q is both required and deleted (%s%s)", s, a, DeletePrefix, d)
			}
		}
	}
	slices.Sort(t.KernelArgs)
	slices.Sort(t.DeleteKernelArgs)
	return t, nil
}

func (p Policy) parseImage(ref string, t *Target) error {
	transport := ""
	image := ref
	for _, tr := range []string{TransportUnverifiedRegistry, TransportUnverifiedImage, TransportImageSigned} {
		if strings.HasPrefix(ref, tr) {
			transport, image = tr, strings.TrimPrefix(ref, tr)
			break
		}
	}
	if transport == "" {
		if strings.HasPrefix(ref, "ostree-") || strings.Contains(ref, "://") {
			return fmt.Errorf("image reference %q: unsupported transport (want %s, %s or %s, or a plain image reference)",
				ref, TransportUnverifiedRegistry, TransportUnverifiedImage, TransportImageSigned)
		}
		transport = p.DefaultTransport
		if transport == "" {
			transport = TransportImageSigned
		}
		switch transport {
		case TransportUnverifiedRegistry, TransportUnverifiedImage, TransportImageSigned:
		default:
			return fmt.Errorf("policy default transport %q: unsupported", transport)
		}
	}
	// Validated by hand (imageref.go): the distribution library's regexps
	// would stay resident in the agent.
	r, err := parseImageRef(image)
	if err != nil {
		return fmt.Errorf("image reference %q: %w", image, err)
	}
	t.Digest = r.Digest
	t.Image = image
	t.ImageRef = transport + image
	return nil
}

// validateKernelArg accepts one kernel argument: "key", "key=value" or
// "key=value" with double-quoted parts ("foo=\"a b\"", "cgroup_no_v1=\"all\""),
// quotes balanced, spaces only inside quotes, no other whitespace, no control
// characters, a non-empty key without quotes. The error names the argument.
// rpm-ostree kargs takes such an argument as one (libostree splits on
// spaces outside quotes, as the kernel does).
func validateKernelArg(arg string) error {
	key, _, _ := strings.Cut(arg, "=")
	if key == "" {
		return fmt.Errorf("kernel argument %q: empty key", arg)
	}
	if strings.Contains(key, `"`) {
		return fmt.Errorf("kernel argument %q: quote in the key (quote the value: key=\"value\")", arg)
	}
	quoted := false
	for _, r := range arg {
		switch {
		case r == '"':
			quoted = !quoted
		case unicode.IsControl(r):
			return fmt.Errorf("kernel argument %q: contains a control character", arg)
		case r == ' ' && !quoted:
			return fmt.Errorf("kernel argument %q: contains whitespace outside double quotes", arg)
		case unicode.IsSpace(r) && r != ' ':
			return fmt.Errorf("kernel argument %q: contains whitespace other than a space", arg)
		}
	}
	if quoted {
		return fmt.Errorf("kernel argument %q: unbalanced double quote", arg)
	}
	return nil
}

// SplitKernelArgs splits s into arguments as the kernel splits its command
// line (lib/cmdline.c next_arg) and libostree its kernel arguments:
// whitespace separates arguments except inside double quotes, and the
// quotes stay in the argument. An unbalanced quote is an error.
func SplitKernelArgs(s string) ([]string, error) {
	args, quoted := splitKernelArgs(s)
	if quoted {
		return args, fmt.Errorf("unbalanced double quote in %q", args[len(args)-1])
	}
	return args, nil
}

// splitKernelArgs is SplitKernelArgs that keeps an unbalanced remainder as
// the last argument (as the kernel and libostree do with what a bootloader
// wrote) and reports it.
func splitKernelArgs(s string) (args []string, unbalanced bool) {
	start, quoted := -1, false
	for i, r := range s {
		switch {
		case r == '"':
			quoted = !quoted
		case unicode.IsSpace(r) && !quoted:
			if start >= 0 {
				args = append(args, s[start:i])
				start = -1
			}
			continue
		}
		if start < 0 {
			start = i
		}
	}
	if start >= 0 {
		args = append(args, s[start:])
	}
	return args, quoted
}

// kernelMeaning is an argument as the kernel reads it, quotes removed:
// GRUB rewrites foo="a b" as "foo=a b" and cgroup_no_v1="all" as
// cgroup_no_v1=all on the command line it passes, and the kernel strips
// the quotes of either spelling.
func kernelMeaning(arg string) string { return strings.ReplaceAll(arg, `"`, "") }

// sameKernelArg tells whether a and b mean the same to the kernel.
func sameKernelArg(a, b string) bool { return kernelMeaning(a) == kernelMeaning(b) }
