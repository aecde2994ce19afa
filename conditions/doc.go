// Package conditions turns what the host reports into node health: probes
// (memory, disk, PIDs, network, container runtime) produce signals, signals
// become nodeward-owned node conditions with hysteresis, and a policy table
// maps conditions to taints. Each probe is one file (see probes.go).
package conditions
