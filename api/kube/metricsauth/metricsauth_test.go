package metricsauth_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodeward/nodeward/api/kube/metricsauth"
	"github.com/nodeward/nodeward/test/cluster"
)

var env cluster.Env

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

// reviewCounter counts the reviews the Authorizer sends, by the resource
// of the request path.
type reviewCounter struct {
	next        http.RoundTripper
	tokens, sar atomic.Int64
}

func (c *reviewCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	switch {
	case strings.HasSuffix(r.URL.Path, "/tokenreviews"):
		c.tokens.Add(1)
	case strings.HasSuffix(r.URL.Path, "/subjectaccessreviews"):
		c.sar.Add(1)
	}
	return c.next.RoundTrip(r)
}

// serve runs the shape both components serve: /metrics protected, /readyz
// open, over the endpoint's listener. It returns the base URL.
func serve(t *testing.T, e *metricsauth.Endpoint) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "metricsauth_test_scrapes_total", Help: "test"})
	reg.MustRegister(c)
	c.Inc()
	mux := http.NewServeMux()
	mux.Handle("/metrics", e.Protect(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(e.Listener(l)) }()
	t.Cleanup(func() { _ = srv.Close() })
	return e.Scheme() + "://" + l.Addr().String()
}

func get(t *testing.T, client *http.Client, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func insecureClient() *http.Client {
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // self-signed test endpoint
	}}
}

// serviceAccountToken creates a ServiceAccount in ns and returns a token
// for it (TokenRequest; the test control plane runs no token controller).
func serviceAccountToken(ctx context.Context, t *testing.T, cp *cluster.ControlPlane, ns, name string) string {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	if _, err := cp.Client().CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ServiceAccount %s: %v", name, err)
	}
	seconds := int64(3600)
	tr, err := cp.Client().CoreV1().ServiceAccounts(ns).CreateToken(ctx, name,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: &seconds}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s: %v", name, err)
	}
	return tr.Status.Token
}

func clusterRoleBinding(ctx context.Context, t *testing.T, cp *cluster.ControlPlane, name, role string, subject rbacv1.Subject) {
	t.Helper()
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{subject}}
	if _, err := cp.Client().RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("bind %s: %v", role, err)
	}
	t.Cleanup(func() {
		_ = cp.Client().RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// TestKubernetesMode: against the real API server, with the Authorizer
// running as a user bound to system:auth-delegator only (what the
// manifests grant the agent and the coordinator).
func TestKubernetesMode(t *testing.T) {
	cp := env.ControlPlane(t)
	ctx := context.Background()
	ns := cp.Namespace(t)

	clusterRoleBinding(ctx, t, cp, "metricsauth-test-delegator", "system:auth-delegator",
		rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "metricsauth-test-server"})
	rc, err := cp.UserConfig("metricsauth-test-server")
	if err != nil {
		t.Fatal(err)
	}
	count := &reviewCounter{}
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { count.next = rt; return count })

	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "metricsauth-test-reader"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}
	if _, err := cp.Client().RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cp.Client().RbacV1().ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
	})
	scraper := serviceAccountToken(ctx, t, cp, ns, "scraper")
	clusterRoleBinding(ctx, t, cp, "metricsauth-test-reader", role.Name,
		rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "scraper", Namespace: ns})
	stranger := serviceAccountToken(ctx, t, cp, ns, "stranger")

	clk := testingclock.NewFakeClock(time.Now())
	e, err := metricsauth.Setup(metricsauth.Config{Mode: metricsauth.Kubernetes,
		Options: metricsauth.Options{Now: clk.Now, AllowTTL: 2 * time.Minute, DenyTTL: 10 * time.Second}}, rc, nil)
	if err != nil {
		t.Fatal(err)
	}
	base := serve(t, e)
	if !strings.HasPrefix(base, "https://") {
		t.Fatalf("Kubernetes mode serves %s, want TLS", base)
	}
	client := insecureClient()

	if code, _ := get(t, client, base+"/readyz", ""); code != http.StatusOK {
		t.Errorf("/readyz without a token: %d, want 200 (kubelet probes carry none)", code)
	}
	if code, _ := get(t, client, base+"/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("/metrics without a token: %d, want 401", code)
	}
	if n := count.tokens.Load(); n != 0 {
		t.Errorf("a request without a token sent %d TokenReviews", n)
	}
	if code, _ := get(t, client, base+"/metrics", "not-a-token"); code != http.StatusUnauthorized {
		t.Errorf("/metrics with a bad token: %d, want 401", code)
	}
	if code, _ := get(t, client, base+"/metrics", stranger); code != http.StatusForbidden {
		t.Errorf("/metrics as a ServiceAccount without RBAC: %d, want 403", code)
	}
	code, body := get(t, client, base+"/metrics", scraper)
	if code != http.StatusOK || !strings.Contains(body, "metricsauth_test_scrapes_total 1") {
		t.Fatalf("/metrics as a ServiceAccount allowed get /metrics: %d %q, want 200 with the metrics", code, body)
	}

	// Within the TTLs every decision comes from the cache.
	tokens, sars := count.tokens.Load(), count.sar.Load()
	if tokens != 3 || sars != 2 {
		t.Errorf("reviews so far: %d TokenReviews, %d SubjectAccessReviews; want 3 and 2", tokens, sars)
	}
	clk.Step(5 * time.Second)
	for _, c := range []struct {
		token string
		want  int
	}{{scraper, 200}, {stranger, 403}, {"not-a-token", 401}, {scraper, 200}} {
		if code, _ := get(t, client, base+"/metrics", c.token); code != c.want {
			t.Errorf("cached scrape: %d, want %d", code, c.want)
		}
	}
	if n := count.tokens.Load(); n != tokens {
		t.Errorf("scrapes within the TTL sent %d more TokenReviews, want none", n-tokens)
	}
	// Past the deny TTL the refused tokens are reviewed again; the allowed
	// one only past the allow TTL.
	clk.Step(10 * time.Second)
	get(t, client, base+"/metrics", scraper)
	get(t, client, base+"/metrics", stranger)
	if n := count.tokens.Load(); n != tokens+1 {
		t.Errorf("past the deny TTL: %d more TokenReviews, want 1 (the refused token's)", n-tokens)
	}
	clk.Step(2 * time.Minute)
	if code, _ := get(t, client, base+"/metrics", scraper); code != http.StatusOK {
		t.Errorf("scrape past the allow TTL: %d, want 200", code)
	}
	if n := count.tokens.Load(); n != tokens+2 {
		t.Errorf("past the allow TTL: %d more TokenReviews, want 2", n-tokens)
	}
}

// TestAPIServerDown: a review that cannot be made answers 503 and is not
// cached.
func TestAPIServerDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	rc := &rest.Config{Host: "https://" + addr, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	e, err := metricsauth.Setup(metricsauth.Config{Mode: metricsauth.Kubernetes}, rc, log)
	if err != nil {
		t.Fatal(err)
	}
	base := serve(t, e)
	const token = "secret-token-never-logged"
	for range 2 {
		if code, _ := get(t, insecureClient(), base+"/metrics", token); code != http.StatusServiceUnavailable {
			t.Errorf("API server unreachable: %d, want 503", code)
		}
	}
	if !strings.Contains(logs.String(), "metrics request not reviewed") {
		t.Errorf("the failed review is not logged: %q", logs.String())
	}
	if strings.Contains(logs.String(), token) {
		t.Errorf("the log holds the token: %q", logs.String())
	}
}
