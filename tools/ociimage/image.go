package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
)

// Media types of the OCI image spec v1.
const (
	MediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	MediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
	// AnnotationRefName names the image in an image layout's index.json;
	// `ctr images import` and `skopeo copy oci-archive:` read it.
	AnnotationRefName = "org.opencontainers.image.ref.name"
)

// File is one regular file of the image, or a symbolic link when Link is
// set.
type File struct {
	Path string // absolute inside the image
	Mode int64
	Data []byte
	// Link, when set, makes the file a symbolic link to it (Data unused):
	// one binary under a second name, as /usr/bin/gather for `oc adm
	// must-gather`.
	Link string
}

// Spec is what the image holds.
type Spec struct {
	Tag        string
	Entrypoint []string
	Files      []File
	Created    time.Time
}

// Descriptor is an OCI content descriptor.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *Platform         `json:"platform,omitempty"`
}

// Platform of the image: the build's (GOOS/GOARCH), as the binary inside.
type Platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

// Manifest is an OCI image manifest.
type Manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        Descriptor   `json:"config"`
	Layers        []Descriptor `json:"layers"`
}

// Index is an OCI image index (the layout's index.json).
type Index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []Descriptor `json:"manifests"`
}

// Config is the OCI image configuration.
type Config struct {
	Created      string      `json:"created"`
	Architecture string      `json:"architecture"`
	OS           string      `json:"os"`
	Config       ImageConfig `json:"config"`
	RootFS       RootFS      `json:"rootfs"`
}

// ImageConfig is the part of Config a runtime executes.
type ImageConfig struct {
	Entrypoint []string `json:"Entrypoint"`
	Env        []string `json:"Env"`
	WorkingDir string   `json:"WorkingDir"`
}

// RootFS lists the uncompressed layers' digests.
type RootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

// Image is a built image: its blobs by digest and its index.
type Image struct {
	Digest string // the manifest's digest: the image's pinned digest
	Index  []byte
	Blobs  map[string][]byte // "sha256:..." → content
}

// Build makes the layer, config, manifest and index of spec.
func Build(spec Spec) (*Image, error) {
	layerTar, err := layerTar(spec.Files, spec.Created)
	if err != nil {
		return nil, err
	}
	layerGz, err := gzipBytes(layerTar)
	if err != nil {
		return nil, err
	}
	platform := Platform{Architecture: runtime.GOARCH, OS: runtime.GOOS}
	cfg := Config{
		Created:      spec.Created.UTC().Format(time.RFC3339),
		Architecture: platform.Architecture,
		OS:           platform.OS,
		Config: ImageConfig{
			Entrypoint: spec.Entrypoint,
			Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			WorkingDir: "/",
		},
		RootFS: RootFS{Type: "layers", DiffIDs: []string{digest(layerTar)}},
	}
	img := &Image{Blobs: map[string][]byte{}}
	cfgDesc, err := img.addJSON(MediaTypeConfig, cfg)
	if err != nil {
		return nil, err
	}
	manifest := Manifest{
		SchemaVersion: 2,
		MediaType:     MediaTypeManifest,
		Config:        cfgDesc,
		Layers:        []Descriptor{img.add(MediaTypeLayer, layerGz)},
	}
	manDesc, err := img.addJSON(MediaTypeManifest, manifest)
	if err != nil {
		return nil, err
	}
	img.Digest = manDesc.Digest
	manDesc.Annotations = map[string]string{AnnotationRefName: spec.Tag}
	manDesc.Platform = &platform
	if img.Index, err = json.Marshal(Index{SchemaVersion: 2, MediaType: MediaTypeIndex, Manifests: []Descriptor{manDesc}}); err != nil {
		return nil, fmt.Errorf("marshal the index: %w", err)
	}
	return img, nil
}

func (img *Image) add(mediaType string, data []byte) Descriptor {
	d := digest(data)
	img.Blobs[d] = data
	return Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(data))}
}

func (img *Image) addJSON(mediaType string, v any) (Descriptor, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return Descriptor{}, fmt.Errorf("marshal %s: %w", mediaType, err)
	}
	return img.add(mediaType, data), nil
}

// WriteLayoutTar writes the image as an OCI image-layout tarball at out,
// through a temporary file renamed into place.
func (img *Image) WriteLayoutTar(out string) error {
	entries := []tarEntry{
		{name: "oci-layout", data: []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{name: "index.json", data: img.Index},
	}
	for d, data := range img.Blobs {
		entries = append(entries, tarEntry{name: "blobs/sha256/" + strings.TrimPrefix(d, "sha256:"), data: data})
	}
	data, err := writeTar(entries, time.Unix(0, 0))
	if err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(out), "."+filepath.Base(out)+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	return nil
}

// MinimalUsers is /etc/passwd and /etc/group naming root and nobody, so that
// a runtime resolving the container's uid (HOME, supplementary groups) and
// os/user find them; the image has no shell and no other account.
func MinimalUsers() []File {
	return []File{
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/:/sbin/nologin\nnobody:x:65534:65534:nobody:/:/sbin/nologin\n")},
		{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnobody:x:65534:\n")},
	}
}

type tarEntry struct {
	name string // relative, no leading slash; a trailing slash is a directory
	mode int64
	data []byte
	link string // a symbolic link's target
}

// layerTar is the uncompressed layer: every file and its parent
// directories, sorted, owned by 0:0, with mtime created.
func layerTar(files []File, created time.Time) ([]byte, error) {
	seen := map[string]bool{}
	var entries []tarEntry
	for _, f := range files {
		name := strings.TrimPrefix(path.Clean("/"+f.Path), "/")
		if name == "" || seen[name] {
			return nil, fmt.Errorf("file %q: empty or given twice", f.Path)
		}
		seen[name] = true
		for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
			if !seen[dir+"/"] {
				seen[dir+"/"] = true
				entries = append(entries, tarEntry{name: dir + "/", mode: 0o755})
			}
		}
		entries = append(entries, tarEntry{name: name, mode: f.Mode, data: f.Data, link: f.Link})
	}
	return writeTar(entries, created)
}

// writeTar writes entries sorted by name as USTAR (every name here is short),
// owned by 0:0 with no user or group names, all with the same mtime.
func writeTar(entries []tarEntry, mtime time.Time) ([]byte, error) {
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{
			Name: e.name, Mode: e.mode, ModTime: mtime, Format: tar.FormatUSTAR,
		}
		if hdr.Mode == 0 {
			hdr.Mode = 0o644
		}
		switch {
		case strings.HasSuffix(e.name, "/"):
			hdr.Typeflag = tar.TypeDir
		case e.link != "":
			hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, e.link, 0o777
			e.data = nil
		default:
			hdr.Typeflag = tar.TypeReg
			hdr.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("tar header %s: %w", e.name, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, fmt.Errorf("tar %s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("close tar: %w", err)
	}
	return buf.Bytes(), nil
}

// gzipBytes compresses with no name, comment or time in the header, so the
// output depends on the input (and the Go release's compress/flate) alone.
func gzipBytes(data []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(data); err != nil {
		return nil, fmt.Errorf("gzip the layer: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("gzip the layer: %w", err)
	}
	return buf.Bytes(), nil
}

func digest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}
