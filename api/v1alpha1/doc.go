// Package v1alpha1 holds the nodeward.io/v1alpha1 API: the UpdatePool type
// and the names (annotations, condition types, Lease) that agents and the
// coordinator share on Node objects.
package v1alpha1
