// Package footprint gives back the memory the agent needed only to start.
//
// Most of an idle agent's resident memory is not its heap but pages of its
// own executable: a Go program's package initializers (the Kubernetes type
// machinery, protobuf and gRPC registries, compiled regular expressions)
// run once and fault in text, rodata and pclntab, and the kernel maps the
// 64 KiB around every fault from the page cache (fault-around).
//
// Release, once start-up is over, advises random access on the
// executable's read-only mappings (MADV_RANDOM), unmaps them (madvise
// MADV_DONTNEED) and drops the executable's pages that no process maps any
// more from the page cache (fadvise POSIX_FADV_DONTNEED). The pages the
// agent still uses fault back in on their next use; in rodata and the
// function table each is read alone (with its neighbours gone from the
// cache, fault-around maps nothing else, and random access turns readahead
// off), in text with the 128 KiB around it (Linux reads around a fault in
// an executable mapping whatever the advice). The pages it ran only to
// start are neither mapped nor cached again, so the node has them back at
// once (a container's memory usage, which counts page cache, falls as
// well).
// Measured beside node_exporter (docs/benchmarks.md, "Agent RSS beside
// node_exporter"): unmapping alone took the file-backed RSS from 19.6 to
// 13.3 MiB, of which the steady state's 200-odd faults each mapped 64 KiB;
// the eviction leaves the pages those faults need. Release also returns
// the heap's free pages (runtime/debug.FreeOSMemory): start-up's garbage is
// the largest the heap holds at idle. Writable mappings (.data, .bss, whose
// private copies hold the program's state) are never touched.
package footprint

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Resident is a process's resident memory in bytes, as /proc/PID/status
// reports it: all of it, anonymous (heap, stacks) and file-backed (mapped
// files, above all the executable).
type Resident struct{ Total, Anon, File uint64 }

// Report says what Release did.
type Report struct {
	Before, After Resident
	// Mappings and Bytes are the executable's read-only mappings
	// released and their size.
	Mappings int
	Bytes    uint64
}

// Release unmaps the running executable's read-only mappings and returns
// the heap's free pages to the kernel. Call it once, when start-up is over:
// every page still in use costs a minor fault on its next use.
func Release() (Report, error) {
	var r Report
	before, err := ReadResident("/proc/self/status")
	if err != nil {
		return r, err
	}
	r.Before = before
	maps, err := os.Open("/proc/self/maps")
	if err != nil {
		return r, fmt.Errorf("read the process's mappings: %w", err)
	}
	defer maps.Close()
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return r, fmt.Errorf("find the executable: %w", err)
	}
	ranges, err := ExecutableReadOnly(maps, exe)
	if err != nil {
		return r, err
	}
	if len(ranges) == 0 {
		return r, fmt.Errorf("no read-only mapping of the executable %s in /proc/self/maps", exe)
	}
	debug.FreeOSMemory()
	// The link itself opens the file even when its path no longer does
	// (an executable replaced on disk).
	if err := evict("/proc/self/exe", ranges); err != nil {
		return r, err
	}
	for _, m := range ranges {
		r.Mappings++
		r.Bytes += m.End - m.Start
	}
	after, err := ReadResident("/proc/self/status")
	if err != nil {
		return r, err
	}
	r.After = after
	return r, nil
}

