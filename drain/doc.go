// Package drain empties a node for maintenance: cordon and uncordon that
// remember who cordoned, ordered and PDB-aware eviction, lifecycle hooks that
// hold a drain, and reports naming whatever blocks it.
package drain
