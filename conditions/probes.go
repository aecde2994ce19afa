package conditions

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
)

// probeKinds are the probes nodeward knows, in condition order (the order
// of v1alpha1.HealthConditions). Each kind lives in one file with its config
// section, its metrics and the condition it owns. Adding a probe is that
// file, a line here, its section's field in Config and its condition type
// in api/v1alpha1.
var probeKinds = []probeKind{
	memoryKind,
	diskKind,
	pidsKind,
	networkKind,
	runtimeKind,
	kernelKind,
}

// probeKind describes one probe for the list above.
type probeKind struct {
	// name names the probe in metrics and logs, and its config section.
	name string
	// conditions are the node condition types the kind's probes decide,
	// one probe each, in the order build returns them.
	conditions []conditionRow
	// section is the kind's part of a Config.
	section func(*Config) section
	// build makes the probes of a valid cfg whose section is enabled.
	build func(cfg *Config, env *Env) []Probe
}

// conditionRow is one condition of a probe kind and its default taint.
type conditionRow struct {
	condition corev1.NodeConditionType
	// taint is the name under nodeward.io/ of the default policy row.
	taint string
}

// section is one probe's part of the configuration.
type section interface {
	// enabled reports whether the probe runs.
	enabled() bool
	// setDefaults replaces the section with its defaults.
	setDefaults()
	// validate adds the section's invalid values to errs, naming each
	// field under prefix ("memory.").
	validate(prefix string, errs *FieldErrors)
}

// Env is what probes share besides their config sections.
type Env struct {
	// Registerer receives each probe's own metrics; nil registers them
	// nowhere (`nodeward check`).
	Registerer prometheus.Registerer
	// Now stamps samples and decides the age of events; time.Now when nil.
	Now func() time.Time
	// NetworkOptions adjust the network probe (tests watch a namespace).
	NetworkOptions []NetworkOption
	// Log receives what probes say once (the runtime endpoint found);
	// slog.Default when nil.
	Log *slog.Logger
	// Events receives the Warning Events of temporary kernel problems (an
	// OOM kill, an oops); nil drops them.
	Events func(reason, message string)
	// RuntimeRoot prefixes the paths of the runtime socket candidates:
	// tests lay a host's /run out under a temporary directory.
	RuntimeRoot string
}

func (e *Env) registerer() prometheus.Registerer {
	if e == nil || e.Registerer == nil {
		return prometheus.NewRegistry()
	}
	return e.Registerer
}

func (e *Env) now() func() time.Time {
	if e == nil || e.Now == nil {
		return time.Now
	}
	return e.Now
}

// Probes builds the enabled probes of cfg, in condition order; a nil env
// stands for the defaults. Close releases what they hold.
func Probes(cfg Config, env *Env) []Probe {
	var out []Probe
	for _, k := range probeKinds {
		if k.section(&cfg).enabled() {
			out = append(out, k.build(&cfg, env)...)
		}
	}
	return out
}

// Close releases the resources of probes that hold any (netlink sockets).
func Close(probes []Probe) {
	for _, p := range probes {
		if c, ok := p.(interface{ Close() }); ok {
			c.Close()
		}
	}
}
