package machineconfig

import (
	"fmt"
	"unicode/utf8"
)

// maxValueLen bounds how much of an offending value an error repeats:
// enough to recognise it, never a whole file's contents in a log line.
const maxValueLen = 64

// FieldError is a MachineConfig field nodeward cannot use: Field is its path
// from the object's root (spec.config.systemd.units[0].name), Value the
// offending value (truncated), Reason why it is refused.
type FieldError struct {
	Field  string
	Value  string
	Reason string
}

func (e *FieldError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("%s: %s", e.Field, e.Reason)
	}
	return fmt.Sprintf("%s %q: %s", e.Field, e.Value, e.Reason)
}

// fieldErr builds a FieldError with the value already truncated, so that no
// caller can forget to.
func fieldErr(field, value, reason string) *FieldError {
	return &FieldError{Field: field, Value: truncate(value), Reason: reason}
}

// truncate shortens s to maxValueLen bytes without splitting a UTF-8
// sequence, marking the cut with an ellipsis.
func truncate(s string) string {
	if len(s) <= maxValueLen {
		return s
	}
	cut := maxValueLen
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// UnreconcilableError is a change between two MachineConfigs that nodeward
// will not make in place: either the MCD would refuse it too, or nodeward
// does not implement it. Field is the path of the first such field.
type UnreconcilableError struct {
	Field  string
	Reason string
}

func (e *UnreconcilableError) Error() string {
	return fmt.Sprintf("unreconcilable change to %s: %s", e.Field, e.Reason)
}
