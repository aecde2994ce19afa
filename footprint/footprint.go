// Package footprint gives back the memory the agent needed only to start.
//
// Most of an idle agent's resident memory is not its heap but pages of its
// own executable: a Go program's package initializers (the Kubernetes type
// machinery, protobuf and gRPC registries, compiled regular expressions)
// run once and fault in text, rodata and pclntab, and the kernel maps the
// 64 KiB around every fault. Measured beside node_exporter
// (docs/benchmarks.md, "Agent RSS beside node_exporter"): without the
// release, 19.6 of the agent's 26.9 MiB idle RSS were file-backed pages of
// the executable; with it, 14.1 of 21.2 MiB, the pages the steady state
// (watch, probes, Lease renewals, the garbage collector) faults back in.
//
// Release unmaps the executable's read-only mappings once start-up is over
// (madvise MADV_DONTNEED). The pages the agent still runs fault back in on
// their next use, from the page cache; those it ran only to start are not
// mapped again. The pages themselves stay in the page cache: a container's
// memory usage, which counts page cache, does not fall at once. But clean,
// unmapped pages are the first the kernel reclaims under pressure, while
// mapped executable pages are kept on the active list while in use, so the
// node gets them back when it needs memory, without touching the agent.
// (MADV_PAGEOUT, which asks for the reclaim at once, left the pages cached
// on Linux 6.18 in a test, so the simpler advice is used.) Release also
// returns the heap's free pages (runtime/debug.FreeOSMemory): start-up's
// garbage is the largest the heap holds at idle. Writable mappings (.data,
// .bss, whose private copies hold the program's state) are never touched.
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
	for _, m := range ranges {
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(m.Start), uintptr(m.End-m.Start), unix.MADV_DONTNEED); errno != 0 {
			return r, fmt.Errorf("unmap the executable's pages at %#x-%#x: %w", m.Start, m.End, errno)
		}
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
