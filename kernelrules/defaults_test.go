package kernelrules

import (
	"reflect"
	"testing"
)

func TestDefaultsParse(t *testing.T) {
	if _, err := Parse(defaultsName, defaultRules); err != nil {
		t.Fatalf("embedded default rules do not parse: %v", err)
	}
	file := Defaults()
	if file.Source != "nodeward-kernel" {
		t.Errorf("Source = %q", file.Source)
	}
	if Defaults() == file {
		t.Error("Defaults returned a shared *File; callers must get their own copy")
	}
}

// The messages below are shaped on the format strings of current Linux
// (v6.x), with realistic values: mm/oom_kill.c __oom_kill_process,
// kernel/hung_task.c, arch/x86/mm/fault.c show_fault_oops,
// arch/x86/kernel/dumpstack.c __die_header, lib/bug.c report_bug,
// fs/ext4/super.c __ext4_error and ext4_handle_error,
// block/blk-mq.c blk_print_req_error, fs/buffer.c, fs/xfs/xfs_fsops.c
// xfs_do_force_shutdown and fs/xfs/xfs_log.c xlog_force_shutdown; a few
// are the older forms still seen on long-term kernels.
func TestDefaultsOnKernelMessages(t *testing.T) {
	for _, tc := range []struct {
		message string
		want    []string // "Reason" for temporary, "Condition/Reason" for permanent
	}{
		// OOM kills, node-wide and of a memory cgroup, and the pre-5.x form.
		{"Out of memory: Killed process 4173 (stress-ng-vm) total-vm:2105420kB, anon-rss:1938488kB, file-rss:1280kB, shmem-rss:0kB, UID:0 pgtables:3844kB oom_score_adj:1000", []string{"OOMKilling"}},
		{"Memory cgroup out of memory: Killed process 91533 (java) total-vm:7833228kB, anon-rss:2094304kB, file-rss:25344kB, shmem-rss:0kB, UID:1000 pgtables:4560kB oom_score_adj:936", []string{"OOMKilling"}},
		{"Killed process 2592 (mysqld) total-vm:1405288kB, anon-rss:467996kB, file-rss:0kB", []string{"OOMKilling"}},
		{"oom_reaper: reaped process 4173 (stress-ng-vm), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB", nil},
		{"stress-ng-vm invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=1000", nil},

		// Hung tasks: any task is an event; the runtime or kubelet is a deadlock.
		{"INFO: task jbd2/sda1-8:312 blocked for more than 122 seconds.", []string{"TaskHung"}},
		{"INFO: task kworker/u8:3:4567 blocked for more than 241 seconds.", []string{"TaskHung"}},
		{"INFO: task containerd:1234 blocked for more than 120 seconds.", []string{"TaskHung", "KernelDeadlock/TaskHung"}},
		{"INFO: task kubelet:2211 blocked for more than 120 seconds.", []string{"TaskHung", "KernelDeadlock/TaskHung"}},
		{"INFO: task containerd-shim:99 blocked for more than 120 seconds.", []string{"TaskHung"}},
		{`"echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.`, nil},
		{"Future hung task reports are suppressed, see sysctl kernel.hung_task_warnings", nil},
		{"      Not tainted 6.8.0-45-generic #45-Ubuntu", nil},

		// Oopses and BUGs.
		{"BUG: kernel NULL pointer dereference, address: 0000000000000008", []string{"KernelOops"}},
		{"BUG: unable to handle page fault for address: ffffc90000a3b000", []string{"KernelOops"}},
		{"BUG: unable to handle kernel NULL pointer dereference at 0000000000000010", []string{"KernelOops"}},
		{"Oops: Oops: 0002 [#1] SMP NOPTI", []string{"KernelOops"}},
		{"Oops: general protection fault, probably for non-canonical address 0xdffffc0000000002: 0000 [#1] PREEMPT SMP KASAN NOPTI", []string{"KernelOops"}},
		{"Internal error: Oops: 0000000096000005 [#1] PREEMPT SMP", []string{"KernelOops"}},
		{"kernel BUG at fs/ext4/inode.c:847!", []string{"KernelOops"}},
		{"#PF: supervisor write access in kernel mode", nil},
		{"BUG: Bad page state in process swapper/0  pfn:1fe00", nil},
		{"WARNING: CPU: 3 PID: 1 at kernel/workqueue.c:3182 __flush_work+0x2b/0x40", nil},

		// ext4 errors.
		{"EXT4-fs error (device sda1): ext4_find_entry:1455: inode #2: comm ls: reading directory lblock 0", []string{"Ext4Error"}},
		{"EXT4-fs error (device dm-17): ext4_journal_check_start:87: comm mosquitto: Detected aborted journal", []string{"Ext4Error"}},
		{"EXT4-fs error (device loop0) in ext4_reserve_inode_write:5762: Journal has aborted", []string{"Ext4Error"}},
		{"EXT4-fs (sda1): mounted filesystem 1b2c3d4e-0000-4a1b-9c8d-0123456789ab r/w with ordered data mode. Quota mode: none.", nil},
		{"EXT4-fs warning (device sda1): ext4_dx_add_entry:2516: Directory (ino: 1234) index full, reach max htree level :2", nil},

		// Block I/O errors.
		{"I/O error, dev sda, sector 123456 op 0x0:(READ) flags 0x80700 phys_seg 1 prio class 2", []string{"IOError"}},
		{"blk_update_request: I/O error, dev sdb, sector 2048 op 0x1:(WRITE) flags 0x800 phys_seg 1 prio class 0", []string{"IOError"}},
		{"Buffer I/O error on dev dm-0, logical block 8733688, async page read", []string{"IOError"}},
		{"critical medium error, dev nvme0n1, sector 1234 op 0x0:(READ) flags 0x0 phys_seg 1 prio class 2", nil},
		{"nvme0n1: I/O Cmd(0x2) @ LBA 1234, 8 blocks, I/O Error (sct 0x2 / sc 0x81)", nil},

		// Read-only filesystems.
		{"EXT4-fs (loop0): Remounting filesystem read-only", []string{"ReadonlyFilesystem/FilesystemIsReadOnly"}},
		{"EXT2-fs (sdb1): error: remounting filesystem read-only", []string{"ReadonlyFilesystem/FilesystemIsReadOnly"}},
		{"EXT4-fs (sda1): re-mounted 1b2c3d4e-0000-4a1b-9c8d-0123456789ab ro. Quota mode: none.", nil},

		// XFS shutdowns.
		{"XFS (loop1): Corruption of in-memory data (0x8) detected at xfs_trans_cancel+0x14f/0x170 [xfs] (fs/xfs/xfs_trans.c:1097).  Shutting down filesystem.", []string{"ReadonlyFilesystem/XFSShutdown"}},
		{"XFS (vda3): Metadata I/O Error (0x4) detected at xfs_fs_goingdown+0x4b/0x180 [xfs] (fs/xfs/xfs_fsops.c:492).  Shutting down filesystem.", []string{"ReadonlyFilesystem/XFSShutdown"}},
		{"XFS (dm-0): Filesystem has been shut down due to log error (0x2).", []string{"ReadonlyFilesystem/XFSShutdown"}},
		{"XFS (sdb): Corruption of in-memory data detected.  Shutting down filesystem", []string{"ReadonlyFilesystem/XFSShutdown"}},
		{"XFS (sda4): Please unmount the filesystem and rectify the problem(s)", nil},
		{"XFS (sda2): Unmounting Filesystem 1b2c3d4e-0000-4a1b-9c8d-0123456789ab", nil},
		{"XFS (sda2): Ending clean mount", nil},
	} {
		t.Run(tc.message, func(t *testing.T) {
			// A fresh matcher per message: these rules are all one line.
			var got []string
			for _, match := range NewMatcher(Defaults()).Match(tc.message) {
				got = append(got, describe(match))
				if match.Message != tc.message || match.Source != "nodeward-kernel" {
					t.Errorf("match %+v: want Message the line itself and source nodeward-kernel", match)
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("matched %q, want %q", got, tc.want)
			}
		})
	}
}

func describe(match Match) string {
	if match.Rule.Type == Permanent {
		return match.Rule.Condition + "/" + match.Rule.Reason
	}
	return match.Rule.Reason
}

func TestDefaultsDoNotRefireOnLaterLines(t *testing.T) {
	m := NewMatcher(Defaults())
	if got := m.Match("EXT4-fs (sda1): Remounting filesystem read-only"); len(got) != 1 {
		t.Fatalf("got %d matches, want 1", len(got))
	}
	for _, line := range []string{"EXT4-fs (sda1): re-mounted. Quota mode: none.", "audit: type=1400"} {
		if got := m.Match(line); len(got) != 0 {
			t.Errorf("%q matched %+v", line, got)
		}
	}
}

func TestDeviceOf(t *testing.T) {
	for message, want := range map[string]string{
		"EXT4-fs (loop0): Remounting filesystem read-only":                                            "loop0",
		"EXT2-fs (sdb1): error: remounting filesystem read-only":                                      "sdb1",
		"EXT4-fs error (device dm-17): ext4_journal_check_start:87: comm x: Detected aborted journal": "dm-17",
		"EXT4-fs error (device loop0) in ext4_reserve_inode_write:5762: Journal has aborted":          "loop0",
		"XFS (loop1): Filesystem has been shut down due to log error (0x2).":                          "loop1",
		"XFS (nvme0n1p2): Corruption of in-memory data detected.  Shutting down filesystem":           "nvme0n1p2",
		"I/O error, dev sda, sector 123456 op 0x0:(READ) flags 0x80700 phys_seg 1 prio class 2":       "sda",
		"Buffer I/O error on dev dm-0, logical block 8733688, async page read":                        "dm-0",
		"EXT4-fs (sda1): mounted\nXFS (sdc): Filesystem has been shut down due to log error (0x2).":   "sdc",
		"INFO: task kubelet:2211 blocked for more than 120 seconds.":                                  "",
		"Remounting filesystem read-only":                                                             "",
		"":                                                                                            "",
	} {
		if got := DeviceOf(message); got != want {
			t.Errorf("DeviceOf(%q) = %q, want %q", message, got, want)
		}
	}
}