// evict unmaps ranges, read-only mappings of the file at path, drops the
// file's pages that no process maps from the page cache, and advises
// random access on the ranges. A later fault in a mapping that is not
// executable (rodata, the function table) then reads the one page it needs
// and maps it alone: the kernel's fault-around maps only neighbours already
// cached, and readahead is off for random access. Linux reads around a
// fault in an executable mapping whatever the advice (6.18: 128 KiB, the
// file's readahead window), so text faults still bring their neighbours
// back (measured: 66 faults re-cached 9.4 MiB in the agent's first 0.2 s
// after the release). Without the eviction each fault mapped the 64 KiB
// around it from the cache, and those neighbours were most of the
// file-backed RSS (docs/benchmarks.md, "Agent RSS beside node_exporter").
func evict(path string, ranges []Mapping) error {
	// Random access first: the agent's other threads run during these
	// calls, and a fault with the default advice reads ahead around it.
	for _, m := range ranges {
		if err := madvise(m, unix.MADV_RANDOM); err != nil {
			return fmt.Errorf("advise random access to %s at %#x-%#x: %w", path, m.Start, m.End, err)
		}
	}
	for _, m := range ranges {
		if err := madvise(m, unix.MADV_DONTNEED); err != nil {
			return fmt.Errorf("unmap the pages of %s at %#x-%#x: %w", path, m.Start, m.End, err)
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open %s to drop its pages from the page cache: %w", path, err)
	}
	defer f.Close()
	// Pages another process maps, or dirty ones, stay: the kernel never
	// drops those for this advice.
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("drop the pages of %s from the page cache: %w", path, err)
	}
	return nil
}

func madvise(m Mapping, advice int) error {
	if _, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(m.Start), uintptr(m.End-m.Start), uintptr(advice)); errno != 0 {
		return errno
	}
	return nil
}

// Mapping is one address range of /proc/PID/maps.
type Mapping struct{ Start, End uint64 }

// ExecutableReadOnly returns the mappings of /proc/PID/maps (read from r)
// that map the file at path exe and are not writable: the executable's
// text, rodata and headers. The path, not the device and inode, names the
// file: on overlayfs (a container's root) the maps show the inode of the
// layer beneath while stat(2) shows the overlay's, but both the maps and
// /proc/PID/exe show the path the process sees.
func ExecutableReadOnly(r io.Reader, exe string) ([]Mapping, error) {
	var out []Mapping
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for line := 1; sc.Scan(); line++ {
		// start-end perms offset major:minor inode [path, which may hold spaces]
		text := sc.Text()
		f := strings.Fields(text)
		if len(f) < 5 {
			return nil, fmt.Errorf("mappings line %d %q: want at least 5 fields", line, text)
		}
		if len(f) == 5 || !strings.HasSuffix(text, exe) || mappedPath(text, f[4]) != exe {
			continue
		}
		if len(f[1]) != 4 {
			return nil, fmt.Errorf("mappings line %d: permissions %q: want 4 characters", line, f[1])
		}
		if f[1][1] == 'w' {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if !ok || err1 != nil || err2 != nil || end <= start {
			return nil, fmt.Errorf("mappings line %d: range %q: want start-end in hex, start below end", line, f[0])
		}
		out = append(out, Mapping{Start: start, End: end})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read the mappings: %w", err)
	}
	return out, nil
}

// mappedPath is what follows the inode field of a maps line.
func mappedPath(line, inode string) string {
	// The fifth field is the inode; the path starts after the spaces that
	// pad it.
	rest := line
	for range 4 {
		rest = strings.TrimLeft(rest, " ")
		_, rest, _ = strings.Cut(rest, " ")
	}
	rest = strings.TrimLeft(rest, " ")
	rest = strings.TrimPrefix(rest, inode)
	return strings.TrimLeft(rest, " ")
}

// ReadResident reads VmRSS, RssAnon and RssFile from a /proc/PID/status
// file.
func ReadResident(path string) (Resident, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Resident{}, fmt.Errorf("read resident memory: %w", err)
	}
	var r Resident
	fields := map[string]*uint64{"VmRSS:": &r.Total, "RssAnon:": &r.Anon, "RssFile:": &r.File}
	found := 0
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) != 3 || f[2] != "kB" || fields[f[0]] == nil {
			continue
		}
		kB, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return Resident{}, fmt.Errorf("%s %s in %s: %w", f[0], f[1], path, err)
		}
		*fields[f[0]] = kB * 1024
		found++
	}
	if found != len(fields) {
		return Resident{}, fmt.Errorf("%s: want VmRSS, RssAnon and RssFile in kB", path)
	}
	return r, nil
}
