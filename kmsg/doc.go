// Package kmsg reads the kernel log from /dev/kmsg: one record per read,
// with its sequence number, priority and timestamp, so that a reader knows
// which records are the kernel's own (facility 0, which no process can
// forge) and how many the ring buffer overwrote before it read them (the
// kernel answers EPIPE and moves the reader on; the sequence gap is the
// count). A reader starts at the oldest record the ring buffer holds and
// can skip what is older than a look-back or what a previous reader of the
// same boot already handled.
package kmsg
