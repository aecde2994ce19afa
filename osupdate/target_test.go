package osupdate

import (
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
}
