package coordinator

// The Machines beneath the nodes: a node whose Machine is being deleted,
// failed or remediated is down, or about to be, whatever the Node says.

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// machineAPI is one Machine API the coordinator reads where it is served:
// how its Machines name their node, mark the control plane and say they
// are being remediated. One row per API; nothing else differs.
type machineAPI struct {
	// name prefixes the records' keys: two APIs never share a Machine.
	name string
	// versions are tried in order; the first served is read.
	versions []schema.GroupVersionResource
	// controlPlane reports whether a Machine's labels mark it as one of
	// the control plane's.
	controlPlane func(labels map[string]string) bool
	// remediation says why a Machine is being remediated, "" when not.
	remediation func(m *unstructured.Unstructured) string
	// hook is how this API lets nodeward hold a Machine's drain while it
	// updates the node (machinehooks.go).
	hook hookStyle
	// healthChecks are the versions of its MachineHealthChecks, tried in
	// order like versions; none where remediationHold needs none.
	healthChecks []schema.GroupVersionResource
	// remediationHold is how this API lets nodeward keep a health check
	// from remediating a Machine whose node reboots for its update
	// (remediationhold.go).
	remediationHold remediationHoldStyle
}

// machineAPIs are OpenShift's Machine API and Cluster API.
var machineAPIs = []machineAPI{
	{
		name:     "machine.openshift.io",
		versions: []schema.GroupVersionResource{{Group: "machine.openshift.io", Version: "v1beta1", Resource: "machines"}},
		controlPlane: func(l map[string]string) bool {
			return l["machine.openshift.io/cluster-api-machine-role"] == "master" ||
				l["machine.openshift.io/cluster-api-machine-type"] == "master"
		},
		// The MachineHealthCheck remediates by deleting the Machine:
		// the deletion says it.
		remediation:     func(*unstructured.Unstructured) string { return "" },
		hook:            lifecycleHook{},
		healthChecks:    []schema.GroupVersionResource{{Group: "machine.openshift.io", Version: "v1beta1", Resource: "machinehealthchecks"}},
		remediationHold: pausedHealthChecks{},
	},
	{
		name: "cluster.x-k8s.io",
		versions: []schema.GroupVersionResource{
			{Group: "cluster.x-k8s.io", Version: "v1beta2", Resource: "machines"},
			{Group: "cluster.x-k8s.io", Version: "v1beta1", Resource: "machines"},
		},
		controlPlane: func(l map[string]string) bool {
			_, ok := l["cluster.x-k8s.io/control-plane"]
			return ok
		},
		remediation:     capiRemediation,
		hook:            annotationHook{},
		remediationHold: skippedRemediation{},
	},
}

// capiRemediation reads Cluster API's remediation conditions: the
// MachineHealthCheck's verdict (HealthCheckSucceeded False) and the owner's
// remediation under way (OwnerRemediated False).
func capiRemediation(m *unstructured.Unstructured) string {
	conds, _, _ := unstructured.NestedSlice(m.Object, "status", "conditions")
	for _, c := range conds {
		cond, _ := c.(map[string]any)
		typ, _ := cond["type"].(string)
		status, _ := cond["status"].(string)
		if status == "False" && (typ == "OwnerRemediated" || typ == "HealthCheckSucceeded") {
			return "being remediated (" + typ + " False)"
		}
	}
	return ""
}

// machineRecord is what the coordinator keeps of one Machine.
type machineRecord struct {
	key             string // "<api>/<namespace>/<name>"
	api             string // machineAPI.name
	namespace, name string
	node            string // status.nodeRef.name; "" before the node joined
	controlPlane    bool
	deleting        bool
	// hooked: nodeward's pre-drain hook is on the Machine.
	hooked bool
	// labels are the Machine's, as labels.Set's String (a health check's
	// selector picks Machines by them); a string keeps records comparable.
	labels string
	// skipped: nodeward's SkipRemediationAnnotation is on the Machine.
	skipped bool
	// problem says why the Machine takes its node out of service, ""
	// when it does not.
	problem string
}

