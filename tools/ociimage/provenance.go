package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"sort"
	"strings"
)

// PackagesListPath is where the image lists the Debian packages its host
// files come from, as distributions do for the binaries they ship.
const PackagesListPath = "/usr/share/doc/nodeward/debian-packages.txt"

// Provenance names, for the host files an image ships, their Debian
// packages (name, version, source package and version) and carries each
// package's copyright file: bash, coreutils, tar, rsync and the others are
// GPL, shipped as Debian built them.
func Provenance(ctx context.Context, resolved []HostFile) ([]File, error) {
	owners := map[string][]string{} // package → image paths
	for _, h := range resolved {
		pkg, err := owningPackage(ctx, h.Host)
		if err != nil {
			return nil, err
		}
		owners[pkg] = append(owners[pkg], h.Image)
	}
	var pkgs []string
	for pkg := range owners {
		pkgs = append(pkgs, pkg)
	}
	sort.Strings(pkgs)
	var list strings.Builder
	list.WriteString("# The files of this image not built from nodeward's source, from Debian's packages:\n" +
		"# package version (source package source version): files. Each package's\n" +
		"# copyright and licence: /usr/share/doc/<package>/copyright.\n")
	var files []File
	for _, pkg := range pkgs {
		version, err := dpkgQuery(ctx, "-W", "-f=${Version} (${source:Package} ${source:Version})", pkg)
		if err != nil {
			return nil, err
		}
		sort.Strings(owners[pkg])
		fmt.Fprintf(&list, "%s %s: %s\n", pkg, version, strings.Join(owners[pkg], " "))
		name, _, _ := strings.Cut(pkg, ":") // libc6:amd64's documentation is libc6's
		copyright := path.Join("/usr/share/doc", name, "copyright")
		data, err := os.ReadFile(copyright)
		if err != nil {
			return nil, fmt.Errorf("the copyright of %s: %w", pkg, err)
		}
		files = append(files, File{Path: copyright, Mode: 0o644, Data: data})
	}
	return append(files, File{Path: PackagesListPath, Mode: 0o644, Data: []byte(list.String())}), nil
}

// owningPackage asks dpkg which package installed host. With merged /usr,
// dpkg knows /bin/bash where the file is also /usr/bin/bash, and
// /lib/x86_64-linux-gnu/libc.so.6 where it is also under /usr/lib: both
// spellings are tried.
func owningPackage(ctx context.Context, host string) (string, error) {
	candidates := []string{host}
	if rest, ok := strings.CutPrefix(host, "/usr"); ok {
		candidates = append(candidates, rest)
	} else {
		candidates = append(candidates, "/usr"+host)
	}
	for _, c := range candidates {
		out, err := dpkgQuery(ctx, "-S", c)
		if err != nil {
			continue
		}
		pkg, _, ok := strings.Cut(strings.SplitN(out, "\n", 2)[0], ": ")
		if ok && !strings.Contains(pkg, ",") {
			return pkg, nil
		}
	}
	return "", fmt.Errorf("no Debian package owns %s (tried %s)", host, strings.Join(candidates, ", "))
}

func dpkgQuery(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "dpkg-query", args...).Output()
	if err != nil {
		return "", fmt.Errorf("dpkg-query %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}
