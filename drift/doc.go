// Package drift watches the files and units of the node's current
// MachineConfig for changes made behind nodeward's back, as the
// machine-config-daemon's Config Drift Monitor does (pkg/daemon in the
// machine-config-operator): inotify on the parent directories of the
// config's paths, and on an event for one of them a re-check of the whole
// config through machineconfig.Writer.Drift, which words the first drifted
// path as the MCD's validateOnDiskState does (content mismatch for file
// "/etc/foo", mode mismatch for file: …). The agent marks the node
// Degraded with that message while drift lasts.
//
// Unlike the MCD's monitor, which stops at the first drift, Monitor keeps
// watching and reports the drift gone once the path is put back, and it
// re-checks the config periodically as a safety net for what inotify
// misses. Paths whose directories do not exist yet are watched through
// their nearest existing ancestor, and watched anew when created.
//
// It imports machineconfig only; nothing of the agent.
package drift
