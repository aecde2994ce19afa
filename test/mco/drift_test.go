package mco_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/test/mco"
)

// TestHandEditsAreDegradedUntilPutBack: a file of the node's config edited
// behind the agent's back makes the node Degraded with the daemon's
// message naming the path, a ConfigDriftDetected Event, and the pool
// NodeDegraded; the content put back makes it Done again. A mode changed
// by hand is reported the same way.
func TestHandEditsAreDegradedUntilPutBack(t *testing.T) {
	first := demoConfig("quay.io/fedora/fedora-coreos:41", nil, "one", testKey)
	p := newAgentPool(t, "drift", 2, first, first)
	p.startAgents(t)
	p.start(t, mco.Default)
	p.c.WaitPool(p.pool.Name, time.Minute, "Updated on "+p.config1, func(s mco.PoolStatus) bool {
		return s.IsTrue("Updated") && s.UpdatedMachineCount == 2 && s.DegradedMachineCount == 0
	})
	node := p.nodes[1]
	file := filepath.Join(p.roots[node], demoFile)
	for _, edit := range []struct {
		name, want string
		change     func() error
		restore    func() error
	}{
		{name: "contents", want: `content mismatch for file "` + demoFile + `"`,
			change:  func() error { return os.WriteFile(file, []byte("edited by hand"), 0o640) },
			restore: func() error { return os.WriteFile(file, []byte("one"), 0o640) }},
		{name: "mode", want: `mode mismatch for file: "` + demoFile + `"`,
			change:  func() error { return os.Chmod(file, 0o666) },
			restore: func() error { return os.Chmod(file, 0o640) }},
	} {
		began := time.Now()
		if err := edit.change(); err != nil {
			t.Fatal(err)
		}
		p.c.WaitNode(node, 30*time.Second, edit.name+": Degraded naming the path", func(n *corev1.Node) bool {
			return n.Annotations[mco.AnnotationState] == mco.StateDegraded && strings.Contains(n.Annotations[mco.AnnotationReason], edit.want)
		})
		t.Logf("%s: Degraded %s after the edit", edit.name, time.Since(began).Round(time.Millisecond))
		p.c.WaitPool(p.pool.Name, time.Minute, edit.name+": NodeDegraded naming "+node, func(s mco.PoolStatus) bool {
			c := s.Conditions["NodeDegraded"]
			return c.Status == "True" && strings.Contains(c.Message, node)
		})
		if err := edit.restore(); err != nil {
			t.Fatal(err)
		}
		p.c.WaitNode(node, 30*time.Second, edit.name+": Done once put back", func(n *corev1.Node) bool {
			return n.Annotations[mco.AnnotationState] == mco.StateDone && n.Annotations[mco.AnnotationReason] == ""
		})
		p.c.WaitPool(p.pool.Name, time.Minute, edit.name+": Updated, nothing degraded", func(s mco.PoolStatus) bool {
			return s.IsTrue("Updated") && s.DegradedMachineCount == 0
		})
	}
	events, err := p.c.Kube.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + node})
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, e := range events.Items {
		if e.Reason == "ConfigDriftDetected" && e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, demoFile) {
			found++
		}
	}
	if found == 0 {
		t.Errorf("no ConfigDriftDetected Warning Event naming %s on %s", demoFile, node)
	}
	if state := p.node(t, p.nodes[0]).Annotations[mco.AnnotationState]; state != mco.StateDone {
		t.Errorf("%s, untouched, is %s", p.nodes[0], state)
	}
}
