package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"debug/elf"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeward/nodeward/test/testenv"
)

// TestUserlandImage builds an image from a userland list of this Debian
// host's /bin/sleep and /bin/sed twice and checks that the builds are
// byte-identical and that the layer holds the executables, every library
// their DT_NEEDED names (sed's libselinux and libpcre2 transitively
// through libselinux), the loader at its PT_INTERP path, the list of
// packages with their versions and each package's copyright file.
func TestUserlandImage(t *testing.T) {
	testenv.RequireBinary(t, "dpkg-query")
	dir := t.TempDir()
	list := filepath.Join(dir, "userland")
	rows := "# a comment\nelf /bin/sleep /bin/sleep\nelf /bin/sed /bin/sed   # trailing comment\nlink /bin/sh sed\n"
	if err := os.WriteFile(list, []byte(rows), 0o644); err != nil {
		t.Fatal(err)
	}
	var outs [][]byte
	for _, name := range []string{"a.tar", "b.tar"} {
		out := filepath.Join(dir, name)
		if err := run(context.Background(), []string{"-tag", "x:y", "-out", out, "-file", list + ":/list", "-entrypoint", "/bin/sleep", "-userland", list}); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, data)
	}
	if !bytes.Equal(outs[0], outs[1]) {
		t.Fatal("two builds of the same userland differ")
	}
	layer := layerFiles(t, outs[0])
	f, err := elf.Open("/bin/sed")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	triple := multiarchTriples[f.Machine]
	want := []string{"bin/sleep", "bin/sed", "bin/sh", strings.TrimPrefix(interpreter(f), "/"),
		"lib/" + triple + "/libc.so.6", "lib/" + triple + "/libselinux.so.1", "lib/" + triple + "/libpcre2-8.so.0",
		"usr/share/doc/coreutils/copyright", "usr/share/doc/sed/copyright", "usr/share/doc/libc6/copyright"}
	for _, name := range want {
		if _, ok := layer[name]; !ok {
			t.Errorf("layer has no %s", name)
		}
	}
	packages := string(layer[strings.TrimPrefix(PackagesListPath, "/")])
	for _, line := range []string{"coreutils 9", "sed ", "libc6:"} {
		if !strings.Contains(packages, "\n"+line) {
			t.Errorf("package list has no line starting %q:\n%s", line, packages)
		}
	}
	if !strings.Contains(packages, ": /bin/sed\n") {
		t.Errorf("package list does not name /bin/sed as sed's:\n%s", packages)
	}
}

func TestReadUserlandRefusesUnknownRows(t *testing.T) {
	list := filepath.Join(t.TempDir(), "userland")
	if err := os.WriteFile(list, []byte("copy /bin/sleep /bin/sleep\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadUserland(list); err == nil || !strings.Contains(err.Error(), ":1:") {
		t.Fatalf("an unknown row: err = %v, want one naming line 1", err)
	}
}

// layerFiles is the single layer's files by name, from an OCI layout
// tarball.
func layerFiles(t *testing.T, layout []byte) map[string][]byte {
	t.Helper()
	files := readTar(t, layout)
	var idx Index
	mustJSON(t, files["index.json"], &idx)
	var man Manifest
	mustJSON(t, files["blobs/sha256/"+strings.TrimPrefix(idx.Manifests[0].Digest, "sha256:")], &man)
	gz := files["blobs/sha256/"+strings.TrimPrefix(man.Layers[0].Digest, "sha256:")]
	tarData, err := gunzip(gz)
	if err != nil {
		t.Fatal(err)
	}
	return readTar(t, tarData)
}

func gunzip(data []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(zr)
}
