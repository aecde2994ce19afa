package node_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/test/cluster"
)

// testMetricsAuth scrapes the agent's metrics port on the node's address
// (host network; no sidecar): refused without a token, refused for a
// ServiceAccount without the right, served to one bound to the manifests'
// ClusterRole nodeward-metrics-reader. The agent reviews the tokens itself
// (TokenReview, SubjectAccessReview).
func testMetricsAuth(ctx context.Context, t *testing.T, cp *cluster.ControlPlane, pod *corev1.Pod) {
	client := cp.Client()
	token := func(name string) string {
		t.Helper()
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: agentNamespace}}
		if _, err := client.CoreV1().ServiceAccounts(agentNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create ServiceAccount %s: %v", name, err)
		}
		tr, err := client.CoreV1().ServiceAccounts(agentNamespace).CreateToken(ctx, name, &authnv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("token of %s: %v", name, err)
		}
		return tr.Status.Token
	}
	scraper, stranger := token("test-metrics-scraper"), token("test-metrics-stranger")
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "test-metrics-scraper"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "nodeward-metrics-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "test-metrics-scraper", Namespace: agentNamespace}}}
	if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	url := "https://" + net.JoinHostPort(pod.Status.HostIP, "9742") + "/metrics"
	httpClient := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the agent's self-signed certificate, as the ServiceMonitor
	scrape := func(token string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatalf("scrape %s: %v", url, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, _ := scrape(""); code != http.StatusUnauthorized {
		t.Errorf("unauthenticated scrape of %s: %d, want 401", url, code)
	}
	if code, _ := scrape(stranger); code != http.StatusForbidden {
		t.Errorf("scrape by a ServiceAccount without nodeward-metrics-reader: %d, want 403", code)
	}
	code, body := scrape(scraper)
	if code != http.StatusOK || !strings.Contains(body, "nodeward_api_requests_total") {
		t.Errorf("authorized scrape: %d, want 200 with nodeward's metrics; body starts %.200q", code, body)
	} else {
		t.Logf("authorized scrape of %s: 200, %d bytes", url, len(body))
	}
}
