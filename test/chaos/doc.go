// Package chaos runs an UpdatePool rollout of real `nodeward agent`
// processes (sim.ProcNode) under two leader-elected `nodeward coordinator`
// replicas on its own real control plane, injects faults at random from a
// seed (agents and the leader killed with SIGKILL, the leader paused with
// SIGSTOP past its Lease, kube-apiserver and etcd crashed and restarted on
// the same data dir, nodes relabelled between pools, maxUnavailable lowered,
// the target changed, admin cordons, pre-drain hooks, PDB-blocked drains, a
// Node deleted while its machine reboots and registered again when it boots,
// a worker pool deleted and re-created, a worker pool's drain policy
// switched between Force and Retry; one worker pool soaks, the other bakes a
// canary), and checks the safety invariants with an independent watcher
// (Watcher) that shares no code with the product's definition of an
// unavailable node. docs/reliability.md describes the run and its results.
package chaos
