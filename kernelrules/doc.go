// Package kernelrules reads kernel-log problem rules and matches kernel log
// messages against them.
//
// # Format
//
// Rule files are in the format of node-problem-detector's (NPD)
// system-log-monitor, as NPD's config/kernel-monitor.json and
// config/readonly-monitor.json are written, so NPD's files and rules
// written for NPD load unchanged (a test loads those of NPD v1.36.0):
//
//	{
//	  "plugin": "kmsg", "logPath": "/dev/kmsg", "lookback": "10m",
//	  "source": "site-kernel", "bufferSize": 5,
//	  "conditions": [{"type": "NICDown", "reason": "NICIsUp",
//	                  "message": "the uplink NIC has not failed"}],
//	  "rules": [
//	    {"type": "temporary", "reason": "LinkFlap",
//	     "pattern": "\\S+: Link is Down"},
//	    {"type": "permanent", "condition": "NICDown", "reason": "NICTxTimeout",
//	     "pattern": "NETDEV WATCHDOG: eth0 \\(\\S+\\): transmit queue \\d+ timed out.*"}
//	  ]
//	}
//
// A temporary rule reports an event each time it matches; a permanent rule
// sets its condition, which must be declared under conditions with its
// healthy reason and message. Rules may also carry
// patternGeneratedMessageSuffix, appended to the message after "; ".
// Parse is stricter than NPD where NPD would silently do something else:
// it rejects unknown fields, any plugin but "kmsg" and any logPath but
// /dev/kmsg (nodeward reads the kernel log from /dev/kmsg only), a
// skipList (NPD honours it for its filelog plugin only), durations that
// are not Go durations, a bufferSize below 0 or above MaxBufferSize, and
// patterns that do not compile or match an empty line. Its errors name the
// file, the rule by index and reason, and the field:
//
//	kernel-monitor.json: rules[3] (reason "TaskHung").pattern: error parsing regexp: ...
//
// # Matching
//
// Matching follows NPD's log buffer. Each file has a buffer of its last
// bufferSize messages (NPD's default, 10, when unset). When a message
// arrives it is trimmed of surrounding whitespace, as NPD's kmsg watcher
// does, and added to every file's buffer; the buffer's slots are then
// joined oldest first with "\n" (slots not yet filled count as empty
// lines) and each rule's pattern, compiled as written with `\z` appended,
// is searched for in that text. So a pattern must match up to the end of
// the newest message, need not match from the start of a line, and may
// span several messages with "\n"; a message already reported does not
// match again when the next one arrives. Two NPD quirks follow from
// appending `\z` and are kept for parity: the anchor binds only the last
// branch of a top-level alternation (`a|b` matches an "a" anywhere in the
// buffer, again and again), and `^` marks the start of the whole buffer.
// The default rules avoid both. A match reports the messages it spans,
// from the first line ending after the match starts to the newest, and
// the message NPD would give the event or condition: those lines joined
// with "\n", plus the suffix.
//
// # Defaults
//
// Defaults returns nodeward's own rules (source "nodeward-kernel"),
// embedded from defaults.json. Each pattern was checked against the format
// string current Linux prints, and the older forms still seen on
// long-term kernels:
//
//   - OOMKilling (temporary): mm/oom_kill.c, "%s: Killed process %d (%s)
//     total-vm:%lukB, anon-rss:%lukB, file-rss:%lukB, ..." for both
//     "Out of memory" and "Memory cgroup out of memory".
//   - TaskHung (temporary): kernel/hung_task.c, "INFO: task %s:%d blocked
//     for more than %ld seconds.", for any task.
//   - KernelDeadlock, reason TaskHung (permanent): the same message for
//     containerd, dockerd, crio or kubelet. Like NPD, which sets
//     KernelDeadlock only for a hung docker, a hung task in general stays
//     an event (it may be a slow NFS server and recover), while a hung
//     container runtime or kubelet leaves the node unable to run pods.
//   - KernelOops (temporary): arch/x86/mm/fault.c "BUG: unable to handle
//     page fault for address: %px" and "BUG: kernel NULL pointer
//     dereference, address: %px" (and the pre-5.2 "BUG: unable to handle
//     kernel ... at"), arch/x86/kernel/dumpstack.c "Oops: %s: %04lx [#%d]"
//     (arm64's "Internal error: Oops: ... [#%d]" too), lib/bug.c "kernel
//     BUG at %s:%u!".
//   - Ext4Error (temporary): fs/ext4/super.c "EXT4-fs error (device %s):
//     ..." and "EXT4-fs error (device %s) in %s:%d: ...".
//   - IOError (temporary): block/blk-mq.c "%s error, dev %s, sector %llu
//     op ..." with "I/O" (older kernels prefix "blk_update_request: ") and
//     fs/buffer.c "Buffer I/O error on dev %pg, logical block %llu, ...".
//   - ReadonlyFilesystem, reason FilesystemIsReadOnly (permanent): ext4's
//     "EXT4-fs (%s): Remounting filesystem read-only" and the same words
//     in any case at the end of a line (ext2, ext3, nilfs2).
//   - ReadonlyFilesystem, reason XFSShutdown (permanent):
//     fs/xfs/xfs_fsops.c "XFS (%s): %s (0x%x) detected at %pS (%s:%d).
//     Shutting down filesystem." (and older "... Shutting down
//     filesystem" forms) and fs/xfs/xfs_log.c "XFS (%s): Filesystem has
//     been shut down due to log error (0x%x).", which is all a log error
//     prints on recent kernels.
//
// DeviceOf extracts the block device such messages name, so the agent can
// re-check that device's mounts.
package kernelrules
