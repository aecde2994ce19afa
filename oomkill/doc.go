// Package oomkill reports the kernel's OOM kills in the kubelet's memory
// cgroups as events: for each kill, which cgroup lost a process, and so
// which pod and container, within milliseconds.
//
// # What it watches
//
// A Watcher watches a root cgroup (by default the kubepods cgroup, the
// first of DefaultRoots that exists) and every cgroup under it, including
// those created later: an inotify watch on each cgroup directory sees its
// children created and removed, and a watch on the root's parent sees the
// root itself removed and made again. A cgroup that vanishes is dropped,
// which is normal; no cgroup's error stops the watcher.
//
// The cgroup version is that of the root (statfs: CGROUP2_SUPER_MAGIC, or
// a v1 hierarchy with memory.oom_control), and errors say which.
//
//   - cgroup v2: the "oom_kill N" line of memory.events.local, this
//     cgroup's own kills, watched with inotify (IN_MODIFY, which the kernel
//     generates when the file changes). memory.events counts a kill in
//     every ancestor too, so it is only the fallback on kernels before 5.2.
//   - cgroup v1: the "oom_kill N" line of memory.oom_control (kernels since
//     4.13), kills in this cgroup only; an eventfd registered through
//     cgroup.event_control is signalled when the cgroup, or an ancestor it
//     is under, runs out of memory. The kernel signals before it kills, so
//     after a wake-up the counter is read every 250 µs for 10 ms, then less
//     often for a second. A kill by the global OOM killer (the node out of
//     memory) signals no eventfd: the node's count of OOM kills in
//     /proc/vmstat is read every second, and when it rises every cgroup's
//     counter is read, so such a kill comes within about a second.
//
// Each increase of a counter is one Kill; Count is the increase, which is
// more than one when kills come together. Kills before the watcher started
// are not reported; a cgroup created while it runs counts from zero, so
// a kill before its watch began is. The victim's cgroup is the one
// reported, also when the limit was an ancestor's (the pod's).
//
// # How the pod is named
//
// PodOf reads the pod UID and container ID from the cgroup path, for
// both of the kubelet's cgroup drivers:
//
//	systemd:  kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/cri-containerd-<id>.scope
//	cgroupfs: kubepods/burstable/pod<uid>/<id>
//
// (the systemd driver's underscores in the UID become dashes). The pod's
// own cgroup has no container; a cgroup above the pods names none.
//
// # Latency
//
// Measured by TestRealOOMKill on cgroup v1 (kernel 6.18, PREEMPT_NONE, a
// 2-core machine shared with other work, load average about 2.3), from the
// timestamp of the kernel's "Killed process" record (calibrated against
// CLOCK_MONOTONIC) to Kill.At, in runs of 100 real OOM kills: p50 2.4 ms,
// p90 3 to 6.5 ms, p99 5 to 13 ms, max 7 to 14 ms (the largest in any run,
// of 5 to 100 kills, was 48 ms). The kernel counts the kill just before it
// logs it, so the smallest are a few µs, or negative. The milliseconds are
// a wait for the CPU, not the re-read schedule: wake-ups and re-reads alike
// came late by them. Apparently the watcher is woken on the CPU of the
// task that ran out of memory, which goes on to pick the victim and tear
// it down: with that task pinned to the other CPU, the p50 was 95 µs.
// cgroup v2 was neither measured nor tested on a real kernel: on the
// machines the tests run on the memory controller is on the v1 hierarchy,
// and a controller is on one hierarchy at a time. Its code is tested on a
// fake tree with real inotify (v2_test.go). The kernel's v2 notification is
// rate-limited to one per 10 ms per file, deferred, not dropped.
//
// # Resources and concurrency
//
// One goroutine (Run's) owns all state and blocks in epoll: one inotify
// instance, a timer, and per cgroup one open file, plus on v1 an eventfd.
// On v1 an OOM in a cgroup signals it and every cgroup under it, and each
// is re-read about 50 times in the second after. A Watcher runs once at a
// time; Kills, Watched, Root and Version are safe for concurrent use. Run blocks while the channel it sends to is
// full; the kernel keeps what happens meanwhile (counters, eventfds, and
// inotify's queue, rescanned if it overflows).
package oomkill
