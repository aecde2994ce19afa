package v1alpha1

// Drain annotations (package drain, docs/drain.md).
const (
	// AnnotationCordonedBy records on a Node that nodeward cordoned it. It
	// is written in the same update as the cordon, so a restarted agent or
	// a later `nodeward uncordon` knows the cordon is nodeward's own and
	// never lifts one an administrator made.
	AnnotationCordonedBy = protocolPrefix + "cordoned-by"

	// AnnotationDrainOrder on a Pod overrides the drain order the rules
	// give it: an integer, lower drains first.
	AnnotationDrainOrder = "drain.nodeward.io/order"
)
