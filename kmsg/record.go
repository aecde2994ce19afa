package kmsg

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// FacilityKernel is the syslog facility of records the kernel itself
// logged. A process writing to /dev/kmsg cannot give a record facility 0:
// the kernel turns it into LOG_USER (1), which is how a look-alike line is
// told apart from the kernel's own.
const FacilityKernel = 0

// Record is one record of the kernel log, as /dev/kmsg gives it
// (Documentation/ABI/testing/dev-kmsg).
type Record struct {
	// Seq is the record's sequence number: consecutive, so a gap counts the
	// records the ring buffer dropped before they were read.
	Seq uint64
	// Facility and Level split the record's syslog priority.
	Facility, Level int
	// SinceBoot is the kernel's timestamp: time since boot (the printk
	// clock, which stops while the machine is suspended).
	SinceBoot time.Duration
	// Message is the text, with the kernel's \xNN escapes decoded.
	Message string
	// Fields are the dictionary lines after the text (SUBSYSTEM=, DEVICE=).
	Fields map[string]string
}

// Kernel reports whether the kernel logged r (not a process writing to
// /dev/kmsg).
func (r Record) Kernel() bool { return r.Facility == FacilityKernel }

// Parse decodes one record as one read of /dev/kmsg returns it:
// "<priority>,<seq>,<usec>,<flags>[,...];<text>\n" and " KEY=value\n"
// dictionary lines.
func Parse(data []byte) (Record, error) {
	var r Record
	header, rest, ok := bytes.Cut(data, []byte{';'})
	if !ok {
		return r, fmt.Errorf("kmsg record %q: no ';' after the header", clip(data))
	}
	fields := strings.Split(string(header), ",")
	if len(fields) < 4 {
		return r, fmt.Errorf("kmsg record header %q: want priority,sequence,timestamp,flags", clip(header))
	}
	prio, err := strconv.ParseUint(fields[0], 10, 32)
	if err != nil {
		return r, fmt.Errorf("kmsg record header %q: priority: %w", clip(header), err)
	}
	if r.Seq, err = strconv.ParseUint(fields[1], 10, 64); err != nil {
		return r, fmt.Errorf("kmsg record header %q: sequence number: %w", clip(header), err)
	}
	usec, err := strconv.ParseUint(fields[2], 10, 63)
	if err != nil || usec > uint64(1<<63-1)/uint64(time.Microsecond) {
		return r, fmt.Errorf("kmsg record header %q: timestamp %q is not a count of microseconds", clip(header), fields[2])
	}
	r.Facility, r.Level = int(prio>>3), int(prio&7)
	r.SinceBoot = time.Duration(usec) * time.Microsecond
	lines := bytes.Split(bytes.TrimSuffix(rest, []byte{'\n'}), []byte{'\n'})
	r.Message = unescape(lines[0])
	for _, l := range lines[1:] {
		if k, v, ok := bytes.Cut(bytes.TrimPrefix(l, []byte{' '}), []byte{'='}); ok && len(l) > 0 && l[0] == ' ' {
			if r.Fields == nil {
				r.Fields = map[string]string{}
			}
			r.Fields[string(k)] = unescape(v)
		}
	}
	return r, nil
}

// unescape decodes the kernel's \xNN escapes of bytes that are not
// printable (and of the backslash itself).
func unescape(b []byte) string {
	if bytes.IndexByte(b, '\\') < 0 {
		return string(b)
	}
	var out strings.Builder
	for i := 0; i < len(b); i++ {
		if b[i] == '\\' && i+3 < len(b) && b[i+1] == 'x' {
			if v, err := strconv.ParseUint(string(b[i+2:i+4]), 16, 8); err == nil {
				out.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		out.WriteByte(b[i])
	}
	return out.String()
}

func clip(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "…"
	}
	return string(b)
}
