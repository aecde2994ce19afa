package kmsg

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DevKmsg is where the kernel log is read.
const DevKmsg = "/dev/kmsg"

// recordMax bounds one record: the kernel refuses a read into a buffer
// smaller than the record (EINVAL); its records are at most 1 KiB of text
// plus the dictionary, well under this.
const recordMax = 16 << 10

// Options say where a Reader starts.
type Options struct {
	// Path is the kernel log device; DevKmsg when empty.
	Path string
	// Lookback: records older than this (by the kernel's clock since boot)
	// are skipped, so that on start only recent problems are reported.
	// Zero reads the whole ring buffer.
	Lookback time.Duration
	// After, when set, skips every record up to this sequence number: the
	// last one handled before a restart in the same boot, so nothing is
	// reported twice.
	After *uint64
	// FromEnd starts at the next record the kernel logs, past everything
	// in the ring buffer now.
	FromEnd bool
	// SinceBoot is the clock Lookback is measured on; CLOCK_MONOTONIC
	// (the printk clock's base) when nil.
	SinceBoot func() time.Duration
}

// Reader reads the kernel's own records from the kernel log, oldest first,
// and counts the records the ring buffer overwrote before it could read
// them. It is one reader: Next is not safe for concurrent use.
type Reader struct {
	file *os.File
	buf  []byte
	// cutoff is the kernel timestamp before which records are skipped,
	// after the sequence number below which they are.
	cutoff time.Duration
	after  uint64
	skip   bool

	mu      sync.Mutex
	lastSeq uint64
	seen    bool
	lost    uint64
}

// Open opens the kernel log for reading from its oldest record.
func Open(opts Options) (*Reader, error) {
	if opts.Path == "" {
		opts.Path = DevKmsg
	}
	if opts.SinceBoot == nil {
		opts.SinceBoot = SinceBoot
	}
	// O_NONBLOCK: the runtime's poller waits for records, so that a
	// deadline (and Close) interrupts a read with nothing to return.
	f, err := os.OpenFile(opts.Path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open the kernel log: %w", err)
	}
	r := &Reader{file: f, buf: make([]byte, recordMax)}
	if opts.FromEnd {
		// Reading to the end, rather than seeking there, tells the reader
		// the sequence number it stands at: a flood that overtakes it
		// before its first record is then counted too.
		if err := r.ReadAvailable(func(Record) {}); err != nil {
			f.Close()
			return nil, err
		}
	}
	if opts.Lookback > 0 {
		r.cutoff = opts.SinceBoot() - opts.Lookback
	}
	if opts.After != nil {
		r.after, r.skip = *opts.After, true
	}
	return r, nil
}

// SinceBoot is the time since boot on the clock a record's SinceBoot is
// close to (CLOCK_MONOTONIC; the kernel's own differs by milliseconds).
func SinceBoot() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// Next returns the next record the kernel logged within the lookback,
// waiting for one until ctx ends. Records of other facilities (written by
// processes) are passed over; records the ring buffer overwrote before
// they were read are counted (Lost) and reading goes on after them.
func (r *Reader) Next(ctx context.Context) (Record, error) {
	stop := context.AfterFunc(ctx, func() { _ = r.file.SetReadDeadline(time.Now()) })
	defer stop()
	for {
		n, err := r.file.Read(r.buf)
		switch {
		case errors.Is(err, syscall.EPIPE):
			// Overtaken: the kernel moved this reader to the oldest record
			// it still has; the sequence gap counts what was lost.
			continue
		case errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() != nil:
			_ = r.file.SetReadDeadline(time.Time{})
			return Record{}, ctx.Err()
		case err != nil:
			return Record{}, fmt.Errorf("read the kernel log: %w", err)
		}
		if rec, ok, err := r.take(n); err != nil || ok {
			return rec, err
		}
	}
}

// ReadAvailable hands handle every record Next would return that the
// ring buffer holds now, without waiting for more: the catch-up of a
// reader that starts, before it waits with Next.
func (r *Reader) ReadAvailable(handle func(Record)) error {
	raw, err := r.file.SyscallConn()
	if err != nil {
		return fmt.Errorf("read the kernel log: %w", err)
	}
	for {
		var n int
		var rerr error
		if err := raw.Read(func(fd uintptr) bool {
			n, rerr = unix.Read(int(fd), r.buf)
			return true // never wait: EAGAIN is the end
		}); err != nil {
			return fmt.Errorf("read the kernel log: %w", err)
		}
		switch {
		case errors.Is(rerr, unix.EAGAIN):
			return nil
		case errors.Is(rerr, unix.EPIPE), errors.Is(rerr, unix.EINTR):
			continue
		case rerr != nil:
			return fmt.Errorf("read the kernel log: %w", rerr)
		}
		rec, ok, err := r.take(n)
		if err != nil {
			return err
		}
		if ok {
			handle(rec)
		}
	}
}

// take parses the record of n bytes just read, counts it, and says
// whether it is one to hand out: the kernel's own, past the start the
// options set.
func (r *Reader) take(n int) (Record, bool, error) {
	rec, err := Parse(r.buf[:n])
	if err != nil {
		return Record{}, false, err
	}
	r.account(rec.Seq)
	return rec, rec.Kernel() && !(r.skip && rec.Seq <= r.after) && rec.SinceBoot >= r.cutoff, nil
}

// account counts the records between the last one read and seq as lost.
func (r *Reader) account(seq uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen && seq > r.lastSeq+1 {
		r.lost += seq - r.lastSeq - 1
	}
	r.lastSeq, r.seen = seq, true
}

// Lost is how many records the ring buffer overwrote before this reader
// read them.
func (r *Reader) Lost() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lost
}

// Close releases the device; a Next waiting returns an error.
func (r *Reader) Close() error { return r.file.Close() }
