// Package disruption computes what applying a rendered MachineConfig does to
// a node under the MCO's Node Disruption Policies: which actions follow the
// config change (reboot, drain, reload or restart a service, systemd
// daemon-reload, nothing) and whether the node is drained first.
//
// It mirrors the machine-config-daemon rather than redesigning it, so that a
// node run by nodeward is disrupted exactly when the MCD would disrupt it.
// The pieces and the MCO functions they follow:
//
//   - Policies, PoliciesFrom, Ready, StatusObject: the cluster policies the
//     operator publishes in MachineConfiguration/cluster's
//     status.nodeDisruptionPolicyStatus.clusterPolicies (the API types
//     NodeDisruptionPolicyStatus and friends in operator.openshift.io/v1), and
//     the daemon's wait for that status to be current (metadata.generation
//     equal to status.observedGeneration) in
//     calculatePostConfigChangeNodeDisruptionAction.
//   - DefaultPolicies, MergePolicies: the operator's default table and its
//     merge of spec.nodeDisruptionPolicy over it (apihelpers'
//     defaultClusterPolicies and MergeClusterPolicies).
//   - Diff: the daemon's newMachineConfigDiff for the fields that force a
//     reboot, with the changed file paths of common.CalculateConfigFileDiffs
//     and the changed unit names of common.GetChangedConfigUnitsByType.
//   - Compute: calculatePostConfigChangeNodeDisruptionAction and
//     calculatePostConfigChangeNodeDisruptionActionFromMCDiffs (the force
//     file, reboot-only fields, the longest matching file policy of
//     common.FindClosestFilePolicyPathMatch, unit and SSH key policies,
//     reboot dominating, None dropped beside other actions), then
//     isDrainRequiredForNodeDisruptionActions for the drain.
//   - SafeRegistriesChange: isSafeContainerRegistryConfChanges with
//     searchRegistryMirror and allDigestOnlyMirror, the rules under which a
//     change of /etc/containers/registries.conf (the Special action) needs
//     no drain. It decodes the file with the TOML library containers/image
//     uses, into the fields of sysregistriesv2's types that the rules read
//     (registriesFile: the package itself would cost the agent 3.1 MiB of
//     RSS at start).
//
// The package performs nothing: it only says what to do and why (Plan's
// Reasons), for the update machine to act on and for status messages. It is
// a leaf that imports nothing of nodeward but machineconfig.
package disruption
