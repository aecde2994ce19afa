// Package daemon is the node agent: one API client, one watch of its own
// Node shared by its two halves — host health (daemon/health) and the OS
// update state machine (daemon/update) — readiness and sd_notify, and the
// metrics endpoint. It owns the process lifecycle; cmd/nodeward only turns
// flags into a Config. docs/architecture.md maps the packages.
package daemon
