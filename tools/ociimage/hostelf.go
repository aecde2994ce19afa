package main

import (
	"bufio"
	"debug/elf"
	"fmt"
	"os"
	"path"
	"strings"
)

// HostFile is a file of the image copied from the build host: an ELF
// executable or one of the shared libraries or the loader it needs.
type HostFile struct {
	Host  string // where it was read on the host
	Image string // absolute inside the image
}

// Userland is what a userland list (-userland FILE) asks for: host
// executables with what they need at run time, and symbolic links.
type Userland struct {
	Executables []HostFile
	Links       []File
}

// ReadUserland parses a userland list, one row a line ('#' starts a
// comment):
//
//	elf  HOST-PATH IMAGE-PATH   an executable, with its libraries and loader
//	link IMAGE-PATH TARGET      a symbolic link
//
// The rows are data so that the Makefile and the tests use one list.
func ReadUserland(file string) (Userland, error) {
	f, err := os.Open(file)
	if err != nil {
		return Userland{}, fmt.Errorf("read the userland list: %w", err)
	}
	defer f.Close()
	var u Userland
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		switch {
		case len(fields) == 0:
		case len(fields) == 3 && fields[0] == "elf":
			u.Executables = append(u.Executables, HostFile{Host: fields[1], Image: fields[2]})
		case len(fields) == 3 && fields[0] == "link":
			u.Links = append(u.Links, File{Path: fields[1], Link: fields[2]})
		default:
			return Userland{}, fmt.Errorf("%s:%d: want `elf HOST IMAGE` or `link IMAGE TARGET`, got %q", file, n, sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		return Userland{}, fmt.Errorf("read the userland list: %w", err)
	}
	return u, nil
}

// multiarchTriples is Debian's library directory per ELF machine: the
// dynamic loader of Debian's glibc searches /lib/<triple> and
// /usr/lib/<triple> with no ld.so.cache, as in the image.
var multiarchTriples = map[elf.Machine]string{
	elf.EM_X86_64:  "x86_64-linux-gnu",
	elf.EM_AARCH64: "aarch64-linux-gnu",
	elf.EM_PPC64:   "powerpc64le-linux-gnu",
	elf.EM_S390:    "s390x-linux-gnu",
}

// ResolveELF returns the executables and, once each, every shared library
// they need (DT_NEEDED, transitively) and their loader (PT_INTERP), in the
// order found. Libraries go to /lib/<triple>/<soname> in the image whatever
// symbolic link led to them on the host; the loader to its PT_INTERP path.
func ResolveELF(executables []HostFile) ([]HostFile, error) {
	r := resolver{seen: map[string]bool{}}
	for _, x := range executables {
		if err := r.add(x); err != nil {
			return nil, err
		}
	}
	return r.files, nil
}

type resolver struct {
	files []HostFile
	seen  map[string]bool // image paths
}

func (r *resolver) add(x HostFile) error {
	if r.seen[x.Image] {
		return nil
	}
	r.seen[x.Image] = true
	r.files = append(r.files, x)
	f, err := elf.Open(x.Host)
	if err != nil {
		return fmt.Errorf("read the ELF %s: %w", x.Host, err)
	}
	defer f.Close()
	triple, ok := multiarchTriples[f.Machine]
	if !ok {
		return fmt.Errorf("%s: no library directory known for machine %v", x.Host, f.Machine)
	}
	if interp := interpreter(f); interp != "" {
		if err := r.add(HostFile{Host: interp, Image: interp}); err != nil {
			return err
		}
	}
	needed, err := f.ImportedLibraries()
	if err != nil {
		return fmt.Errorf("read the DT_NEEDED of %s: %w", x.Host, err)
	}
	for _, lib := range needed {
		host, err := findLibrary(lib, triple)
		if err != nil {
			return fmt.Errorf("%s needs %s: %w", x.Host, lib, err)
		}
		if err := r.add(HostFile{Host: host, Image: path.Join("/lib", triple, lib)}); err != nil {
			return err
		}
	}
	return nil
}

// interpreter is the PT_INTERP path of f, "" for a static executable or a
// library.
func interpreter(f *elf.File) string {
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		data := make([]byte, p.Filesz)
		if _, err := p.ReadAt(data, 0); err != nil {
			return ""
		}
		return strings.TrimRight(string(data), "\x00")
	}
	return ""
}

// findLibrary looks for lib where the host's loader would: the multiarch
// directories first.
func findLibrary(lib, triple string) (string, error) {
	for _, dir := range []string{"/lib/" + triple, "/usr/lib/" + triple, "/lib64", "/usr/lib64", "/lib", "/usr/lib"} {
		p := path.Join(dir, lib)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("not found in the host's library directories")
}

// hostFiles reads the resolved files into image files, executables and
// libraries alike 0755 as their packages install them.
func hostFiles(resolved []HostFile) ([]File, error) {
	var files []File
	for _, h := range resolved {
		data, err := os.ReadFile(h.Host)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", h.Host, err)
		}
		files = append(files, File{Path: h.Image, Mode: 0o755, Data: data})
	}
	return files, nil
}
