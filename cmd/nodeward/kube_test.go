package main

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/test/cluster"
)

// TestConnectionFlagsReachTheServer: --server, --token and
// --certificate-authority alone (no kubeconfig) reach the real API server
// as the token's service account; --as impersonates; --request-timeout
// bounds a request to a server that never answers.
func TestConnectionFlagsReachTheServer(t *testing.T) {
	cp := env.ControlPlane(t)
	client := cp.Client()
	ctx := t.Context()
	node := cp.CreateNodes(t, cluster.NodeSpec{Prefix: "conn", Count: 1})[0]
	ns := cp.Namespace(t)
	if _, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: "operator"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "operator", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	t.Setenv("HOME", t.TempDir())
	server := cp.Config().Host
	ca := "--certificate-authority=" + filepath.Join(cp.Dir(), "ca.crt")

	// The server names the identity the token authenticated: the flags
	// reached it. The service account may not read Nodes.
	out, code := run(t, "uncordon", node, "--server="+server, "--token="+tr.Status.Token, ca)
	want := `User "system:serviceaccount:` + ns + `:operator" cannot get resource "nodes"`
	if code == 0 || !strings.Contains(out, want) {
		t.Fatalf("uncordon with --server and --token: exit %d, want %q in:\n%s", code, want, out)
	}
	out, code = run(t, "status", "-s", server, "--token="+tr.Status.Token, ca)
	if code == 0 || !strings.Contains(out, `"system:serviceaccount:`+ns+`:operator"`) {
		t.Fatalf("status with -s and --token: exit %d:\n%s", code, out)
	}

	out, code = run(t, "uncordon", node, "--kubeconfig="+cp.KubeconfigPath(), "--as=alice")
	if code == 0 || !strings.Contains(out, `User "alice" cannot get resource "nodes"`) {
		t.Fatalf("uncordon --as=alice: exit %d:\n%s", code, out)
	}
	if out, code = run(t, "uncordon", node, "--kubeconfig="+cp.KubeconfigPath()); code != 0 {
		t.Fatalf("uncordon as the admin: exit %d:\n%s", code, out)
	}

	// A server that accepts connections and never answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	start := time.Now()
	out, code = run(t, "uncordon", node, "--server=https://"+ln.Addr().String(), "--insecure-skip-tls-verify",
		"--token=x", "--request-timeout=1s")
	if elapsed := time.Since(start); code == 0 || elapsed > 8*time.Second || !strings.Contains(strings.ToLower(out), "timeout") {
		t.Fatalf("--request-timeout=1s against a silent server: exit %d after %s:\n%s", code, elapsed, out)
	}
}

// TestRequestTimeoutReachesTheClient: --request-timeout sets the client's
// timeout and -n the namespace; every command that talks to the API server
// has the connection flags, and -n only where it means something.
func TestRequestTimeoutReachesTheClient(t *testing.T) {
	var f kubeFlags
	c := &cobra.Command{}
	f.register(c, true)
	if err := c.ParseFlags([]string{"--kubeconfig=" + writeKubeconfig(t, deadServer), "--request-timeout=1500ms", "-n", "ops"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := f.restConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Timeout != 1500*time.Millisecond {
		t.Errorf("--request-timeout=1500ms: client timeout %s", cfg.Timeout)
	}
	if ns, explicit, err := f.namespace(); err != nil || ns != "ops" || !explicit {
		t.Errorf("-n ops: namespace %q explicit %t err %v", ns, explicit, err)
	}
	root := newRootCommand()
	for cmd, withNS := range map[string]bool{"agent": false, "coordinator": true, "drain": false, "uncordon": false, "status": false} {
		sub, _, err := root.Find([]string{cmd})
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"server", "token", "as", "request-timeout", "context", "kubeconfig",
			"insecure-skip-tls-verify", "certificate-authority"} {
			if sub.Flags().Lookup(name) == nil {
				t.Errorf("%s lacks --%s", cmd, name)
			}
		}
		if got := sub.Flags().Lookup("namespace") != nil; got != withNS {
			t.Errorf("%s: --namespace present %t, want %t", cmd, got, withNS)
		}
	}
}

// TestAgentRateLimitFlags: the agent's client-side limit takes the
// kubelet's flags and defaults, and a value that would stop or unbound the
// agent's requests is refused by its flag's name before the agent starts.
func TestAgentRateLimitFlags(t *testing.T) {
	t.Parallel()
	var r clientRateLimit
	cmd := &cobra.Command{}
	r.register(cmd)
	if err := cmd.ParseFlags(nil); err != nil {
		t.Fatal(err)
	}
	cfg := &rest.Config{}
	if err := r.apply(cfg); err != nil || cfg.QPS != 50 || cfg.Burst != 100 {
		t.Fatalf("defaults: QPS %v, burst %d, err %v; want the kubelet's 50 and 100", cfg.QPS, cfg.Burst, err)
	}
	if err := cmd.ParseFlags([]string{"--kube-api-qps=7.5", "--kube-api-burst=9"}); err != nil {
		t.Fatal(err)
	}
	if err := r.apply(cfg); err != nil || cfg.QPS != 7.5 || cfg.Burst != 9 {
		t.Fatalf("given: QPS %v, burst %d, err %v; want 7.5 and 9", cfg.QPS, cfg.Burst, err)
	}

	for _, c := range []struct{ flag, want string }{
		{"--kube-api-qps=0", "--kube-api-qps 0: must be more than 0"},
		{"--kube-api-qps=-1", "--kube-api-qps -1: must be more than 0"},
		{"--kube-api-qps=NaN", "--kube-api-qps NaN: must be more than 0"},
		{"--kube-api-burst=0", "--kube-api-burst 0: must be 1 or more"},
	} {
		out, code := run(t, "agent", "--node-name=n1", "--server=https://127.0.0.1:1", c.flag)
		if code != exitUsage || !strings.Contains(out, c.want) {
			t.Errorf("agent %s: exit %d, want %d with %q in:\n%s", c.flag, code, exitUsage, c.want, out)
		}
	}
}
