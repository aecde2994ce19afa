package kube

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	if _, err := NewForConfig(&rest.Config{Host: "https://127.0.0.1:1", QPS: 10, Burst: 20}); err != nil {
		t.Fatal(err)
	}
}

// TestResourceRequests: each typed client call goes to its resource's
// path, in its namespace or none, with its subresource and options, and
// decodes the answer into its type. Every request asks for protobuf first
// (the API server's cheapest encoding for built-in types) and accepts JSON,
// whose answers here still decode (a proxy, an old server); bodies go as
// protobuf, patches keep their JSON.
func TestResourceRequests(t *testing.T) {
	var (
		mu                         sync.Mutex
		seen, accept, contentTypes []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
		accept = append(accept, r.Header.Get("Accept"))
		contentTypes = append(contentTypes, r.Header.Get("Content-Type"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(r.URL.Path, "/pods"):
			fmt.Fprint(w, `{"kind":"PodList","apiVersion":"v1","items":[{"metadata":{"name":"p1"}}]}`)
		case strings.Contains(r.URL.Path, "/leases/"):
			fmt.Fprint(w, `{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"name":"l1","namespace":"ns2"}}`)
		default:
			fmt.Fprint(w, `{"kind":"Node","apiVersion":"v1","metadata":{"name":"n1","resourceVersion":"7"}}`)
		}
	}))
	defer srv.Close()
	c, err := NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	node, err := c.Nodes().Get(ctx, "n1", metav1.GetOptions{ResourceVersion: "0"})
	if err != nil || node.Name != "n1" || node.ResourceVersion != "7" {
		t.Fatalf("Get node: %v, %+v", err, node)
	}
	pods, err := c.Pods("ns1").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=n1"})
	if err != nil || len(pods.Items) != 1 || pods.Items[0].Name != "p1" {
		t.Fatalf("List pods: %v, %+v", err, pods)
	}
	if _, err := c.PatchNodeStatus(ctx, "n1", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l1", Namespace: "ns2"}}
	if got, err := c.Leases("ns2").Update(ctx, lease, metav1.UpdateOptions{}); err != nil || got.Name != "l1" {
		t.Fatalf("Update lease: %v, %+v", err, got)
	}
	if err := c.PodDisruptionBudgets("ns3").Delete(ctx, "b1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	timeout := int64(30)
	w, err := c.Nodes().Watch(ctx, metav1.ListOptions{TimeoutSeconds: &timeout})
	if err != nil {
		t.Fatal(err)
	}
	w.Stop()
	want := []string{
		"GET /api/v1/nodes/n1?resourceVersion=0",
		"GET /api/v1/namespaces/ns1/pods?fieldSelector=spec.nodeName%3Dn1",
		"PATCH /api/v1/nodes/n1/status?",
		"PUT /apis/coordination.k8s.io/v1/namespaces/ns2/leases/l1?",
		"DELETE /apis/policy/v1/namespaces/ns3/poddisruptionbudgets/b1?",
		"GET /api/v1/nodes?timeout=30s&timeoutSeconds=30&watch=true",
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(seen, want) {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
	for i, a := range accept {
		if !strings.HasPrefix(a, "application/vnd.kubernetes.protobuf,") || !strings.Contains(a, "application/json") {
			t.Errorf("request %d: Accept %q, want protobuf first and JSON after it", i, a)
		}
	}
	const protobuf = "application/vnd.kubernetes.protobuf"
	wantTypes := []string{"", "", "application/strategic-merge-patch+json", protobuf, protobuf, ""}
	if !slices.Equal(contentTypes, wantTypes) {
		t.Errorf("content types %q, want %q: the Update's and the Delete's bodies in protobuf, the patch's in JSON", contentTypes, wantTypes)
	}
}
