package footprint

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

const exe = "/usr/local/bin/nodeward agent" // a space in the path on purpose

var maps = `00400000-00f68000 r-xp 00000000 fd:01 1234                               /usr/local/bin/nodeward agent
00f68000-01b7b000 r--p 00b68000 fd:01 1234                               /usr/local/bin/nodeward agent
01b7b000-01c12000 rw-p 0177b000 fd:01 1234                               /usr/local/bin/nodeward agent
01c12000-03c5b000 rw-p 00000000 00:00 0 
22b681c00000-22b682400000 rw-p 00000000 00:00 0 
7fa692c3a000-7fa692d90000 r-xp 00028000 fd:01 99                         /usr/lib/x86_64-linux-gnu/libc.so.6
7fa692d90000-7fa692de3000 r--p 0017e000 fd:01 99                         /usr/lib/x86_64-linux-gnu/libc.so.6
7fa700000000-7fa700001000 r--p 00000000 fd:01 77                         /opt/usr/local/bin/nodeward agent
7ffec341c000-7ffec343d000 rw-p 00000000 00:00 0                          [stack]
`

func TestExecutableReadOnlyKeepsTheExecutablesReadOnlyMappings(t *testing.T) {
	got, err := ExecutableReadOnly(strings.NewReader(maps), exe)
	if err != nil {
		t.Fatal(err)
	}
	// Not the writable .data, not another file whose path ends the same.
	want := []Mapping{{0x400000, 0xf68000}, {0xf68000, 0x1b7b000}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("mappings = %#v, want %#v", got, want)
	}
	deleted := strings.ReplaceAll(maps, "nodeward agent\n", "nodeward agent (deleted)\n")
	got, err = ExecutableReadOnly(strings.NewReader(deleted), exe+" (deleted)")
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("a replaced executable: mappings = %#v, %v; want %#v", got, err, want)
	}
}

func TestExecutableReadOnlyNamesTheBadLine(t *testing.T) {
	for name, tc := range map[string]struct{ line, want string }{
		"too few fields": {"00400000-00f68000 r-xp 0", "line 2"},
		"range":          {"00f68000-0040zz00 r-xp 00000000 fd:01 1234 " + exe, `line 2: range "00f68000-0040zz00"`},
		"range reversed": {"00f68000-00400000 r-xp 00000000 fd:01 1234 " + exe, "start below end"},
		"permissions":    {"00400000-00f68000 rx 00000000 fd:01 1234 " + exe, `line 2: permissions "rx"`},
	} {
		t.Run(name, func(t *testing.T) {
			in := "7ffec341c000-7ffec343d000 rw-p 00000000 00:00 0 [stack]\n" + tc.line + "\n"
			got, err := ExecutableReadOnly(strings.NewReader(in), exe)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v (mappings %v), want one containing %q", err, got, tc.want)
			}
		})
	}
}

func FuzzExecutableReadOnly(f *testing.F) {
	f.Add(maps, exe)
	f.Add("00400000-00f68000 r-xp 00000000 fd:01 1234 /a\n", "/a")
	f.Add("0-1 r--p 0 0:0 0  \n", "")
	f.Fuzz(func(t *testing.T, in, path string) {
		got, err := ExecutableReadOnly(strings.NewReader(in), path)
		if err != nil {
			return
		}
		for _, m := range got {
			if m.End <= m.Start {
				t.Fatalf("mapping %#v: end not above start", m)
			}
		}
	})
}

