package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReproducibleLayout builds the same image twice through the command
// and checks that the tarballs are byte-identical and form a valid OCI
// image layout: media types, digests and sizes of every blob, diff_ids of
// the uncompressed layer, the ref.name annotation and the layer's files.
func TestReproducibleLayout(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "app")
	if err := os.WriteFile(bin, []byte("#!not really a binary\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	var outs [][]byte
	for i, name := range []string{"a.tar", "b.tar"} {
		out := filepath.Join(dir, name)
		if err := run(context.Background(), []string{"-tag", "nodeward:v0.0.1", "-out", out, "-file", bin + ":/nodeward:0755", "-entrypoint", "/nodeward",
			"-symlink", "/usr/bin/gather:/nodeward"}); err != nil {
			t.Fatalf("build %d: %v", i, err)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, data)
	}
	if !bytes.Equal(outs[0], outs[1]) {
		t.Fatal("two builds of the same inputs differ")
	}
	files := readTar(t, outs[0])
	if got := string(files["oci-layout"]); got != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout = %q", got)
	}
	blob := func(d Descriptor, mediaType string) []byte {
		t.Helper()
		if d.MediaType != mediaType {
			t.Errorf("descriptor %s: media type %q, want %q", d.Digest, d.MediaType, mediaType)
		}
		data, ok := files["blobs/sha256/"+strings.TrimPrefix(d.Digest, "sha256:")]
		if !ok {
			t.Fatalf("blob %s missing", d.Digest)
		}
		if digest(data) != d.Digest || int64(len(data)) != d.Size {
			t.Fatalf("blob %s: digest %s size %d, descriptor size %d", d.Digest, digest(data), len(data), d.Size)
		}
		return data
	}
	var idx Index
	mustJSON(t, files["index.json"], &idx)
	if idx.SchemaVersion != 2 || idx.MediaType != MediaTypeIndex || len(idx.Manifests) != 1 {
		t.Fatalf("index = %+v", idx)
	}
	if ref := idx.Manifests[0].Annotations[AnnotationRefName]; ref != "nodeward:v0.0.1" {
		t.Errorf("ref.name = %q", ref)
	}
	var man Manifest
	mustJSON(t, blob(idx.Manifests[0], MediaTypeManifest), &man)
	var cfg Config
	mustJSON(t, blob(man.Config, MediaTypeConfig), &cfg)
	if len(man.Layers) != 1 {
		t.Fatalf("%d layers, want 1", len(man.Layers))
	}
	zr, err := gzip.NewReader(bytes.NewReader(blob(man.Layers[0], MediaTypeLayer)))
	if err != nil {
		t.Fatal(err)
	}
	layer, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.DiffIDs[0] != digest(layer) {
		t.Errorf("diff_ids %v, uncompressed layer %s", cfg.RootFS.DiffIDs, digest(layer))
	}
	if cfg.Created != "2023-11-14T22:13:20Z" || strings.Join(cfg.Config.Entrypoint, " ") != "/nodeward" || cfg.OS != "linux" {
		t.Errorf("config = %+v", cfg)
	}
	tr := tar.NewReader(bytes.NewReader(layer))
	var names []string
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Uid != 0 || hdr.Gid != 0 || hdr.ModTime.Unix() != 1700000000 {
			t.Errorf("%s: uid %d gid %d mtime %v", hdr.Name, hdr.Uid, hdr.Gid, hdr.ModTime)
		}
		if hdr.Name == "nodeward" && hdr.Mode != 0o755 {
			t.Errorf("/nodeward mode %o", hdr.Mode)
		}
		if hdr.Name == "usr/bin/gather" && (hdr.Typeflag != tar.TypeSymlink || hdr.Linkname != "/nodeward" || hdr.Size != 0) {
			t.Errorf("/usr/bin/gather: type %c, link %q, size %d; want a symbolic link to /nodeward", hdr.Typeflag, hdr.Linkname, hdr.Size)
		}
		names = append(names, hdr.Name)
	}
	if got := strings.Join(names, " "); got != "etc/ etc/group etc/passwd nodeward usr/ usr/bin/ usr/bin/gather" {
		t.Errorf("layer entries: %s", got)
	}
}

func TestBuildRefusesDuplicates(t *testing.T) {
	_, err := Build(Spec{Tag: "x:y", Entrypoint: []string{"/a"}, Files: []File{{Path: "/a"}, {Path: "a"}}})
	if err == nil {
		t.Fatal("a file given twice was accepted")
	}
}

func readTar(t *testing.T, data []byte) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[hdr.Name] = b
	}
}

func mustJSON(t *testing.T, data []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("unmarshal %s: %v", data, err)
	}
}
