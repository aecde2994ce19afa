package kube

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// TestSchemeHoldsOnlyWhatNodewardUses: the point of the package is a
// scheme of three group versions, not client-go's 55.
func TestSchemeHoldsOnlyWhatNodewardUses(t *testing.T) {
	s, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	for _, gvk := range []schema.GroupVersionKind{
		{Version: "v1", Kind: "Node"}, {Version: "v1", Kind: "Pod"}, {Version: "v1", Kind: "Event"},
		{Version: "v1", Kind: "ConfigMap"},
		{Group: "coordination.k8s.io", Version: "v1", Kind: "Lease"},
		{Group: "policy", Version: "v1", Kind: "PodDisruptionBudget"}, {Group: "policy", Version: "v1", Kind: "Eviction"},
	} {
		if !s.Recognizes(gvk) {
			t.Errorf("scheme does not know %s", gvk)
		}
	}
	groups := map[string]bool{}
	for gvk := range s.AllKnownTypes() {
		groups[gvk.GroupVersion().String()] = true
	}
	for gv := range groups {
		// metav1's option types register under the internal versions too.
		switch strings.TrimSuffix(gv, "__internal") {
		case "v1", "coordination.k8s.io/v1", "policy/v1", "meta.k8s.io/v1", "", "coordination.k8s.io/", "policy/":
		default:
			t.Errorf("scheme registers %s, which nodeward does not use", gv)
		}
	}
}

func TestNewForConfigRefusesQPSWithoutBurst(t *testing.T) {
	_, err := NewForConfig(&rest.Config{Host: "https://127.0.0.1:1", QPS: 10})
	if err == nil || !strings.Contains(err.Error(), "burst") {
		t.Fatalf("QPS without burst: %v, want an error naming burst", err)
	}
	c, err := NewForConfig(&rest.Config{Host: "https://127.0.0.1:1", QPS: 10, Burst: 20})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Nodes().GetNamespace(); got != "" {
		t.Errorf("Nodes client namespace %q, want cluster-scoped", got)
	}
	if got := c.Pods("ns1").GetNamespace(); got != "ns1" {
		t.Errorf("Pods client namespace %q", got)
	}
}
