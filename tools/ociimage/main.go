// Command ociimage writes a FROM-scratch, single-layer OCI image as an OCI
// image-layout tarball (oci-layout, index.json, blobs/sha256/...), with the
// Go standard library only: no daemon, no base image, no registry.
//
// The output is reproducible: the layer's entries are sorted, owned by 0:0
// with the mtime of SOURCE_DATE_EPOCH (0 when unset), gzip carries no name
// or time, and every JSON document is marshalled from fixed structs. The same
// inputs and Go toolchain give the same image digest.
//
//	ociimage -tag nodeward:v1.2.3 -out nodeward.oci.tar \
//	    -file bin/static/nodeward:/nodeward:0755 -symlink /usr/bin/gather:/nodeward \
//	    -entrypoint /nodeward
//
// `make image` (nodeward) and test/node (the pause image) use it. It prints
// the manifest digest (the image's pinned digest) on stdout.
//
// -userland LIST adds executables of the build host, each with the shared
// libraries it needs (ELF DT_NEEDED, transitively) and its loader: `make
// must-gather-image` adds what `oc adm must-gather`'s scripts call
// (must-gather.userland). As a distribution does, the image then names in
// /usr/share/doc/nodeward/debian-packages.txt the Debian package, version
// and source package each of those files comes from (dpkg-query), and
// carries each package's /usr/share/doc/<package>/copyright: bash,
// coreutils, rsync, tar and others are GPL. The same installed package
// versions give the same digest.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	if err := run(context.Background(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

// fileFlags collects -file SRC:DST[:MODE].
type fileFlags []File

func (f *fileFlags) String() string { return fmt.Sprint(*f) }

func (f *fileFlags) Set(v string) error {
	parts := strings.Split(v, ":")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
		return fmt.Errorf("want SRC:DST[:MODE], got %q", v)
	}
	mode := int64(0o644)
	if len(parts) == 3 {
		m, err := strconv.ParseInt(parts[2], 8, 32)
		if err != nil {
			return fmt.Errorf("mode of %q: %w", v, err)
		}
		mode = m
	}
	data, err := os.ReadFile(parts[0])
	if err != nil {
		return fmt.Errorf("read %s: %w", parts[0], err)
	}
	*f = append(*f, File{Path: parts[1], Mode: mode, Data: data})
	return nil
}

// symlinkFlags collects -symlink DST:TARGET.
type symlinkFlags []File

func (f *symlinkFlags) String() string { return fmt.Sprint(*f) }

func (f *symlinkFlags) Set(v string) error {
	dst, target, ok := strings.Cut(v, ":")
	if !ok || dst == "" || target == "" {
		return fmt.Errorf("want DST:TARGET, got %q", v)
	}
	*f = append(*f, File{Path: dst, Link: target})
	return nil
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("ociimage", flag.ContinueOnError)
	var files fileFlags
	fs.Var(&files, "file", "SRC:DST[:MODE] (octal, default 0644): a file of the image; repeatable")
	var links symlinkFlags
	fs.Var(&links, "symlink", "DST:TARGET: a symbolic link of the image; repeatable")
	tag := fs.String("tag", "", "image reference name, NAME:TAG (the index's org.opencontainers.image.ref.name)")
	out := fs.String("out", "", "output OCI image-layout tarball")
	entrypoint := fs.String("entrypoint", "", "the image's entrypoint, a path inside the image")
	passwd := fs.Bool("passwd", true, "add a minimal /etc/passwd and /etc/group (root and nobody)")
	userland := fs.String("userland", "", "a userland list (`elf HOST IMAGE`, `link IMAGE TARGET` rows): host executables with their libraries, loader, Debian packages list and copyrights")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *tag == "" || *out == "" || *entrypoint == "" || len(files) == 0 {
		return fmt.Errorf("-tag, -out, -entrypoint and at least one -file are required")
	}
	epoch, err := sourceDateEpoch()
	if err != nil {
		return err
	}
	spec := Spec{Tag: *tag, Entrypoint: []string{*entrypoint}, Files: append(files, links...), Created: epoch}
	if *passwd {
		spec.Files = append(spec.Files, MinimalUsers()...)
	}
	if *userland != "" {
		more, err := userlandFiles(ctx, *userland)
		if err != nil {
			return err
		}
		spec.Files = append(spec.Files, more...)
	}
	img, err := Build(spec)
	if err != nil {
		return err
	}
	if err := img.WriteLayoutTar(*out); err != nil {
		return err
	}
	fmt.Println(img.Digest)
	return nil
}

// userlandFiles are the files of a userland list: its executables, their
// libraries and loader, the packages they come from with their copyrights,
// and its links.
func userlandFiles(ctx context.Context, list string) ([]File, error) {
	u, err := ReadUserland(list)
	if err != nil {
		return nil, err
	}
	resolved, err := ResolveELF(u.Executables)
	if err != nil {
		return nil, err
	}
	files, err := hostFiles(resolved)
	if err != nil {
		return nil, err
	}
	docs, err := Provenance(ctx, resolved)
	if err != nil {
		return nil, err
	}
	return append(append(files, docs...), u.Links...), nil
}

// sourceDateEpoch is $SOURCE_DATE_EPOCH (reproducible-builds.org), else the
// Unix epoch.
func sourceDateEpoch() (time.Time, error) {
	v := os.Getenv("SOURCE_DATE_EPOCH")
	if v == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	s, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: %w", v, err)
	}
	return time.Unix(s, 0).UTC(), nil
}
