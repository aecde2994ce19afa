package kernelrules

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// validFile is a small rule file in NPD's format that every Parse error
// case below breaks in exactly one place.
const validFile = `{
  "plugin": "kmsg",
  "logPath": "/dev/kmsg",
  "lookback": "5m",
  "bufferSize": 10,
  "source": "kernel-monitor",
  "metricsReporting": true,
  "conditions": [
    {"type": "KernelDeadlock", "reason": "KernelHasNoDeadlock", "message": "kernel has no deadlock"}
  ],
  "rules": [
    {"type": "temporary", "reason": "OOMKilling", "pattern": "Killed process \\d+ .*"},
    {"type": "permanent", "condition": "KernelDeadlock", "reason": "DockerHung",
     "pattern": "task docker:\\w+ blocked for more than \\w+ seconds\\."}
  ]
}`

func TestParseValidFile(t *testing.T) {
	file, err := Parse("kernel-monitor.json", []byte(validFile))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if file.Source != "kernel-monitor" || file.BufferSize != 10 || len(file.Rules) != 2 {
		t.Errorf("got source %q, bufferSize %d, %d rules", file.Source, file.BufferSize, len(file.Rules))
	}
	if file.Rules[1].Type != Permanent || file.Rules[1].Condition != "KernelDeadlock" {
		t.Errorf("rule 1 = %+v", file.Rules[1])
	}
	if file.LookbackDuration() != 5*time.Minute {
		t.Errorf("LookbackDuration = %v, want 5m", file.LookbackDuration())
	}
}

func TestParseDefaultsBufferSize(t *testing.T) {
	data := strings.Replace(validFile, `"bufferSize": 10,`, "", 1)
	file, err := Parse("f.json", []byte(data))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if file.BufferSize != DefaultBufferSize {
		t.Errorf("BufferSize = %d, want NPD's default %d", file.BufferSize, DefaultBufferSize)
	}
}