// recordOf reads m with api's rules.
func recordOf(api machineAPI, m *unstructured.Unstructured) machineRecord {
	r := machineRecord{key: api.name + "/" + m.GetNamespace() + "/" + m.GetName(), api: api.name,
		namespace: m.GetNamespace(), name: m.GetName(), controlPlane: api.controlPlane(m.GetLabels()),
		deleting: m.GetDeletionTimestamp() != nil, hooked: api.hook.held(m),
		labels: labels.Set(m.GetLabels()).String(), skipped: m.GetAnnotations()[SkipRemediationAnnotation] == RemediationHoldValue}
	r.node, _, _ = unstructured.NestedString(m.Object, "status", "nodeRef", "name")
	phase, _, _ := unstructured.NestedString(m.Object, "status", "phase")
	msg, _, _ := unstructured.NestedString(m.Object, "status", "errorMessage")
	r.problem = machineProblem("machine "+m.GetNamespace()+"/"+m.GetName(), r.deleting, phase == "Failed", msg, r.node,
		func() string { return api.remediation(m) })
	return r
}

// machineProblem is why a Machine called name takes its node out of
// service, "" when it does not: being deleted, failed (with the Machine's
// error message, if any), provisioning (no node yet) or being remediated
// (remediation says why, "" when not; read only when nothing else is
// wrong). The one rule for the Machines the controller watches (recordOf)
// and those a Snapshot carries (MachineState).
func machineProblem(name string, deleting, failed bool, message, node string, remediation func() string) string {
	switch {
	case deleting:
		return name + " is being deleted"
	case failed:
		return strings.TrimSuffix(name+" failed: "+message, ": ")
	case node == "":
		return name + " is provisioning (no node yet)"
	}
	if why := remediation(); why != "" {
		return name + " is " + why
	}
	return ""
}

// machineIndex keeps the Machines of every served Machine API, from their
// informers' events, and answers a plan pass's two questions: what is wrong
// with a node's Machine, and whether a control-plane Machine is going away
// or being provisioned. Where no Machine API is served it is empty and a
// pass pays one nil check.
type machineIndex struct {
	mu      sync.RWMutex
	records map[string]machineRecord
	// byNode are the problems of nodes whose Machine has one, or that two
	// Machines claim; rebuilt on each change (Machines change rarely).
	byNode map[string]string
	// controlPlane is the first control-plane Machine (by key) going away,
	// failed or without a node yet: no control-plane grant meanwhile.
	controlPlane string
	servedVersions
	// keys are the Machines of the nodes exactly one Machine claims, and
	// of the nodes no Machine claims any more whose last Machine is gone,
	// by node; gone, the Machines removed, by the node they named (until
	// another Machine names it): what a departure or a grant record keeps
	// of its node's Machine, however the deletions of the Node and of the
	// Machine reach the caches.
	keys, gone map[string]string
	// known are the records' keys, rebuilt with keys.
	known map[string]bool
}

func newMachineIndex() *machineIndex {
	return &machineIndex{records: map[string]machineRecord{}, servedVersions: newServedVersions(),
		keys: map[string]string{}, gone: map[string]string{}}
}

// servedVersions is the version read of each served API, by its name.
type servedVersions struct {
	lock   *sync.RWMutex
	served map[string]schema.GroupVersionResource
}

func newServedVersions() servedVersions {
	return servedVersions{lock: &sync.RWMutex{}, served: map[string]schema.GroupVersionResource{}}
}

// serve records that api is read as gvr.
func (s servedVersions) serve(api string, gvr schema.GroupVersionResource) {
	s.lock.Lock()
	defer s.lock.Unlock()
	s.served[api] = gvr
}

// servedAs is the version api is read as.
func (s servedVersions) servedAs(api string) schema.GroupVersionResource {
	s.lock.RLock()
	defer s.lock.RUnlock()
	return s.served[api]
}

