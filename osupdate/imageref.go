package osupdate

import (
	"errors"
	"fmt"
	"strings"
)

// This file validates docker image references by hand, without package
// regexp, for the agent's resident memory: github.com/distribution/reference
// compiles its grammar into regexps at init (414 KB allocated at start-up,
// measured with GODEBUG=inittrace=1), and so do
// github.com/containers/image/v5/docker/reference (264 KB, through
// rpmostree-client-go) and github.com/opencontainers/go-digest (92 KB); all
// of it stays live for the whole process while nodeward parses a handful of
// references. imageref_test.go checks this parser against
// reference.ParseNormalizedNamed on a table and under a fuzzer.

// imageRef is a docker image reference that names its registry host:
// domain/path[:tag][@digest].
type imageRef struct {
	Domain string // registry host, with its port if any
	Path   string // repository path, as written
	Tag    string // empty when absent
	Digest string // algorithm:encoded, empty when absent
}

// Limits of the distribution reference grammar.
const (
	maxRepositoryPath = 255 // bytes of the path, "library/" included for docker.io
	maxTag            = 128
)

// dockerHubLegacy is docker.io's old host name, which the distribution
// library rewrites to docker.io.
const dockerHubLegacy = "index.docker.io"

// parseImageRef validates s as the distribution library's
// ParseNormalizedNamed does (the grammar of the distribution reference
// spec: https://github.com/distribution/reference), and in addition
// requires s to start with its registry host: a short name ("fedora",
// "library/fedora") would silently mean docker.io. The error says what is
// wrong; the caller names s.
func parseImageRef(s string) (imageRef, error) {
	if s == "" {
		return imageRef{}, errors.New("empty")
	}
	host, rest, ok := strings.Cut(s, "/")
	// The distribution library takes the first component for a host when
	// it is localhost or has a dot, a colon or an upper-case letter; any
	// other first component is a docker.io namespace.
	if !ok {
		return imageRef{}, errors.New("must name its registry host (registry/repository[:tag][@digest])")
	}
	if host != "localhost" && !strings.ContainsAny(host, ".:") && !hasUpper(host) {
		return imageRef{}, fmt.Errorf("must name its registry host (registry/repository[:tag][@digest]): %q is no host (not localhost, no dot, no port), so the reference would mean docker.io", host)
	}
	if host == dockerHubLegacy {
		return imageRef{}, fmt.Errorf("registry host %q is docker.io's legacy name: write docker.io", host)
	}
	if err := validateHost(host); err != nil {
		return imageRef{}, err
	}
	r := imageRef{Domain: host}

	// The repository path runs to the first ':' or '@' after its last '/'.
	// A tag or a digest never holds a '/', so the last '/' ends the path's
	// directories.
	last := strings.LastIndexByte(rest, '/') + 1
	end := len(rest)
	if i := strings.IndexAny(rest[last:], ":@"); i >= 0 {
		end = last + i
	}
	r.Path = rest[:end]
	suffix := rest[end:]
	hasTag, hasDigest := strings.HasPrefix(suffix, ":"), false
	if hasTag {
		r.Tag, r.Digest, hasDigest = strings.Cut(suffix[1:], "@")
	} else if hasDigest = strings.HasPrefix(suffix, "@"); hasDigest {
		r.Digest = suffix[1:]
	}

	if err := validatePath(r.Path); err != nil {
		return imageRef{}, err
	}
	n := len(r.Path)
	if host == "docker.io" && !strings.Contains(r.Path, "/") {
		n += len("library/") // docker.io/fedora is docker.io/library/fedora
	}
	if n > maxRepositoryPath {
		return imageRef{}, fmt.Errorf("repository path is %d bytes long, more than %d", n, maxRepositoryPath)
	}
	if hasTag {
		if err := validateTag(r.Tag); err != nil {
			return imageRef{}, err
		}
	}
	if hasDigest {
		if err := validateDigest(r.Digest); err != nil {
			return imageRef{}, err
		}
	}
	return r, nil
}

// validateHost accepts a host name, or an IPv6 address in brackets, with
// an optional port: domain components of letters (either case), digits
// and inner hyphens separated by dots; a bracketed address of hex digits
// and colons; a port of digits. The distribution library checks no more
// than that (no port range, no IPv6 syntax), and neither does this.
func validateHost(h string) error {
	name, port := h, ""
	if strings.HasPrefix(h, "[") {
		i := strings.IndexByte(h, ']')
		if i < 0 {
			return fmt.Errorf("registry host %q: unclosed '['", h)
		}
		name, port = h[:i+1], h[i+1:]
		addr := name[1 : len(name)-1]
		if addr == "" || strings.Trim(addr, "0123456789abcdefABCDEF:") != "" {
			return fmt.Errorf("registry host %q: %q is not an IPv6 address (hex digits and colons)", h, name)
		}
	} else {
		if i := strings.IndexByte(h, ':'); i >= 0 {
			name, port = h[:i], h[i:]
		}
		for _, label := range strings.Split(name, ".") {
			if label == "" {
				return fmt.Errorf("registry host %q: empty domain component", h)
			}
			if !isAlnum(label[0]) || !isAlnum(label[len(label)-1]) {
				return fmt.Errorf("registry host %q: domain component %q must start and end with a letter or digit", h, label)
			}
			for i := 0; i < len(label); i++ {
				if !isAlnum(label[i]) && label[i] != '-' {
					return fmt.Errorf("registry host %q: domain component %q holds %q (letters, digits and '-' only)", h, label, label[i])
				}
			}
		}
	}
	if port == "" {
		return nil
	}
	if port[0] != ':' || len(port) == 1 || strings.Trim(port[1:], "0123456789") != "" {
		return fmt.Errorf("registry host %q: %q is not a port (':' and digits)", h, port)
	}
	return nil
}

