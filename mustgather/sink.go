package mustgather

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// Sink receives the gathered files, each whole, under a relative slash
// path. Every file reaches it through the text redaction (writer.file).
type Sink interface {
	WriteFile(name string, data []byte) error
	Close() error
}

// tarSink writes a gzipped tarball: the default, one file to attach to a
// support case.
type tarSink struct {
	file   *os.File
	gz     *gzip.Writer
	tw     *tar.Writer
	prefix string
	mtime  time.Time
}

// NewTarSink creates out (refusing to overwrite one that exists) and
// writes every file under prefix/ in it.
func NewTarSink(out, prefix string, mtime time.Time) (Sink, error) {
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create the must-gather tarball: %w", err)
	}
	gz := gzip.NewWriter(f)
	return &tarSink{file: f, gz: gz, tw: tar.NewWriter(gz), prefix: prefix, mtime: mtime}, nil
}

func (s *tarSink) WriteFile(name string, data []byte) error {
	hdr := &tar.Header{Name: path.Join(s.prefix, name), Mode: 0o600, Size: int64(len(data)),
		ModTime: s.mtime, Typeflag: tar.TypeReg}
	if err := s.tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("write %s into the tarball: %w", name, err)
	}
	if _, err := s.tw.Write(data); err != nil {
		return fmt.Errorf("write %s into the tarball: %w", name, err)
	}
	return nil
}

func (s *tarSink) Close() error {
	errTar := s.tw.Close()
	errGz := s.gz.Close()
	errSync := s.file.Sync()
	errFile := s.file.Close()
	for _, err := range []error{errTar, errGz, errSync, errFile} {
		if err != nil {
			return fmt.Errorf("finish the must-gather tarball %s: %w", s.file.Name(), err)
		}
	}
	return nil
}

// dirSink writes the files unpacked under a directory: the `oc adm
// must-gather` convention, which copies /must-gather out of the pod.
type dirSink struct{ dir string }

// NewDirSink writes under dir, creating it.
func NewDirSink(dir string) (Sink, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create the must-gather directory: %w", err)
	}
	return dirSink{dir: dir}, nil
}

func (s dirSink) WriteFile(name string, data []byte) error {
	clean := path.Clean("/" + name)
	if strings.Contains(clean, "..") {
		return fmt.Errorf("refusing the file name %q", name)
	}
	p := filepath.Join(s.dir, filepath.FromSlash(clean))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("create the directory of %s: %w", name, err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

func (dirSink) Close() error { return nil }
