package kernelrules

import (
	_ "embed"
	"regexp"
	"strings"
)

// defaultsName names the embedded rule file in errors.
const defaultsName = "defaults.json"

//go:embed defaults.json
var defaultRules []byte

// Defaults returns nodeward's own kernel rules (source "nodeward-kernel"),
// parsed afresh so that callers may change their copy. It panics only if
// the embedded file is invalid, which TestDefaultsParse rules out.
func Defaults() *File {
	file, err := Parse(defaultsName, defaultRules)
	if err != nil {
		panic("kernelrules: embedded default rules are invalid: " + err.Error())
	}
	return file
}

// deviceForms are the ways kernel messages name a block device, most
// specific first. Each has one group: the device's kernel name.
var deviceForms = []*regexp.Regexp{
	// ext4_msg and friends: "EXT4-fs (sda1): ...", "EXT2-fs (sdb1): ...".
	regexp.MustCompile(`\b[A-Z0-9]+-fs \(([^)\s]+)\):`),
	// __ext4_error: "EXT4-fs error (device sda1): ..." and "... (device sda1) in ...".
	regexp.MustCompile(`-fs error \(device ([^)\s]+)\)`),
	// xfs_printk: "XFS (loop1): ...".
	regexp.MustCompile(`\bXFS \(([^)\s]+)\):`),
	// blk_print_req_error: "I/O error, dev sda, sector 2048 ...".
	regexp.MustCompile(`I/O error, dev ([^,\s]+),`),
	// Buffer head errors: "Buffer I/O error on dev dm-0, logical block ...".
	regexp.MustCompile(`I/O error on dev ([^,\s]+),`),
}

// DeviceOf returns the kernel name of the block device a kernel message
// names ("loop0" for "EXT4-fs (loop0): Remounting filesystem read-only"),
// or "" when it names none, so the agent can re-check that device's mounts
// later. Given a multi-line match message it reads the newest line first.
func DeviceOf(message string) string {
	lines := strings.Split(message, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		for _, form := range deviceForms {
			if groups := form.FindStringSubmatch(lines[i]); groups != nil {
				return groups[1]
			}
		}
	}
	return ""
}