func TestReadResident(t *testing.T) {
	dir := t.TempDir()
	status := filepath.Join(dir, "status")
	write := func(s string) {
		if err := os.WriteFile(status, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("Name:\tnodeward\nVmRSS:\t   15296 kB\nRssAnon:\t    7616 kB\nRssFile:\t    7680 kB\nRssShmem:\t 0 kB\n")
	got, err := ReadResident(status)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Resident{15296 << 10, 7616 << 10, 7680 << 10}); got != want {
		t.Fatalf("resident = %+v, want %+v", got, want)
	}
	write("VmRSS:\t 1 kB\nRssAnon:\t 1 kB\n")
	if _, err := ReadResident(status); err == nil || !strings.Contains(err.Error(), "RssFile") {
		t.Fatalf("without RssFile: err = %v", err)
	}
	write("VmRSS:\t x kB\nRssAnon:\t 1 kB\nRssFile:\t 1 kB\n")
	if _, err := ReadResident(status); err == nil || !strings.Contains(err.Error(), "VmRSS: x") {
		t.Fatalf("a bad number: err = %v", err)
	}
}

// TestReleaseLowersTheMappedExecutable releases this test binary's pages
// and checks the file-backed RSS fell and the program still runs.
func TestReleaseLowersTheMappedExecutable(t *testing.T) {
	// Touch code and data the release will page out, so that there is
	// something resident to release.
	re := regexp.MustCompile(`^(\d+)-(\d+)$`)
	if !re.MatchString("12-34") {
		t.Fatal("regexp before the release")
	}
	r, err := Release()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("released %d mappings (%.1f MiB): RSS %.1f -> %.1f MiB, file-backed %.1f -> %.1f MiB",
		r.Mappings, mib(r.Bytes), mib(r.Before.Total), mib(r.After.Total), mib(r.Before.File), mib(r.After.File))
	if r.Mappings < 2 {
		t.Errorf("advised %d mappings, want the executable's text and rodata at least", r.Mappings)
	}
	if r.After.File >= r.Before.File {
		t.Errorf("file-backed RSS %d -> %d bytes: did not fall", r.Before.File, r.After.File)
	}
	// The paged-out code runs again (faulted back in).
	if m := re.FindStringSubmatch("56-78"); len(m) != 3 || m[2] != "78" {
		t.Fatalf("regexp after the release: %q", m)
	}
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// TestEvictLeavesOnlyThePagesUsedAfterIt maps a file on disk read-only,
// touches every page, evicts the mapping, then touches one page: the file
// is no longer cached but for that page, and only that page is mapped
// again (no fault-around, no readahead). The mapping is not executable:
// Linux reads around a fault in an executable one whatever the advice
// (32 pages here on 6.18), as in the executable's text. The file lives
// beside the test, not in a tmpfs, whose pages the page cache cannot drop.
func TestEvictLeavesOnlyThePagesUsedAfterIt(t *testing.T) {
	const pages = 64
	page := os.Getpagesize()
	f, err := os.CreateTemp(".", ".evict-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(f.Name()) })
	if _, err := f.Write(bytes.Repeat([]byte{1}, pages*page)); err != nil {
		t.Fatal(err)
	}
	// Dirty pages stay cached whatever the advice: written back first.
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	data, err := unix.Mmap(int(f.Fd()), 0, pages*page, unix.PROT_READ, unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(data)
	_ = f.Close()
	var sum byte
	for i := 0; i < len(data); i += page {
		sum += data[i]
	}
	if got := cached(t, data, page); got != pages {
		t.Fatalf("%d of %d pages cached after reading them all (sum %d)", got, pages, sum)
	}
	start := uint64(uintptr(unsafe.Pointer(&data[0])))
	if err := evict(f.Name(), []Mapping{{Start: start, End: start + uint64(len(data))}}); err != nil {
		t.Fatal(err)
	}
	if got := cached(t, data, page); got != 0 {
		t.Errorf("%d of %d pages still cached after the eviction", got, pages)
	}
	sum += data[pages/2*page]
	if got := cached(t, data, page); got != 1 {
		t.Errorf("%d pages cached after reading one: want that one only (no readahead, no fault-around)", got)
	}
	if sum != pages+1 {
		t.Errorf("read %d, want %d: the evicted mapping must read the file as it was", sum, pages+1)
	}
}

// cached counts data's pages in the page cache (mincore).
func cached(t *testing.T, data []byte, page int) int {
	t.Helper()
	vec := make([]byte, (len(data)+page-1)/page)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&data[0])), uintptr(len(data)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatalf("mincore: %v", errno)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}
