package coordinator

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// A pool's grant records keep each grant until it is settled: its Node,
// the object granted, shows another grant or none with no write pending;
// its departure is persisted; or the machine is back. Until then a record
// whose Node is gone, or another object not yet back, is a departure.
func TestGrantRecordsSettleAndDepart(t *testing.T) {
	ready := []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	node := func(name, uid, grant, state string) *corev1.Node {
		a := map[string]string{}
		if grant != "" {
			a[v1alpha1.AnnotationGrant] = grant
		}
		if state != "" {
			a[v1alpha1.AnnotationState] = state
		}
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: k8stypes.UID(uid), Annotations: a},
			Status: corev1.NodeStatus{Conditions: ready}}
	}
	records := map[string]v1alpha1.DepartedNode{
		"held":      {Grant: "g1", UID: "u1"}, // its Node holds the grant: kept
		"released":  {Grant: "g2", UID: "u2"}, // its Node shows no grant: settled
		"unseen":    {Grant: "g3", UID: "u3"}, // no grant shown yet, the write pending: kept
		"gone":      {Grant: "g4", UID: "u4"}, // its Node deleted: kept, departed
		"persisted": {Grant: "g5", UID: "u5"}, // departed and persisted: settled
		"replaced":  {Grant: "g6", UID: "u6"}, // another object, no report yet: kept, departed
		"back":      {Grant: "g7", UID: "u7"}, // another object, serving, reported: settled
	}
	raw, err := json.Marshal(records)
	if err != nil {
		t.Fatal(err)
	}
	pool := &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: "p",
		Annotations: map[string]string{v1alpha1.AnnotationGrantedNodes: string(raw)}}}
	nodes := map[string]*corev1.Node{
		"held":     node("held", "u1", "g1", "Rebooting"),
		"released": node("released", "u2", "", "Done"),
		"unseen":   node("unseen", "u3", "", "Staged"),
		"replaced": node("replaced", "u6-new", "", ""),
		"back":     node("back", "u7-new", "", "Done"),
		"new":      node("new", "u8", "", "Staged"),
	}
	lookup := func(name string) *corev1.Node { return nodes[name] }
	own := map[string]v1alpha1.DepartedNode{"persisted": {Grant: "g5", UID: "u5"}}
	granted := map[string]v1alpha1.DepartedNode{"new": {Grant: "g8", UID: "u8"}}

	_, next, err := nextGrantRecords(pool, granted, own, map[string]bool{"unseen": true}, lookup, machineView{}.gone)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, name := range []string{"held", "released", "unseen", "gone", "persisted", "replaced", "back", "new"} {
		if _, ok := next[name]; ok {
			kept = append(kept, name)
		}
	}
	if got, want := strings.Join(kept, ","), "held,unseen,gone,replaced,new"; got != want {
		t.Errorf("records kept %s, want %s", got, want)
	}
	departed := recordedDepartures([]*v1alpha1.UpdatePool{pool}, lookup)
	for _, name := range []string{"gone", "persisted", "replaced"} {
		if d, ok := departed[name]; !ok || d.Pool != "p" || d.Grant != records[name].Grant {
			t.Errorf("%s: departure %+v, %v; want one of pool p under %s", name, d, ok, records[name].Grant)
		}
	}
	if len(departed) != 3 {
		t.Errorf("departures %v, want gone, persisted and replaced only", departed)
	}
}

// A malformed record fails the pool's pass with the annotation's name.
func TestGrantRecordsMalformed(t *testing.T) {
	pool := &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: "p",
		Annotations: map[string]string{v1alpha1.AnnotationGrantedNodes: "{not json"}}}
	_, _, err := nextGrantRecords(pool, nil, nil, nil, func(string) *corev1.Node { return nil }, machineView{}.gone)
	if err == nil || !strings.Contains(err.Error(), v1alpha1.AnnotationGrantedNodes) || !strings.Contains(err.Error(), "pool p") {
		t.Fatalf("error %v: want one naming pool p and %s", err, v1alpha1.AnnotationGrantedNodes)
	}
	if got := recordedDepartures([]*v1alpha1.UpdatePool{pool}, func(string) *corev1.Node { return nil }); len(got) != 0 {
		t.Fatalf("departures %v from a malformed record", got)
	}
}

// An entry read back from its annotation is the same entry as the one
// written: no pass writes the pool's bookkeeping again for a time zone.
func TestEntriesReadBackAreTheSame(t *testing.T) {
	since := metav1.NewTime(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC))
	written := map[string]v1alpha1.DepartedNode{"n1": {Grant: "g1", UID: "u1", Since: since, Zone: "a"}}
	raw, err := json.Marshal(written)
	if err != nil {
		t.Fatal(err)
	}
	read, err := grantRecordsOf(&v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: "p",
		Annotations: map[string]string{v1alpha1.AnnotationGrantedNodes: string(raw)}}})
	if err != nil {
		t.Fatal(err)
	}
	if !sameEntries(written, read) {
		t.Fatalf("read back %v, written %v: not the same", read, written)
	}
	read["n1"] = v1alpha1.DepartedNode{Grant: "g2", UID: "u1", Since: since, Zone: "a"}
	if sameEntries(written, read) {
		t.Fatal("entries of another grant are the same")
	}
}
