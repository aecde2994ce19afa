package kmsg_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nodeward/nodeward/kmsg"
	"github.com/nodeward/nodeward/test/kernelevents"
	"github.com/nodeward/nodeward/test/testenv"
)

// The reader on the real /dev/kmsg, with records the kernel really logs
// (a loop device attached) and lines a process writes.

// latest opens a reader past every record logged so far.
func latest(t *testing.T) *kmsg.Reader {
	t.Helper()
	kernelevents.Lock(t)
	r, err := kmsg.Open(kmsg.Options{FromEnd: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// until reads until a record's message contains want, within 10 s.
func until(t *testing.T, r *kmsg.Reader, want string) []kmsg.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var seen []kmsg.Record
	for {
		rec, err := r.Next(ctx)
		if err != nil {
			t.Fatalf("no record containing %q (read %d): %v", want, len(seen), err)
		}
		seen = append(seen, rec)
		if strings.Contains(rec.Message, want) {
			return seen
		}
	}
}

// A line a process writes, even one that claims facility 0 and copies a
// kernel message, is not returned; the kernel's record after it is.
func TestLookAlikeIsNotTheKernels(t *testing.T) {
	testenv.RequireRoot(t)
	r := latest(t)
	fake := fmt.Sprintf("EXT4-fs (loop%d): Remounting filesystem read-only", time.Now().UnixNano()%1000+1000)
	kernelevents.WriteKmsg(t, "<3>"+fake, "<0>"+fake, fake)
	dev := kernelevents.KernelRecord(t)
	for _, rec := range until(t, r, dev+": detected capacity change") {
		if strings.Contains(rec.Message, fake) {
			t.Errorf("a process's line was read as the kernel's: %+v", rec)
		}
		if !rec.Kernel() {
			t.Errorf("record of facility %d returned: %+v", rec.Facility, rec)
		}
	}
	if r.Lost() != 0 {
		t.Errorf("%d records lost with no flood", r.Lost())
	}
}

// A flood larger than the ring buffer, written while the reader does not
// read, overtakes it: the records lost are counted, and the kernel's
// record logged after the flood is still read.
func TestFloodCountsLostRecords(t *testing.T) {
	testenv.RequireRoot(t)
	r := latest(t)
	size := kernelevents.RingBufferSize(t)
	lines := kernelevents.Lines("nodeward flood", 2*size/200+100, 200)
	kernelevents.WriteKmsg(t, lines...)
	dev := kernelevents.KernelRecord(t)
	until(t, r, dev+": detected capacity change")
	// Each line takes at least its text in the buffer, so at least the
	// excess over the buffer is gone.
	if lost := r.Lost(); lost < uint64(len(lines)/3) {
		t.Errorf("%d records lost after %d lines of 200 bytes into a %d-byte buffer: want at least %d", lost, len(lines), size, len(lines)/3)
	} else {
		t.Logf("%d of %d records lost (ring buffer %d bytes)", lost, len(lines), size)
	}
}

// After skips what a reader of the same boot handled; Lookback what is
// older than it.
func TestStartAfterAndLookback(t *testing.T) {
	testenv.RequireRoot(t)
	r := latest(t) // holds the kernel log's lock for the whole test
	first := kernelevents.KernelRecord(t)
	seen := until(t, r, first+": detected capacity change")
	handled := seen[len(seen)-1].Seq
	second := kernelevents.KernelRecord(t)

	again, err := kmsg.Open(kmsg.Options{After: &handled})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	for _, rec := range until(t, again, second+": detected capacity change") {
		if rec.Seq <= handled {
			t.Errorf("record %d returned after %d was handled: %+v", rec.Seq, handled, rec)
		}
	}

	recent, err := kmsg.Open(kmsg.Options{Lookback: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer recent.Close()
	for _, rec := range until(t, recent, first+": detected capacity change") {
		if rec.SinceBoot < seen[len(seen)-1].SinceBoot-2*time.Minute {
			t.Errorf("record older than the look-back of a minute returned: %+v", rec)
		}
	}
}

// Next returns when its context ends, and the reader reads on after.
func TestNextEndsWithContext(t *testing.T) {
	testenv.RequireRoot(t)
	r := latest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := r.Next(ctx); err != context.DeadlineExceeded {
		t.Fatalf("Next with nothing to read: %v, want the context's deadline", err)
	}
	dev := kernelevents.KernelRecord(t)
	until(t, r, dev+": detected capacity change")
}
