// Package update is the agent's OS update state machine. It stages the
// pool's target ahead of its slot, waits for the coordinator's grant, then
// cordons, drains, finalizes, reboots, verifies the booted OS, waits for
// the node to serve and uncordons — or yields the slot, or rolls back — one
// persisted step at a time, so that a crash or the reboot itself resumes
// the step it interrupted.
//
// Machine runs the lifecycle of one node. Its steps are the v1alpha1.Step
// values, each performed by one idempotent step function that returns the
// next step: steps.go maps them, and steps_slot.go, steps_disrupt.go and
// steps_return.go hold the functions from before, during and after the
// disruption. What a step means to the protocol (disrupting, holding a
// slot, critical, …) is its row in api/v1alpha1's step table; how the
// agent announces it, stepNotices here. State is what the machine persists
// through a StateStore (Store: one file, replaced atomically).
//
// The machine reaches the world only through the ports of ports.go —
// OSUpdater, Rebooter, Workloads, NodeSource, Protocol, ErrorReporter,
// ServiceCheck — so tests drive it with fakes. The adapters to the real
// edges live here too: OSUpdate (osupdate's rpm-ostree), KubeWorkloads
// (drain), AnnotationProtocol (nodeward's node annotations), NodeEvents
// and Metrics.
//
// It imports api/v1alpha1, api/kube, drain, osupdate and atomicfile. The
// agent (package daemon) builds and runs the Machine, daemon/mco
// implements its ports for the machine-config operator, and cmd/nodeward
// and the simulators under test/ wire it as well.
package update
