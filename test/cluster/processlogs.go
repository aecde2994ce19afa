package cluster

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The logs of a helper process a test starts and restarts (test/mco's MCO
// controllers, test/machineapi's Machine API controllers): one file per
// start.

// LogContains reports whether the log at path holds text.
func LogContains(path, text string) bool {
	data, _ := os.ReadFile(path)
	return strings.Contains(string(data), text)
}

// DumpLogs prints the tail of each log to t: a failed assertion on the
// process's behaviour is explained there, and t.TempDir goes away.
func DumpLogs(t testing.TB, logs []string) {
	t.Helper()
	for _, l := range logs {
		data, err := os.ReadFile(l)
		if err != nil {
			t.Logf("%s: %v", l, err)
			continue
		}
		t.Logf("---- %s (last 32 KiB) ----\n%s", filepath.Base(l), Tail(data, 32<<10))
	}
}

// Tail is the last n bytes of data, from the start of a line.
func Tail(data []byte, n int) string {
	if len(data) > n {
		data = data[len(data)-n:]
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			data = data[i+1:]
		}
	}
	return string(data)
}
