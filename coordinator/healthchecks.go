package coordinator

// The MachineHealthChecks above the Machines: which of them would judge a
// Machine, and which nodeward paused while a node it covers updates
// (remediationhold.go).

import (
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// PausedAnnotation pauses a whole MachineHealthCheck: its controller
// (OpenShift's and Cluster API's alike) skips it while the annotation is
// there, whatever its value. nodeward writes RemediationHoldValue and
// removes only that value: a health check paused by anyone else stays as
// they left it.
const PausedAnnotation = "cluster.x-k8s.io/paused"

// RemediationHoldValue marks a remediation hold as nodeward's: the value of
// PausedAnnotation on a MachineHealthCheck, of SkipRemediationAnnotation on
// a Cluster API Machine.
const RemediationHoldValue = "nodeward.io/update"

// healthCheckRecord is what the coordinator keeps of one
// MachineHealthCheck.
type healthCheckRecord struct {
	key             string // "<api>/<namespace>/<name>"
	api             string // machineAPI.name
	namespace, name string
	// selector picks the Machines it judges, in its namespace; nil when it
	// cannot be parsed (the controller then judges none).
	selector labels.Selector
	// paused: it carries PausedAnnotation; ours: with nodeward's value.
	paused, ours bool
}

// healthCheckOf reads a MachineHealthCheck of api. The controller judges
// every Machine of its namespace when the selector is empty.
func healthCheckOf(api string, m *unstructured.Unstructured) healthCheckRecord {
	r := healthCheckRecord{key: api + "/" + m.GetNamespace() + "/" + m.GetName(), api: api, namespace: m.GetNamespace(), name: m.GetName()}
	value, paused := m.GetAnnotations()[PausedAnnotation]
	r.paused, r.ours = paused, paused && value == RemediationHoldValue
	raw, _, _ := unstructured.NestedMap(m.Object, "spec", "selector")
	var sel metav1.LabelSelector
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &sel); err == nil {
		if s, err := metav1.LabelSelectorAsSelector(&sel); err == nil {
			r.selector = s
		}
	}
	return r
}

// judges reports whether the health check judges Machine r.
func (h healthCheckRecord) judges(r machineRecord) bool {
	if h.selector == nil || h.api != r.api || h.namespace != r.namespace {
		return false
	}
	set, err := labels.ConvertSelectorToLabelsMap(r.labels)
	return err == nil && h.selector.Matches(set)
}

// healthCheckIndex keeps the MachineHealthChecks of every served Machine
// API that has them, from their informers' events, for the sweep that
// resumes the ones nodeward paused. Plans never read it, and a grant lists
// the health checks afresh.
type healthCheckIndex struct {
	mu      sync.RWMutex
	records map[string]healthCheckRecord
	servedVersions
}

func newHealthCheckIndex() *healthCheckIndex {
	return &healthCheckIndex{records: map[string]healthCheckRecord{}, servedVersions: newServedVersions()}
}

func (x *healthCheckIndex) set(r healthCheckRecord) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.records[r.key] = r
}

func (x *healthCheckIndex) remove(key string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.records, key)
}

// pausedByNodeward lists the health checks nodeward paused.
func (x *healthCheckIndex) pausedByNodeward() []healthCheckRecord {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var out []healthCheckRecord
	for _, h := range x.records {
		if h.ours {
			out = append(out, h)
		}
	}
	return out
}
