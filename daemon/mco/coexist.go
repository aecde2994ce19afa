package mco

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/nodeward/nodeward/api/kube"
)

// The machine-config-daemon's pods, as the MCO deploys them.
const (
	MCDNamespace = "openshift-machine-config-operator"
	MCDSelector  = "k8s-app=machine-config-daemon"
)

// Coexistence finds a machine-config-daemon pod on the node. Two agents
// acting on one desiredConfig would drain twice and race on the node's
// annotations and its disk, so nodeward refuses to act while one runs there
// (docs/install.md says how nodeward takes the daemon's place).
type Coexistence struct {
	Client *kube.Client
	Node   string
	// TTL is how long an answer holds for the same desired config; a new
	// desired config always asks again. 1 min when zero.
	TTL time.Duration
	Now func() time.Time

	mu      sync.Mutex
	checked string // the desired config the answer is for
	at      time.Time
	why     string
}

// Check returns why nodeward must not act on desired ("" when it may).
func (c *Coexistence) Check(ctx context.Context, desired string) (string, error) {
	now := time.Now()
	if c.Now != nil {
		now = c.Now()
	}
	c.mu.Lock()
	if c.checked == desired && now.Sub(c.at) < orDefault(c.TTL, time.Minute) {
		why := c.why
		c.mu.Unlock()
		return why, nil
	}
	c.mu.Unlock()
	pods, err := c.Client.Pods(MCDNamespace).List(ctx, metav1.ListOptions{LabelSelector: MCDSelector,
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", c.Node).String()})
	if err != nil {
		return "", fmt.Errorf("look for a machine-config-daemon pod on node %s: %w", c.Node, err)
	}
	why := ""
	for _, pod := range pods.Items {
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		why = fmt.Sprintf("machine-config-daemon pod %s/%s runs on this node: nodeward does not act on desiredConfig %s while it does (two agents would drain and write the node twice); remove the daemon from this node first, see docs/install.md",
			pod.Namespace, pod.Name, desired)
		break
	}
	c.mu.Lock()
	c.checked, c.at, c.why = desired, now, why
	c.mu.Unlock()
	return why, nil
}
