// Command rssmap attributes the resident pages of a running process's
// executable to the ELF sections they hold: which parts of the binary
// (text, rodata, pclntab, dynamic symbol tables, data) the process has
// actually mapped in. Anonymous copies of written pages are not counted. It reads /proc/PID/maps and /proc/PID/pagemap (the
// present bit is readable without privileges on current kernels).
//
//	go run ./test/bench/health/rssmap PID
package main

import (
	"bufio"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

const pageSize = 4096

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: rssmap PID")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "rssmap:", err)
		os.Exit(1)
	}
}

func run(pid string) error {
	exe, err := os.Readlink("/proc/" + pid + "/exe")
	if err != nil {
		return fmt.Errorf("executable of %s: %w", pid, err)
	}
	f, err := elf.Open("/proc/" + pid + "/exe")
	if err != nil {
		return fmt.Errorf("open %s: %w", exe, err)
	}
	defer f.Close()
	pagemap, err := os.Open("/proc/" + pid + "/pagemap")
	if err != nil {
		return fmt.Errorf("pagemap: %w", err)
	}
	defer pagemap.Close()
	present := func(addr uint64) (bool, error) {
		var b [8]byte
		if _, err := pagemap.ReadAt(b[:], int64(addr/pageSize*8)); err != nil {
			return false, fmt.Errorf("pagemap at %#x: %w", addr, err)
		}
		// Bit 63: present; bit 61: a page of a file (not an anonymous
		// copy-on-write page of a written .data).
		v := binary.LittleEndian.Uint64(b[:])
		return v&(1<<63) != 0 && v&(1<<61) != 0, nil
	}
	mapped, err := exeMappings(pid, exe)
	if err != nil {
		return err
	}
	type row struct {
		name           string
		size, resident uint64
	}
	var rows []row
	var total uint64
	for _, s := range f.Sections {
		if s.Flags&elf.SHF_ALLOC == 0 || s.Type == elf.SHT_NOBITS || s.Size == 0 {
			continue
		}
		r := row{name: s.Name, size: s.Size}
		// Pages are attributed to the section that starts in them or
		// covers them; a page shared by two sections counts for both, so
		// the column may sum slightly above the total.
		for a := s.Addr &^ (pageSize - 1); a < s.Addr+s.Size; a += pageSize {
			if !mapped(a) {
				continue
			}
			ok, err := present(a)
			if err != nil {
				return err
			}
			if ok {
				r.resident += pageSize
			}
		}
		total += r.resident
		rows = append(rows, r)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].resident > rows[j].resident })
	fmt.Printf("%-20s %10s %10s %6s\n", "section", "size MiB", "RSS MiB", "share")
	var other row
	for _, r := range rows {
		// Sections smaller than 64 KiB share their pages with their
		// neighbours: summed, their share would mean nothing.
		if r.size < 64<<10 {
			other.size += r.size
			other.resident += r.resident
			continue
		}
		fmt.Printf("%-20s %10.1f %10.1f %5.0f%%\n", r.name, mib(r.size), mib(r.resident),
			100*float64(r.resident)/float64(r.size))
	}
	fmt.Printf("%-20s %10.1f %10.1f\n", "(sections < 64 KiB)", mib(other.size), mib(other.resident))
	fmt.Printf("%-20s %10s %10.1f\n", "total", "", mib(total))
	return nil
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// exeMappings reports whether an address lies in one of the mappings of
// the executable file (anonymous .bss beyond the file is not counted).
func exeMappings(pid, exe string) (func(uint64) bool, error) {
	maps, err := os.Open("/proc/" + pid + "/maps")
	if err != nil {
		return nil, fmt.Errorf("maps: %w", err)
	}
	defer maps.Close()
	type span struct{ lo, hi uint64 }
	var spans []span
	s := bufio.NewScanner(maps)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 6 || fields[5] != exe {
			continue
		}
		lo, hi, _ := strings.Cut(fields[0], "-")
		l, err1 := strconv.ParseUint(lo, 16, 64)
		h, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("maps line %q: bad range", s.Text())
		}
		spans = append(spans, span{l, h})
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("read maps: %w", err)
	}
	return func(a uint64) bool {
		for _, sp := range spans {
			if a >= sp.lo && a < sp.hi {
				return true
			}
		}
		return false
	}, nil
}
