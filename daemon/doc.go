// Package daemon is the node agent: it wires the probes, the drain and the OS
// update together and runs the persisted update state machine that follows
// the coordinator's grants through the node protocol.
package daemon