// set records a Machine; it reports whether what a plan reads changed.
func (x *machineIndex) set(r machineRecord) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if old, ok := x.records[r.key]; ok && old == r {
		return false
	}
	x.records[r.key] = r
	if r.node != "" {
		delete(x.gone, r.node)
	}
	x.rebuild()
	return true
}

// remove forgets a Machine; it reports whether it was known.
func (x *machineIndex) remove(key string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	r, ok := x.records[key]
	if !ok {
		return false
	}
	if r.node != "" {
		x.gone[r.node] = key
	}
	delete(x.records, key)
	x.rebuild()
	return true
}

// rebuild derives byNode and controlPlane from the records (x.mu held).
func (x *machineIndex) rebuild() {
	claims := map[string][]string{}
	byNode := map[string]string{}
	var busy []string
	for _, r := range x.records {
		if r.node != "" {
			claims[r.node] = append(claims[r.node], r.key)
			if r.problem != "" {
				byNode[r.node] = r.problem
			}
		}
		if r.controlPlane && r.problem != "" {
			busy = append(busy, r.key+"\x00"+r.problem)
		}
	}
	for node, keys := range claims {
		if len(keys) > 1 {
			// Never guess which one is the node's.
			sort.Strings(keys)
			byNode[node] = fmt.Sprintf("claimed by %d Machines (%s)", len(keys), strings.Join(keys, ", "))
		}
	}
	keys, known := map[string]string{}, make(map[string]bool, len(x.records))
	for key := range x.records {
		known[key] = true
	}
	for node, claimed := range claims {
		if len(claimed) == 1 {
			keys[node] = claimed[0]
		}
	}
	for node, key := range x.gone {
		if _, claimed := claims[node]; !claimed {
			keys[node] = key // a cached Node whose Machine is gone
		}
	}
	x.byNode, x.keys, x.known, x.controlPlane = byNode, keys, known, ""
	if len(busy) > 0 {
		slices.Sort(busy)
		_, problem, _ := strings.Cut(busy[0], "\x00")
		x.controlPlane = "control-plane " + problem + ": no control-plane update meanwhile"
	}
}

// machineView is what one plan pass reads of the index: the node problems
// and the control plane's, as of the pass's start. rebuild replaces the
// map rather than change it, so the view needs no lock; with no Machine
// API served it is empty and a node's lookup is one of a nil map.
type machineView struct {
	byNode       map[string]string
	controlPlane string
	// keys are the nodes' Machines (machineIndex.keys); known, every
	// Machine's key.
	keys  map[string]string
	known map[string]bool
}

// gone reports whether the Machine key names is known no more: deleted
// for good (a departure of its node ends). "" names none.
func (v machineView) gone(key string) bool {
	if key == "" {
		return false
	}
	return !v.known[key]
}

// view is the index as of now. Safe on a nil index.
func (x *machineIndex) view() machineView {
	if x == nil {
		return machineView{}
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	return machineView{byNode: x.byNode, controlPlane: x.controlPlane, keys: x.keys, known: x.known}
}

// machineOf is the one Machine that names node, if exactly one does.
func (x *machineIndex) machineOf(node string) (machineRecord, bool) {
	if x == nil {
		return machineRecord{}, false
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	r, ok := x.records[x.keys[node]] // keys: single claims, and Machines gone
	return r, ok
}

// hooked lists the Machines that carry nodeward's pre-drain hook.
func (x *machineIndex) hooked() []machineRecord {
	return x.where(func(r machineRecord) bool { return r.hooked })
}

// where lists the Machines for which keep is true.
func (x *machineIndex) where(keep func(machineRecord) bool) []machineRecord {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var out []machineRecord
	for _, r := range x.records {
		if keep(r) {
			out = append(out, r)
		}
	}
	return out
}

// keyOf is the Machine of node for a departure (keys).
func (x *machineIndex) keyOf(node string) string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.keys[node]
}
