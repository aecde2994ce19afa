package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// The documented structure of `nodeward status -o json|yaml` (see
// docs/status.md). Fields are added, never renamed or removed.

// statusReport is one document: every pool shown, each with its nodes.
type statusReport struct {
	Pools []poolReport `json:"pools"`
}

// poolReport is a pool's row of the table and its nodes.
type poolReport struct {
	Name        string `json:"name"`
	Config      string `json:"config"`
	Paused      bool   `json:"paused"`
	PauseReason string `json:"pauseReason,omitempty"`
	Halted      string `json:"halted,omitempty"`
	// GatesFailing is the GatesPassing condition's reason and message
	// while it is not True (fail closed: Unknown holds grants too).
	GatesFailing string `json:"gatesFailing,omitempty"`
	// SilenceError is the Silenced condition's message while it is False.
	SilenceError            string       `json:"silenceError,omitempty"`
	Updated                 string       `json:"updated"`
	Updating                string       `json:"updating"`
	Degraded                string       `json:"degraded"`
	MachineCount            int32        `json:"machineCount"`
	ReadyMachineCount       int32        `json:"readyMachineCount"`
	UpdatedMachineCount     int32        `json:"updatedMachineCount"`
	UnavailableMachineCount int32        `json:"unavailableMachineCount"`
	DegradedMachineCount    int32        `json:"degradedMachineCount"`
	Nodes                   []nodeReport `json:"nodes"`
}

// nodeReport is a node's row: its update step and what it refers to.
type nodeReport struct {
	Name string `json:"name"`
	// Step is the agent's update step (the state annotation), "" before
	// the agent wrote one.
	Step string `json:"step"`
	// Target is the OS target the coordinator set for the node.
	Target string `json:"target"`
	// Staged is the target staged on the node.
	Staged string `json:"staged"`
	// Grant is the grant the node holds, "" when it holds none.
	Grant       string `json:"grant"`
	Schedulable bool   `json:"schedulable"`
	// UnavailableSince is when the node became unavailable for its
	// update (RFC 3339), absent while it is available.
	UnavailableSince *metav1.Time `json:"unavailableSince,omitempty"`
	// Reason says why the node is Degraded, Yielded or waiting.
	Reason string `json:"reason"`
	Zone   string `json:"zone"`
}

const zoneLabel = "topology.kubernetes.io/zone"

// buildReport puts each node under the pools whose nodeSelector selects
// it, pools and nodes sorted by name.
func buildReport(pools []v1alpha1.UpdatePool, nodes []corev1.Node) (statusReport, error) {
	sort.Slice(pools, func(i, j int) bool { return pools[i].Name < pools[j].Name })
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	r := statusReport{Pools: []poolReport{}}
	for _, p := range pools {
		// A missing nodeSelector (the CRD requires one) selects every
		// node, as an empty one does.
		sel := labels.Everything()
		if p.Spec.NodeSelector != nil {
			var err error
			if sel, err = metav1.LabelSelectorAsSelector(p.Spec.NodeSelector); err != nil {
				return r, fmt.Errorf("pool %s nodeSelector: %w", p.Name, err)
			}
		}
		s := p.Status
		pr := poolReport{Name: p.Name, Config: s.ConfigName, Paused: p.Spec.Paused, PauseReason: p.Spec.PauseReason,
			Halted: haltedMessage(p), GatesFailing: gatesMessage(p), SilenceError: silenceMessage(p),
			Updated: condStatus(p, v1alpha1.PoolUpdated), Updating: condStatus(p, v1alpha1.PoolUpdating),
			Degraded: condStatus(p, v1alpha1.PoolDegraded), MachineCount: s.MachineCount,
			ReadyMachineCount: s.ReadyMachineCount, UpdatedMachineCount: s.UpdatedMachineCount,
			UnavailableMachineCount: s.UnavailableMachineCount, DegradedMachineCount: s.DegradedMachineCount,
			Nodes: []nodeReport{}}
		for _, n := range nodes {
			if sel.Matches(labels.Set(n.Labels)) {
				pr.Nodes = append(pr.Nodes, nodeRow(n))
			}
		}
		r.Pools = append(r.Pools, pr)
	}
	return r, nil
}

func nodeRow(n corev1.Node) nodeReport {
	a := n.Annotations
	r := nodeReport{Name: n.Name, Step: a[v1alpha1.AnnotationState], Target: a[v1alpha1.AnnotationTarget],
		Staged: a[v1alpha1.AnnotationStaged], Grant: a[v1alpha1.AnnotationGrant], Schedulable: !n.Spec.Unschedulable,
		Reason: strings.ReplaceAll(a[v1alpha1.AnnotationReason], "\n", " "), Zone: n.Labels[zoneLabel]}
	if r.Reason == "" && r.Step == string(v1alpha1.StepDraining) {
		r.Reason = strings.ReplaceAll(v1alpha1.DrainBlockers(&n), "\n", " ")
	}
	if t, err := time.Parse(time.RFC3339Nano, a[v1alpha1.AnnotationUnavailableSince]); err == nil {
		r.UnavailableSince = &metav1.Time{Time: t}
	}
	if _, ok := a[v1alpha1.AnnotationGrant]; ok && r.Grant == "" {
		r.Grant = "-"
	}
	return r
}

