package kernelrules

import "time"

// Kind says what a matched rule produces: a one-off event (Temporary) or a
// node condition that stays set (Permanent).
type Kind string

const (
	// Temporary rules produce an event per match.
	Temporary Kind = "temporary"
	// Permanent rules set their condition to true with the rule's reason.
	Permanent Kind = "permanent"
)

// DefaultBufferSize is the number of log lines a file's buffer keeps when
// the file leaves bufferSize out or sets it to 0, as NPD defaults it.
const DefaultBufferSize = 10

// MaxBufferSize bounds bufferSize. Every rule of a file is matched against
// the whole joined buffer on every message, so a large buffer multiplies
// the regexp work per kernel message; NPD's own files use 10.
const MaxBufferSize = 1000

// File is one rule file in the format of NPD's system-log-monitor
// (config/kernel-monitor.json and friends). The JSON names are NPD's.
type File struct {
	// Plugin is the log watcher NPD would use; only "kmsg" (or empty) is
	// accepted because nodeward reads the kernel log from /dev/kmsg only.
	Plugin string `json:"plugin,omitempty"`
	// PluginConfig is passed to NPD's watcher plugin; kept for
	// compatibility and not interpreted here.
	PluginConfig map[string]string `json:"pluginConfig,omitempty"`
	// SkipList is honoured by NPD's filelog plugin only; Parse rejects a
	// non-empty one rather than let it look effective.
	SkipList []string `json:"skipList,omitempty"`
	// LogPath must be empty or /dev/kmsg.
	LogPath string `json:"logPath,omitempty"`
	// Lookback is how far back in the kernel log the reader should start,
	// as a Go duration ("5m"). See LookbackDuration.
	Lookback string `json:"lookback,omitempty"`
	// Delay is how long after boot the reader should skip, as a Go
	// duration. See DelayDuration.
	Delay string `json:"delay,omitempty"`
	// BufferSize is the number of most recent lines a rule can span. Parse
	// replaces 0 with DefaultBufferSize.
	BufferSize int `json:"bufferSize,omitempty"`
	// Source names the monitor in reported matches ("kernel-monitor").
	Source string `json:"source"`
	// MetricsReporting is NPD's switch for problem metrics; kept for the
	// agent to honour.
	MetricsReporting *bool `json:"metricsReporting,omitempty"`
	// Conditions declares every condition a permanent rule may set, with
	// the healthy state the condition starts in.
	Conditions []Condition `json:"conditions,omitempty"`
	// Rules are matched in order against the buffer on every message.
	Rules []Rule `json:"rules"`
}

// Condition is a node condition's healthy default: its type and the reason
// and message it carries while no permanent rule has matched.
type Condition struct {
	Type    string `json:"type"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// Rule is one problem pattern.
type Rule struct {
	Type Kind `json:"type"`
	// Condition is the condition type a permanent rule sets; NPD ignores
	// it on temporary rules and so does this package.
	Condition string `json:"condition,omitempty"`
	// Reason is the short CamelCase reason of the event or condition.
	Reason string `json:"reason"`
	// Pattern is a Go regexp (RE2) that must match up to the end of the
	// buffered log; see the package doc for the exact semantics.
	Pattern string `json:"pattern"`
	// PatternGeneratedMessageSuffix, when set, is appended to the matched
	// lines after "; " to form the message, as NPD does.
	PatternGeneratedMessageSuffix string `json:"patternGeneratedMessageSuffix,omitempty"`
}

// LookbackDuration is Lookback parsed; empty means 0. Parse has checked it.
func (f *File) LookbackDuration() time.Duration {
	return durationOrZero(f.Lookback)
}

// DelayDuration is Delay parsed; empty means 0. Parse has checked it.
func (f *File) DelayDuration() time.Duration {
	return durationOrZero(f.Delay)
}

// durationOrZero returns 0 for an empty or (on a File built by hand
// rather than parsed) invalid value, so the accessors never panic.
func durationOrZero(value string) time.Duration {
	if value == "" {
		return 0
	}
	d, err := time.ParseDuration(value)
	if err != nil {
		return 0
	}
	return d
}