// validatePath accepts a repository path: components separated by '/',
// each of lower-case letters and digits, separated inside by one '.', one
// '_', two '_' or any number of '-'.
func validatePath(p string) error {
	if hasUpper(p) {
		return fmt.Errorf("repository path %q must be lowercase", p)
	}
	for _, c := range strings.Split(p, "/") {
		if err := validatePathComponent(c); err != nil {
			return fmt.Errorf("repository path %q: %w", p, err)
		}
	}
	return nil
}

func validatePathComponent(c string) error {
	if c == "" {
		return errors.New("empty component")
	}
	i := 0
	for i < len(c) {
		j := i
		for j < len(c) && isLowerAlnum(c[j]) {
			j++
		}
		if j == i {
			// c[i] is not a letter or digit: a separator where one must
			// not be (first, last, doubled), or a character outside the
			// grammar.
			if isSeparator(c[i]) {
				return fmt.Errorf("component %q: %q must stand between letters or digits", c, c[i])
			}
			return fmt.Errorf("component %q holds %q (lowercase letters, digits, '.', '_', '-')", c, c[i])
		}
		if j == len(c) {
			return nil
		}
		k := j
		for k < len(c) && isSeparator(c[k]) {
			k++
		}
		if k == j {
			return fmt.Errorf("component %q holds %q (lowercase letters, digits, '.', '_', '-')", c, c[j])
		}
		if sep := c[j:k]; sep != "." && sep != "_" && sep != "__" && strings.Trim(sep, "-") != "" {
			return fmt.Errorf("component %q: separator %q (one '.', one or two '_', or '-'s)", c, sep)
		}
		if k == len(c) {
			return fmt.Errorf("component %q ends with a separator", c)
		}
		i = k
	}
	return nil
}

// validateTag accepts a tag: a letter, digit or '_', then up to 127
// letters, digits, '_', '.' or '-'.
func validateTag(t string) error {
	if t == "" {
		return errors.New("empty tag after ':'")
	}
	if len(t) > maxTag {
		return fmt.Errorf("tag %q is %d bytes long, more than %d", t, len(t), maxTag)
	}
	if !isWord(t[0]) {
		return fmt.Errorf("tag %q must start with a letter, digit or '_'", t)
	}
	for i := 1; i < len(t); i++ {
		if !isWord(t[i]) && t[i] != '.' && t[i] != '-' {
			return fmt.Errorf("tag %q holds %q (letters, digits, '_', '.', '-')", t, t[i])
		}
	}
	return nil
}

// digestHexLen is the length of the lowercase hex encoding of each digest
// algorithm go-digest validates; known is false for any other.
func digestHexLen(alg string) (n int, known bool) {
	switch alg {
	case "sha256":
		return 64, true
	case "sha384":
		return 96, true
	case "sha512":
		return 128, true
	}
	return 0, false
}

// validateDigest accepts ALGORITHM:ENCODED as go-digest validates it for
// an image reference: sha256, sha384 or sha512, each with its number of
// lowercase hex digits. Another algorithm in the digest grammar
// ([a-z0-9]+([+._-][a-z0-9]+)*, encoded [a-zA-Z0-9=_-]+) is unsupported.
func validateDigest(d string) error {
	alg, enc, ok := strings.Cut(d, ":")
	if !ok || alg == "" || enc == "" {
		return fmt.Errorf("digest %q: want algorithm:hex", d)
	}
	n, known := digestHexLen(alg)
	if !known {
		if !validDigestAlgorithm(alg) || strings.Trim(enc, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789=_-") != "" {
			return fmt.Errorf("digest %q: invalid format (want algorithm:hex)", d)
		}
		return fmt.Errorf("digest %q: unsupported algorithm %q (want sha256, sha384 or sha512)", d, alg)
	}
	if len(enc) != n {
		return fmt.Errorf("digest %q: %s wants %d hex digits, got %d", d, alg, n, len(enc))
	}
	if !isLowerHex(enc) {
		return fmt.Errorf("digest %q: %s wants lowercase hex digits", d, alg)
	}
	return nil
}

// validDigestAlgorithm matches [a-z0-9]+([+._-][a-z0-9]+)*.
func validDigestAlgorithm(a string) bool {
	prevSep := true
	for i := 0; i < len(a); i++ {
		switch c := a[i]; {
		case isLowerAlnum(c):
			prevSep = false
		case strings.IndexByte("+._-", c) >= 0 && !prevSep:
			prevSep = true
		default:
			return false
		}
	}
	return !prevSep
}

// isChecksum tells an OSTree commit checksum: 64 lowercase hex digits.
func isChecksum(s string) bool { return len(s) == 64 && isLowerHex(s) }

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return true
		}
	}
	return false
}

func isLowerAlnum(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' }
func isAlnum(c byte) bool      { return isLowerAlnum(c) || 'A' <= c && c <= 'Z' }
func isWord(c byte) bool       { return isAlnum(c) || c == '_' }
func isSeparator(c byte) bool  { return c == '.' || c == '_' || c == '-' }