// haltedMessage is the Halted condition's message while it is True.
func haltedMessage(p v1alpha1.UpdatePool) string {
	if c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.PoolHalted); c != nil && c.Status == metav1.ConditionTrue {
		return c.Message
	}
	return ""
}

// gatesMessage is the GatesPassing condition's reason and message while it
// is not True, "" when it is or the pool has no gates.
func gatesMessage(p v1alpha1.UpdatePool) string {
	if c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.PoolGatesPassing); c != nil && c.Status != metav1.ConditionTrue {
		return c.Reason + ": " + c.Message
	}
	return ""
}

// silenceMessage is the Silenced condition's message while it is False.
func silenceMessage(p v1alpha1.UpdatePool) string {
	if c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.PoolSilenced); c != nil && c.Status == metav1.ConditionFalse {
		return c.Message
	}
	return ""
}

func condStatus(p v1alpha1.UpdatePool, t string) string {
	if c := meta.FindStatusCondition(p.Status.Conditions, t); c != nil {
		return string(c.Status)
	}
	return "Unknown"
}

// printStatus writes r in format: "" (the tables), wide, json or yaml.
// A json document is one line-delimited object; yaml documents start
// with "---", so that a watch's stream stays parseable.
func printStatus(out io.Writer, r statusReport, format string, now time.Time) error {
	switch format {
	case "json":
		if err := json.NewEncoder(out).Encode(r); err != nil {
			return fmt.Errorf("write JSON: %w", err)
		}
		return nil
	case "yaml":
		b, err := yaml.Marshal(r)
		if err != nil {
			return fmt.Errorf("encode YAML: %w", err)
		}
		if _, err := fmt.Fprintf(out, "---\n%s", b); err != nil {
			return fmt.Errorf("write YAML: %w", err)
		}
		return nil
	}
	wide := format == "wide"
	if err := printPools(out, r.Pools, wide); err != nil {
		return err
	}
	for _, p := range r.Pools {
		fmt.Fprintf(out, "\nPOOL %s\n", p.Name)
		if p.Paused {
			fmt.Fprintf(out, "PAUSED: %s\n", cmp.Or(p.PauseReason, "no reason given"))
		}
		if p.Halted != "" {
			fmt.Fprintf(out, "HALTED: %s\n", p.Halted)
		}
		if p.GatesFailing != "" {
			fmt.Fprintf(out, "GATES: %s\n", p.GatesFailing)
		}
		if p.SilenceError != "" {
			fmt.Fprintf(out, "SILENCES: %s\n", p.SilenceError)
		}
		if err := printNodes(out, p.Nodes, now, wide); err != nil {
			return err
		}
	}
	return nil
}

// printPools prints the table `oc get mcp` users know.
func printPools(out io.Writer, pools []poolReport, wide bool) error {
	w := tabwriter.NewWriter(out, 0, 4, 3, ' ', 0)
	head := "NAME\tCONFIG\tUPDATED\tUPDATING\tDEGRADED\tMACHINECOUNT\tREADYMACHINECOUNT\tUPDATEDMACHINECOUNT\tDEGRADEDMACHINECOUNT"
	if wide {
		head += "\tUNAVAILABLEMACHINECOUNT\tPAUSED"
	}
	fmt.Fprintln(w, head)
	for _, p := range pools {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d", p.Name, p.Config, p.Updated, p.Updating, p.Degraded,
			p.MachineCount, p.ReadyMachineCount, p.UpdatedMachineCount, p.DegradedMachineCount)
		if wide {
			fmt.Fprintf(w, "\t%d\t%t", p.UnavailableMachineCount, p.Paused)
		}
		fmt.Fprintln(w)
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write pools: %w", err)
	}
	return nil
}

// printNodes prints each node's update step, how long it has been
// unavailable and why it waits or failed; wide adds the grant, the
// target, the staged target and the zone.
func printNodes(out io.Writer, nodes []nodeReport, now time.Time, wide bool) error {
	w := tabwriter.NewWriter(out, 0, 4, 3, ' ', 0)
	head := "NODE\tSTATE\tGRANTED\tSCHEDULABLE\tUNAVAILABLE FOR"
	if wide {
		head += "\tGRANT\tTARGET\tSTAGED\tZONE"
	}
	fmt.Fprintln(w, head+"\tREASON")
	for _, n := range nodes {
		granted := "no"
		if n.Grant != "" {
			granted = "yes"
		}
		since := "-"
		if n.UnavailableSince != nil {
			since = now.Sub(n.UnavailableSince.Time).Round(time.Second).String()
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%v\t%s", n.Name, dash(n.Step), granted, n.Schedulable, since)
		if wide {
			fmt.Fprintf(w, "\t%s\t%s\t%s\t%s", dash(n.Grant), dash(n.Target), dash(n.Staged), dash(n.Zone))
		}
		fmt.Fprintf(w, "\t%s\n", dash(n.Reason))
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write nodes: %w", err)
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
