package osupdate

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Paths of the pull secret for image targets, on the host (under
// Config.HostRoot when the agent runs in a container).
const (
	// OstreeAuthFile is where rpm-ostree (its container image importer)
	// looks for registry credentials; /run, so it is gone at reboot.
	OstreeAuthFile = "/run/ostree/auth.json"
	// KubeletPullSecret is the kubelet's (the cluster's) pull secret, the
	// usual Config.AuthFile.
	KubeletPullSecret = "/var/lib/kubelet/config.json"
)

// linkAuthFile makes OstreeAuthFile a symbolic link to Config.AuthFile
// before a rebase, as OpenShift's machine-config-daemon links it to the
// kubelet's pull secret, so that rpm-ostree pulls with the cluster's
// credentials. Both paths are the host's: the link is made under HostRoot
// and points at the host path, which rpm-ostree, running on the host,
// resolves. It does nothing when AuthFile is empty or does not exist (a
// public registry needs no secret), or when the link is already there. An
// existing OstreeAuthFile that is anything else — a file, a link elsewhere
// — belongs to someone else: it is left alone with a warning, and the
// rebase uses it.
func (u *Updater) linkAuthFile() error {
	secret := u.cfg.AuthFile
	if secret == "" {
		return nil
	}
	if _, err := os.Stat(u.hostPath(secret)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			u.cfg.Log.Info("no pull secret, pulling without it", "authFile", secret)
			return nil
		}
		return fmt.Errorf("pull secret: %w", err)
	}
	auth := u.hostPath(OstreeAuthFile)
	for attempt := 0; ; attempt++ {
		st, err := os.Lstat(auth)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// 0o755: rpm-ostree reads it as root; nothing secret in the
			// directory itself (the MCD creates it 0o544).
			if err := os.MkdirAll(filepath.Dir(auth), 0o755); err != nil {
				return fmt.Errorf("linking %s to the pull secret: %w", OstreeAuthFile, err)
			}
			err := os.Symlink(secret, auth)
			if errors.Is(err, fs.ErrExist) && attempt == 0 {
				continue // made meanwhile: look at what it is
			}
			if err != nil {
				return fmt.Errorf("linking %s to the pull secret: %w", OstreeAuthFile, err)
			}
			u.cfg.Log.Info("linked rpm-ostree's auth file to the pull secret", "authFile", OstreeAuthFile, "target", secret)
			return nil
		case err != nil:
			return fmt.Errorf("pull secret: %w", err)
		case st.Mode()&fs.ModeSymlink != 0:
			if dest, err := os.Readlink(auth); err == nil && filepath.Clean(dest) == filepath.Clean(secret) {
				return nil
			}
		}
		dest, _ := os.Readlink(auth)
		u.cfg.Log.Warn("rpm-ostree's auth file exists and is not a link to the pull secret; left alone, the pull uses it",
			"authFile", OstreeAuthFile, "mode", st.Mode().String(), "linkTarget", dest, "pullSecret", secret)
		return nil
	}
}

// hostPath is path of the host as this process sees it.
func (u *Updater) hostPath(path string) string {
	if u.cfg.HostRoot == "" {
		return path
	}
	return filepath.Join(u.cfg.HostRoot, path)
}
