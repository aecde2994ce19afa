// Package coordinator grants update slots to nodes so that no pool ever has
// more than maxUnavailable nodes disrupted, honouring failure domains, the
// control-plane rule and maintenance windows, and reports pool status.
package coordinator
