package machineconfig

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// maxSymlinks bounds symlink resolution, like the kernel's ELOOP limit.
const maxSymlinks = 40

// errEscapes is a path that would leave the host root.
var errEscapes = errors.New("resolves outside the host root")

// resolve maps hostPath, an absolute path as the host sees it, to the
// on-disk path under root. Symlinks in the parent directories are followed
// as the host would follow them: an absolute target is taken relative to
// root, and a relative target that climbs above root is refused instead of
// being clamped. The last component is never followed: files and links are
// replaced by rename, which replaces a symlink rather than its target.
//
// The check and the later use are separate system calls; nodeward is the
// only writer of these paths during an update, and it runs as root on the
// host it protects, so a race against a local attacker who can already
// rewrite /etc is out of scope.
func resolve(root, hostPath string) (string, error) {
	if err := checkHostPath(hostPath); err != nil {
		return "", err
	}
	dir, err := resolveDir(root, filepath.Dir(hostPath))
	if err != nil {
		return "", err
	}
	return filepath.Join(root, dir, filepath.Base(hostPath)), nil
}

// resolveDir returns dir with every symlink followed, relative to root
// (so "/" is root itself).
func resolveDir(root, dir string) (string, error) {
	resolved := "/"
	pending := splitPath(dir)
	links := 0
	for len(pending) > 0 {
		name := pending[0]
		pending = pending[1:]
		switch name {
		case ".":
			continue
		case "..":
			if resolved == "/" {
				return "", errEscapes
			}
			resolved = filepath.Dir(resolved)
			continue
		}
		next := filepath.Join(resolved, name)
		target, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			// Not a symlink, or not there yet (it will be created as a
			// directory): take the name as it is.
			if !errors.Is(err, fs.ErrNotExist) && !isNotLink(err) {
				return "", fmt.Errorf("reading %s: %w", next, err)
			}
			resolved = next
			continue
		}
		if links++; links > maxSymlinks {
			return "", fmt.Errorf("%s: too many levels of symbolic links", dir)
		}
		if filepath.IsAbs(target) {
			resolved = "/"
		}
		pending = append(splitPath(target), pending...)
	}
	return resolved, nil
}

func splitPath(p string) []string {
	var out []string
	for _, s := range strings.Split(p, "/") {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// isNotLink tells Readlink's EINVAL (a file that is not a symlink) from
// real errors.
func isNotLink(err error) bool {
	var pe *fs.PathError
	return errors.As(err, &pe) && errors.Is(pe.Err, errInvalid)
}
