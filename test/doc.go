// Package test is the root of nodeward's test support: the real local
// control plane (test/cluster), test doubles for the OS edge and end-to-end
// scenarios.
package test
