package machineconfig

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// Account databases of the host, in lookup order. RHCOS and Fedora CoreOS
// keep system users and groups in /usr/lib (nss-altfiles) and local ones,
// like core, in /etc. They are read as files because the agent's own
// /etc/passwd (os/user) is not the host's.
var (
	passwdFiles = []string{"/etc/passwd", "/usr/lib/passwd"}
	groupFiles  = []string{"/etc/group", "/usr/lib/group"}
)

// errNoAccount is a user or group name the host does not know.
var errNoAccount = errors.New("no such user or group on the host")

// account is one line of a passwd or group file.
type account struct {
	id, gid int
	home    string
}

// lookupUser finds a user by name in the host's passwd files.
func lookupUser(root, name string) (account, error) {
	return lookup(root, passwdFiles, name, func(f []string) (account, error) {
		if len(f) < 6 {
			return account{}, errors.New("short passwd line")
		}
		uid, err1 := strconv.Atoi(f[2])
		gid, err2 := strconv.Atoi(f[3])
		if err := errors.Join(err1, err2); err != nil {
			return account{}, err
		}
		return account{id: uid, gid: gid, home: f[5]}, nil
	})
}

// lookupGroup finds a group by name in the host's group files.
func lookupGroup(root, name string) (account, error) {
	return lookup(root, groupFiles, name, func(f []string) (account, error) {
		if len(f) < 3 {
			return account{}, errors.New("short group line")
		}
		gid, err := strconv.Atoi(f[2])
		return account{id: gid, gid: gid}, err
	})
}

func lookup(root string, files []string, name string, parse func([]string) (account, error)) (account, error) {
	for _, hostPath := range files {
		p, err := resolve(root, hostPath)
		if err != nil {
			return account{}, fmt.Errorf("looking up %q in %s: %w", name, hostPath, err)
		}
		a, found, err := scanAccounts(p, name, parse)
		if err != nil {
			return account{}, fmt.Errorf("looking up %q in %s: %w", name, hostPath, err)
		}
		if found {
			return a, nil
		}
	}
	return account{}, fmt.Errorf("looking up %q: %w", name, errNoAccount)
}

func scanAccounts(p, name string, parse func([]string) (account, error)) (account, bool, error) {
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return account{}, false, nil
	}
	if err != nil {
		return account{}, false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if fields[0] != name {
			continue
		}
		a, err := parse(fields)
		return a, err == nil, err
	}
	return account{}, false, sc.Err()
}

// resolveOwner returns the uid and gid for a file's owner fields: an ID
// wins, then a name, and root otherwise, as in Ignition and the MCD.
func resolveOwner(root string, user, group Owner) (int, int, error) {
	uid, gid := 0, 0
	switch {
	case user.ID != nil:
		uid = *user.ID
	case user.Name != "":
		a, err := lookupUser(root, user.Name)
		if err != nil {
			return 0, 0, err
		}
		uid = a.id
	}
	switch {
	case group.ID != nil:
		gid = *group.ID
	case group.Name != "":
		a, err := lookupGroup(root, group.Name)
		if err != nil {
			return 0, 0, err
		}
		gid = a.id
	}
	return uid, gid, nil
}
