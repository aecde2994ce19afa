package osupdate

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/distribution/reference"
)

// Transports understood in an ostree container image reference, as rpm-ostree
// spells them. A reference without one gets Policy.DefaultTransport.
const (
	TransportUnverifiedRegistry = "ostree-unverified-registry:"
	TransportUnverifiedImage    = "ostree-unverified-image:docker://"
	TransportImageSigned        = "ostree-image-signed:docker://"
)

var checksumPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Policy says how a plain image reference (no transport) becomes an ostree
// image reference.
type Policy struct {
	// DefaultTransport prefixes plain image references; one of the
	// Transport* constants. Empty means TransportImageSigned: a plain
	// reference is only trusted when signed.
	DefaultTransport string
}

// Target is what a node should boot: an ostree container image reference or
// an OSTree commit checksum, plus kernel arguments that must be present.
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
	// KernelArgs must all be on the booted kernel command line.
	KernelArgs []string
}

// String is the canonical form of the target, comparable for equality.
func (t Target) String() string {
	s := t.ImageRef
	if t.Checksum != "" {
		s = t.Checksum
	}
	if len(t.KernelArgs) > 0 {
		s += " " + strings.Join(t.KernelArgs, " ")
	}
	return s
}

// IsImage tells an image target from a checksum target.
func (t Target) IsImage() bool { return t.ImageRef != "" }

// ParseTarget validates s and returns its canonical Target. s is an image
// reference (with or without an ostree transport) or a 64-hex OSTree
// checksum, optionally followed by space-separated kernel arguments (so that
// an opaque pool target string can carry them). extraKernelArgs are appended.
func (p Policy) ParseTarget(s string, extraKernelArgs ...string) (Target, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return Target{}, fmt.Errorf("target %q: empty", s)
	}
	ref := fields[0]
	var t Target
	if checksumPattern.MatchString(ref) {
		t.Checksum = ref
	} else {
		if err := p.parseImage(ref, &t); err != nil {
			return Target{}, fmt.Errorf("target %q: %w", s, err)
		}
	}
	for _, arg := range append(fields[1:], extraKernelArgs...) {
		if err := validateKernelArg(arg); err != nil {
			return Target{}, fmt.Errorf("target %q: %w", s, err)
		}
		if !slices.Contains(t.KernelArgs, arg) {
			t.KernelArgs = append(t.KernelArgs, arg)
		}
	}
	slices.Sort(t.KernelArgs)
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
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return fmt.Errorf("image reference %q: %w", image, err)
	}
	// A short name ("fedora") would silently mean docker.io: refuse it.
	if !strings.HasPrefix(image, reference.Domain(named)+"/") {
		return fmt.Errorf("image reference %q: must name its registry host (registry/repository[:tag][@digest])", image)
	}
	if d, ok := named.(reference.Digested); ok {
		t.Digest = d.Digest().String()
	}
	t.Image = image
	t.ImageRef = transport + image
	return nil
}

// validateKernelArg accepts "key" or "key=value" with no whitespace or
// control characters; rpm-ostree kargs takes them one by one.
func validateKernelArg(arg string) error {
	key, _, _ := strings.Cut(arg, "=")
	if key == "" {
		return fmt.Errorf("kernel argument %q: empty key", arg)
	}
	for _, r := range arg {
		if r <= ' ' || r == 0x7f || r == '"' {
			return fmt.Errorf("kernel argument %q: contains whitespace, a quote or a control character", arg)
		}
	}
	return nil
}
