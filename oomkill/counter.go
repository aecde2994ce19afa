package oomkill

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"

	"golang.org/x/sys/unix"
)

// check reads cg's counter and reports an increase. report says a rise
// is a kill (not the first reading of a cgroup there at the start). It
// returns false if the counter could not be read (the cgroup gone, most
// likely).
func (l *loop) check(cg *cgroup, report bool) bool {
	var buf [512]byte
	n, err := cg.file.ReadAt(buf[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		if !gone(err) {
			l.problem(cg, "read the OOM-kill counter", err)
		}
		return false
	}
	kills, err := oomKills(buf[:n])
	if err != nil {
		l.problem(cg, "read the OOM-kill counter", err)
		return false
	}
	if kills > cg.last && report {
		l.w.kills.Add(kills - cg.last)
		k := Kill{Cgroup: cg.path, Count: kills - cg.last, Total: kills, At: l.w.now()}
		k.PodUID, k.ContainerID = PodOf(cg.path)
		select {
		case l.kills <- k:
		case <-l.ctx.Done():
		}
	}
	cg.last = kills
	return true
}

// gone: the cgroup was removed under us, which is normal.
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENODEV)
}

func (l *loop) problem(cg *cgroup, doing string, err error) {
	l.w.log.Warn("OOM-kill watcher: "+doing+" failed", "cgroup", cg.path, "err", err)
}

// oomKills parses the oom_kill line of memory.oom_control (v1) or
// memory.events[.local] (v2).
func oomKills(data []byte) (uint64, error) {
	for line := range bytes.Lines(data) {
		value, ok := bytes.CutPrefix(line, []byte("oom_kill "))
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(string(bytes.TrimSpace(value)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse %q: %w", bytes.TrimSpace(line), err)
		}
		return n, nil
	}
	return 0, fmt.Errorf("no oom_kill line in %q (kernel older than 4.13?)", data)
}
