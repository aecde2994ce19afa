// Command memthrash makes real memory pressure for the PSI test and
// benchmark. It joins a memory cgroup, then reads random pages of a file
// several times larger than the cgroup's limit from several goroutines, so
// that reads keep evicting and refaulting the cgroup's page cache: the
// kernel counts those waits as memory stall in /proc/pressure/memory. It
// runs until killed.
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

func main() {
	cgroup := flag.String("cgroup", "", "memory cgroup directory to join (its cgroup.procs is written)")
	file := flag.String("file", "", "file to read, larger than the cgroup's limit")
	workers := flag.Int("workers", 4, "concurrent readers")
	flag.Parse()
	if err := run(*cgroup, *file, *workers); err != nil {
		fmt.Fprintln(os.Stderr, "memthrash:", err)
		os.Exit(1)
	}
}

func run(cgroup, file string, workers int) error {
	if cgroup == "" || file == "" || workers < 1 {
		return fmt.Errorf("need -cgroup, -file and a positive -workers")
	}
	procs := filepath.Join(cgroup, "cgroup.procs")
	if err := os.WriteFile(procs, []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
		return fmt.Errorf("join %s: %w", procs, err)
	}
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		return err
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap %s: %w", file, err)
	}
	pages := len(data) / os.Getpagesize()
	if pages == 0 {
		return fmt.Errorf("%s is smaller than a page", file)
	}
	sums := make(chan byte)
	for range workers {
		go func() {
			var sum byte
			for {
				sum += data[rand.IntN(pages)*os.Getpagesize()]
				if sum == 0 && rand.IntN(1<<20) == 0 {
					sums <- sum // keeps the reads from being optimised away
				}
			}
		}()
	}
	for range sums {
	}
	return nil
}
