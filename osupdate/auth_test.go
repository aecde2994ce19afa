package osupdate

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeward/nodeward/hostexec"
	"github.com/nodeward/nodeward/test/rpmostree"
)

// TestLinkAuthFile: /run/ostree/auth.json under the host root becomes a
// link to the host's pull secret only when the secret exists and the auth
// file is absent; the link already there is kept; anything else is left
// alone with a warning.
func TestLinkAuthFile(t *testing.T) {
	t.Parallel()
	const otherLink = "/etc/ostree/auth.json"
	cases := []struct {
		name     string
		noSecret bool
		authFile string // Config.AuthFile; default KubeletPullSecret
		existing func(t *testing.T, auth string)
		wantLink string // "" : no link, the existing file kept
		wantWarn bool
	}{
		{name: "absent: linked", wantLink: KubeletPullSecret},
		{name: "absent, no /run/ostree: linked", existing: func(t *testing.T, auth string) { must(t, os.RemoveAll(filepath.Dir(auth))) }, wantLink: KubeletPullSecret},
		{name: "already the link", existing: func(t *testing.T, auth string) { must(t, os.Symlink(KubeletPullSecret, auth)) }, wantLink: KubeletPullSecret},
		{name: "link elsewhere kept", existing: func(t *testing.T, auth string) { must(t, os.Symlink(otherLink, auth)) }, wantLink: otherLink, wantWarn: true},
		{name: "file kept", existing: func(t *testing.T, auth string) { must(t, os.WriteFile(auth, []byte(`{"auths":{}}`), 0o600)) }, wantWarn: true},
		{name: "no pull secret: nothing", noSecret: true},
		{name: "disabled", authFile: "-"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			auth := filepath.Join(root, OstreeAuthFile)
			must(t, os.MkdirAll(filepath.Dir(auth), 0o755))
			if !c.noSecret {
				must(t, os.MkdirAll(filepath.Join(root, filepath.Dir(KubeletPullSecret)), 0o755))
				must(t, os.WriteFile(filepath.Join(root, KubeletPullSecret), []byte(`{"auths":{"quay.io":{}}}`), 0o600))
			}
			if c.existing != nil {
				c.existing(t, auth)
			}
			before, _ := os.ReadFile(auth)
			var log bytes.Buffer
			cfg := Config{HostRoot: root, AuthFile: KubeletPullSecret, StatePath: filepath.Join(t.TempDir(), "s.json"),
				Log: slog.New(slog.NewTextHandler(&log, nil))}
			if c.authFile == "-" {
				cfg.AuthFile = ""
			}
			u, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := u.linkAuthFile(); err != nil {
				t.Fatal(err)
			}
			dest, err := os.Readlink(auth)
			switch {
			case c.wantLink != "" && (err != nil || dest != c.wantLink):
				t.Errorf("auth file links to %q (%v), want %q", dest, err, c.wantLink)
			case c.wantLink == "" && err == nil:
				t.Errorf("auth file is a link to %q, want none", dest)
			case c.wantLink == "" && before != nil:
				if after, _ := os.ReadFile(auth); !bytes.Equal(after, before) {
					t.Errorf("existing auth file changed: %q, was %q", after, before)
				}
			case c.wantLink == "" && before == nil:
				if _, err := os.Lstat(auth); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("auth file made: %v", err)
				}
			}
			if warned := strings.Contains(log.String(), "level=WARN"); warned != c.wantWarn {
				t.Errorf("warning logged = %v, want %v: %s", warned, c.wantWarn, log.String())
			}
		})
	}
	if _, err := New(Config{AuthFile: "var/lib/kubelet/config.json"}); err == nil || !strings.Contains(err.Error(), "authFile") {
		t.Errorf("relative authFile: %v, want an error naming authFile", err)
	}
	for _, bad := range []string{"a b", `x="y`, "!", "a !a"} {
		if _, err := New(Config{KernelArgs: strings.Split(bad, "|")}); err == nil || !strings.Contains(err.Error(), "kernelArgs") {
			t.Errorf("kernelArgs %q: %v, want an error naming kernelArgs", bad, err)
		}
	}
	if _, err := New(Config{KernelArgs: []string{"a", "!a"}}); err == nil || !strings.Contains(err.Error(), "both required and deleted") {
		t.Errorf("kernelArgs a and !a: %v", err)
	}
}

// TestStageLinksAuthFile stages an image against the double with the host
// root holding the pull secret (files under the root, the double run
// directly): the link is made before the rebase, even one that fails, and
// never for a checksum target.
func TestStageLinksAuthFile(t *testing.T) {
	t.Parallel()
	bin, err := rpmostree.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sum, newSum := strings.Repeat("0a", 32), strings.Repeat("1b", 32)
	images := map[string]rpmostree.Image{"quay.io/x/os:2": {Checksum: newSum, Digest: "sha256:" + strings.Repeat("c", 64)}}
	setup := func(t *testing.T) (*Updater, *rpmostree.Double, string) {
		d := rpmostree.New(t, bin, rpmostree.Deployment{Checksum: sum, ImageRef: "ostree-unverified-registry:quay.io/x/os:1"}, images)
		root := t.TempDir()
		must(t, os.MkdirAll(filepath.Join(root, filepath.Dir(KubeletPullSecret)), 0o755))
		must(t, os.WriteFile(filepath.Join(root, KubeletPullSecret), []byte("{}"), 0o600))
		u, err := New(Config{HostRoot: root, AuthFile: KubeletPullSecret, Env: d.Env(), CmdlinePath: d.CmdlinePath(),
			StatePath: filepath.Join(t.TempDir(), "s.json"), Journal: rpmostree.Journal{Dir: d.Dir},
			Policy:  Policy{DefaultTransport: TransportUnverifiedRegistry},
			Backoff: Backoff{Initial: time.Millisecond, Attempts: 1}, Log: slog.New(slog.NewTextHandler(t.Output(), nil))})
		if err != nil {
			t.Fatal(err)
		}
		u.run = newRunner(bin, d.Env(), hostexec.Host{}) // files under the root, the double outside it
		return u, d, filepath.Join(root, OstreeAuthFile)
	}
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	u, d, auth := setup(t)
	d.Inject(t, "rebase", rpmostree.Failure{Mode: "exit", Times: 1, Stderr: "error: reading manifest: unauthorized"})
	if err := u.Stage(c, "quay.io/x/os:2"); err == nil || !strings.Contains(err.Error(), "unauthorized") {
		t.Fatalf("Stage with a failing rebase: %v", err)
	}
	if dest, err := os.Readlink(auth); err != nil || dest != KubeletPullSecret {
		t.Fatalf("auth file after the rebase: %q, %v; want a link to %s", dest, err, KubeletPullSecret)
	}
	if err := u.Stage(c, "quay.io/x/os:2"); err != nil {
		t.Fatal(err)
	}

	u, _, auth = setup(t)
	if err := u.Stage(c, newSum); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(auth); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a checksum target touched the auth file: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
