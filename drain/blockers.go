package drain

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nodeward/nodeward/api/kube"
)

// BlockReason classifies what keeps a pod on the node.
type BlockReason string

const (
	// BlockedByPDB: the eviction was refused (429) by a PodDisruptionBudget.
	BlockedByPDB BlockReason = "PodDisruptionBudget"
	// BlockedByMultiplePDBs: the API server refuses (500) to evict a pod
	// that more than one PDB selects; only fixing the PDBs helps.
	BlockedByMultiplePDBs BlockReason = "MultiplePodDisruptionBudgets"
	// BlockedTerminating: the pod was evicted but is still there.
	BlockedTerminating BlockReason = "Terminating"
	// BlockedNotCompleted: a WaitCompleted pod has not completed yet.
	BlockedNotCompleted BlockReason = "NotCompleted"
	// BlockedEvictionError: the eviction failed otherwise.
	BlockedEvictionError BlockReason = "EvictionError"
)

// Blocker is one pod keeping the drain from finishing, with what a human
// needs to unblock it.
type Blocker struct {
	Pod    PodRef
	Reason BlockReason
	// PDBs that select the pod, with their status at the time.
	PDBs []PDBStatus
	// Detail is the API server's message or what else is known.
	Detail string
}

// PDBStatus is the part of a PodDisruptionBudget's status that explains a
// refused eviction.
type PDBStatus struct {
	Namespace, Name    string
	DisruptionsAllowed int32
	CurrentHealthy     int32
	DesiredHealthy     int32
	ExpectedPods       int32
}

func (p PDBStatus) String() string {
	return fmt.Sprintf("PDB %s/%s allows %d disruptions (healthy %d, desired %d, expected pods %d)",
		p.Namespace, p.Name, p.DisruptionsAllowed, p.CurrentHealthy, p.DesiredHealthy, p.ExpectedPods)
}

func (b Blocker) String() string {
	var s strings.Builder
	fmt.Fprintf(&s, "pod %s: ", b.Pod)
	switch b.Reason {
	case BlockedByPDB, BlockedByMultiplePDBs:
		if b.Reason == BlockedByMultiplePDBs {
			s.WriteString("selected by more than one PDB, eviction impossible until they are fixed: ")
		} else {
			s.WriteString("eviction refused: ")
		}
		if len(b.PDBs) == 0 {
			s.WriteString(b.Detail)
		}
		for i, p := range b.PDBs {
			if i > 0 {
				s.WriteString("; ")
			}
			s.WriteString(p.String())
		}
	case BlockedTerminating:
		s.WriteString("evicted, still terminating")
	case BlockedNotCompleted:
		s.WriteString("waiting for it to complete (WaitCompleted rule)")
	default:
		s.WriteString(b.Detail)
	}
	return s.String()
}

// pdbsFor returns the status of every PDB in pod's namespace whose selector
// matches it.
func pdbsFor(ctx context.Context, client *kube.Client, pod *corev1.Pod) ([]PDBStatus, error) {
	list, err := client.PodDisruptionBudgets(pod.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list PDBs of namespace %s: %w", pod.Namespace, err)
	}
	var out []PDBStatus
	for i := range list.Items {
		pdb := &list.Items[i]
		if !selects(pdb, pod) {
			continue
		}
		out = append(out, PDBStatus{
			Namespace: pdb.Namespace, Name: pdb.Name,
			DisruptionsAllowed: pdb.Status.DisruptionsAllowed,
			CurrentHealthy:     pdb.Status.CurrentHealthy,
			DesiredHealthy:     pdb.Status.DesiredHealthy,
			ExpectedPods:       pdb.Status.ExpectedPods,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// selects follows policy/v1: a nil selector selects no pod, an empty one
// every pod of the namespace.
func selects(pdb *policyv1.PodDisruptionBudget, pod *corev1.Pod) bool {
	if pdb.Spec.Selector == nil {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		return false
	}
	return sel.Matches(labels.Set(pod.Labels))
}

// summarize renders blockers for a condition message or an Event, sorted
// and cut to limit characters.
func summarize(blockers []Blocker, limit int) string {
	lines := make([]string, len(blockers))
	for i, b := range blockers {
		lines[i] = b.String()
	}
	sort.Strings(lines)
	msg := fmt.Sprintf("%d pods block the drain: %s", len(lines), strings.Join(lines, "; "))
	if len(blockers) == 1 {
		msg = "1 pod blocks the drain: " + lines[0]
	}
	if len(msg) > limit {
		msg = msg[:limit-3] + "..."
	}
	return msg
}
