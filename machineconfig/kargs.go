package machineconfig

import "slices"

// parseKernelArgs splits spec.kernelArguments entries into single
// arguments. An entry may hold several; a double quote protects white
// space up to the next quote and cannot be escaped, as in the kernel's own
// command line parser (next_arg in lib/cmdline.c) and in the MCD.
func parseKernelArgs(entries []string) []string {
	var args []string
	for _, e := range entries {
		args = append(args, splitKernelArgs(e)...)
	}
	return args
}

func splitKernelArgs(s string) []string {
	var args []string
	for i := 0; i < len(s); {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		start, quoted := i, false
		for ; i < len(s) && (quoted || !isSpace(s[i])); i++ {
			if s[i] == '"' {
				quoted = !quoted
			}
		}
		if i > start {
			args = append(args, s[start:i])
		}
	}
	return args
}

// isSpace is C's isspace in the C locale, which the kernel uses.
func isSpace(b byte) bool {
	return b == ' ' || b == '\f' || b == '\n' || b == '\r' || b == '\t' || b == '\v'
}

// kernelArgsDiff is the MCD's kernel argument change: when the lists
// differ at all, delete every old argument and append every new one, in
// order and with repetitions. A set difference would be shorter but wrong
// for arguments whose order or repetition matters (console=, several
// hugepagesz=/hugepages= pairs); the MCD moved away from it for that
// reason (bugzilla 1866546). Unlike the MCD, nodeward compares the split
// arguments, so regrouping the same arguments into other entries is no
// change.
func kernelArgsDiff(old, new []string) (del, add []string) {
	if slices.Equal(old, new) {
		return nil, nil
	}
	return slices.Clone(old), slices.Clone(new)
}
