// Package osupdate drives rpm-ostree: it reads the deployment status, stages a
// target with finalization locked, finalizes it, verifies the booted OS and
// rolls back, every call bounded by a timeout and retried when transient.
package osupdate