func TestParseErrorsNameFileRuleAndField(t *testing.T) {
	for _, tc := range []struct {
		name    string
		old     string // text of validFile to replace
		new     string
		wantErr string // the whole prefix and a telling part of the cause
	}{
		{"bad regexp", `"Killed process \\d+ .*"`, `"Killed (process"`,
			`kernel-monitor.json: rules[0] (reason "OOMKilling").pattern: error parsing regexp: missing closing ): `},
		{"empty pattern", `"Killed process \\d+ .*"`, `""`,
			`kernel-monitor.json: rules[0] (reason "OOMKilling").pattern: empty`},
		{"pattern matching every line", `"Killed process \\d+ .*"`, `"x*"`,
			`kernel-monitor.json: rules[0] (reason "OOMKilling").pattern: matches an empty line`},
		{"empty reason", `"reason": "OOMKilling"`, `"reason": ""`,
			`kernel-monitor.json: rules[0].reason: empty`},
		{"unknown rule type", `"type": "temporary"`, `"type": "transient"`,
			`kernel-monitor.json: rules[0] (reason "OOMKilling").type: "transient" is neither "temporary" nor "permanent"`},
		{"permanent without condition", `"condition": "KernelDeadlock", `, ``,
			`kernel-monitor.json: rules[1] (reason "DockerHung").condition: empty: a permanent rule must name`},
		{"undeclared condition", `"condition": "KernelDeadlock", `, `"condition": "DiskPressure", `,
			`kernel-monitor.json: rules[1] (reason "DockerHung").condition: "DiskPressure" is not declared in conditions`},
		{"unknown rule field", `"reason": "DockerHung",`, `"reason": "DockerHung", "severity": "high",`,
			`kernel-monitor.json: rules[1] (reason "DockerHung").severity: unknown field`},
		{"misspelt rule field", `"pattern": "Killed`, `"patern": "Killed`,
			`kernel-monitor.json: rules[0] (reason "OOMKilling").patern: unknown field`},
		{"unknown top-level field", `"source":`, `"sourcee": "x", "source":`,
			`kernel-monitor.json: sourcee: unknown field`},
		{"unknown condition field", `"message": "kernel has no deadlock"`, `"message": "x", "status": "False"`,
			`kernel-monitor.json: conditions[0] (type "KernelDeadlock").status: unknown field`},
		{"other plugin", `"plugin": "kmsg"`, `"plugin": "journald"`,
			`kernel-monitor.json: plugin: "journald" is not supported: nodeward reads the kernel log from /dev/kmsg only`},
		{"other log path", `"logPath": "/dev/kmsg"`, `"logPath": "/var/log/kern.log"`,
			`kernel-monitor.json: logPath: "/var/log/kern.log" is not supported`},
		{"skip list", `"plugin": "kmsg",`, `"plugin": "kmsg", "skipList": ["audit"],`,
			`kernel-monitor.json: skipList: not supported`},
		{"negative buffer", `"bufferSize": 10`, `"bufferSize": -1`,
			`kernel-monitor.json: bufferSize: -1 is out of range`},
		{"absurd buffer", `"bufferSize": 10`, `"bufferSize": 100000000`,
			`kernel-monitor.json: bufferSize: 100000000 is out of range`},
		{"bad lookback", `"lookback": "5m"`, `"lookback": "5 minutes"`,
			`kernel-monitor.json: lookback: want a Go duration such as "5m": time: unknown unit`},
		{"negative lookback", `"lookback": "5m"`, `"lookback": "-5m"`,
			`kernel-monitor.json: lookback: "-5m" is negative`},
		{"no source", `"source": "kernel-monitor"`, `"source": ""`,
			`kernel-monitor.json: source: empty`},
		{"duplicate condition", `"conditions": [`,
			`"conditions": [{"type": "KernelDeadlock", "reason": "R", "message": "m"},`,
			`kernel-monitor.json: conditions[1] (type "KernelDeadlock").type: declared twice`},
		{"wrong JSON type", `"bufferSize": 10`, `"bufferSize": "10"`,
			`kernel-monitor.json: decoding JSON: json: cannot unmarshal string`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := strings.Replace(validFile, tc.old, tc.new, 1)
			if data == validFile {
				t.Fatalf("test case does not change the file: %q not found", tc.old)
			}
			_, err := Parse("kernel-monitor.json", []byte(data))
			if err == nil {
				t.Fatalf("Parse succeeded, want error %q", tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error\n  %v\nwant it to contain\n  %s", err, tc.wantErr)
			}
			var parseErr *ParseError
			if !errors.As(err, &parseErr) {
				t.Errorf("error %v is not a *ParseError", err)
			}
		})
	}
}

func TestParseRejectsTrailingData(t *testing.T) {
	_, err := Parse("f.json", []byte(validFile+` {}`))
	want := "f.json: decoding JSON: unexpected data after the top-level object"
	if err == nil || err.Error() != want {
		t.Errorf("err = %v, want %s", err, want)
	}
}

func TestParseReportsEveryProblem(t *testing.T) {
	data := strings.Replace(validFile, `"reason": "OOMKilling"`, `"reason": ""`, 1)
	data = strings.Replace(data, `"lookback": "5m"`, `"lookback": "soon"`, 1)
	_, err := Parse("f.json", []byte(data))
	if err == nil {
		t.Fatal("Parse succeeded")
	}
	for _, want := range []string{"f.json: lookback:", "f.json: rules[0].reason: empty"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestParseRejectsEmptyRuleList(t *testing.T) {
	_, err := Parse("f.json", []byte(`{"source": "s", "rules": []}`))
	if err == nil || !strings.Contains(err.Error(), "f.json: rules: no rules") {
		t.Errorf("err = %v, want rules: no rules", err)
	}
}

func TestParseNeverPanicsOnHostilePatterns(t *testing.T) {
	for _, pattern := range []string{`(`, `\`, `[z-a]`, `x{1001}`, `(?P<>x)`, `\Qabc`, `a**`, `\8`} {
		data := strings.Replace(validFile, `"Killed process \\d+ .*"`, jsonString(pattern), 1)
		// Either outcome is fine; the call must return.
		_, _ = Parse("f.json", []byte(data))
	}
}

func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	b.WriteByte('"')
	return b.String()
}
