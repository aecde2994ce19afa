// Package mco lets the update machine (daemon/update) stand in for the
// machine-config-daemon on an OpenShift node (--protocol=mco): the
// machine-config operator's controllers grant and watch the update, and
// nodeward performs it.
//
// Protocol implements update.Protocol and update.ErrorReporter over the
// MCD's node annotations: desiredConfig is the grant and target, and the
// agent reports the MCD's state (Done, Working, Degraded, Unreconcilable),
// its reason and, when done, currentConfig; steps.go is the one table from
// nodeward's steps to that state and to the phases of the node's
// MachineConfigNode, which NodeStatus keeps (conditions.go). Host
// implements update.OSUpdater by applying a whole rendered MachineConfig
// (Configs reads and parses them): the OS image and kernel arguments
// through an OS updater, the files, units and SSH keys through
// machineconfig. DrainHandshake implements update.Workloads through the
// MCO's drain controller, and Coexistence keeps nodeward from acting while
// a machine-config-daemon runs on the node. CertificateWriter (certs.go,
// certfiles.go) is the daemon's certificate writer: it follows the
// ControllerConfig and writes its CAs and pull secret to the host, and
// merges a rotated service CA into the kubeconfig.
//
// It imports daemon/update for the ports it implements, api/v1alpha1,
// api/kube, drain, machineconfig, osupdate and atomicfile; the agent
// (package daemon, agent_mco.go) is what imports it.
package mco
