package main

import (
	"errors"
	"strings"

	"github.com/spf13/cobra"
)

// Exit codes shared by every command. Command-specific codes (check's 1
// and 2, drain's 2 and 3, uncordon's 2) sit below them; usage and
// configuration errors take the sysexits.h codes so that they never
// collide with a command's own.
const (
	exitFailed = 1
	// exitUsage: an unknown command or flag, a bad flag value, a wrong
	// number of arguments (EX_USAGE).
	exitUsage = 64
	// exitConfig: a configuration, rules or kubeconfig file that cannot
	// be read or is invalid (EX_CONFIG).
	exitConfig = 78
)

// exitError carries a specific process exit code, for commands whose exit
// code is part of their contract (check: 1 unhealthy, 2 probe failed).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageError(err error) error  { return &exitError{code: exitUsage, err: err} }
func configError(err error) error { return &exitError{code: exitConfig, err: err} }

// exitCode is err's exit code: an exitError's own, else 1.
func exitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return exitFailed
}

// ranAnnotation marks, on the root command, that a command got past
// cobra's parsing and argument checks and started.
const ranAnnotation = "nodeward.io/ran"

// rootExitCode is the exit code of root's execution ending in err: an
// error before any command started (cobra's unknown command or flag, a
// wrong argument count) is a usage error.
func rootExitCode(root *cobra.Command, err error) int {
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	if root.Annotations[ranAnnotation] == "" {
		return exitUsage
	}
	return exitFailed
}

// exitCodesHelp is the "Exit codes" paragraph of a command's --help:
// the command's own codes, then the shared ones.
func exitCodesHelp(own ...string) string {
	lines := append([]string{"0 success"}, own...)
	lines = append(lines, "64 usage error (unknown flag or command, bad flag value or arguments)",
		"78 configuration error (a file or the cluster credentials cannot be read or are invalid)")
	return "\n\nExit codes:\n  " + strings.Join(lines, "\n  ")
}
