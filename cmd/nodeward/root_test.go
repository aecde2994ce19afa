package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func TestVersionPrintsVersionCommitAndGo(t *testing.T) {
	var out bytes.Buffer
	cmd := newRootCommand()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"version"})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("version: %v", err)
	}
	for _, want := range []string{version, commit, runtime.Version()} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("version output %q lacks %q", out.String(), want)
		}
	}
}

func TestExitCodeHonoursExitError(t *testing.T) {
	if got := exitCode(&exitError{code: 2, err: errors.New("boom")}); got != 2 {
		t.Errorf("exitCode(exitError{2}) = %d, want 2", got)
	}
	if got := exitCode(errors.New("boom")); got != 1 {
		t.Errorf("exitCode(plain error) = %d, want 1", got)
	}
}

func writeKubeconfig(t *testing.T, server string) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: server}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t"}
	cfg.Contexts["x"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "x"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCredentialsFollowKubectlOrder: --kubeconfig beats KUBECONFIG, which
// beats the in-cluster service account.
func TestCredentialsFollowKubectlOrder(t *testing.T) {
	fromFlag := writeKubeconfig(t, "https://flag.example:6443")
	fromEnv := writeKubeconfig(t, "https://env.example:6443")
	t.Setenv("KUBECONFIG", fromEnv)
	t.Setenv("HOME", t.TempDir())

	f := kubeFlags{kubeconfig: fromFlag}
	cfg, err := f.restConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://flag.example:6443" {
		t.Errorf("with --kubeconfig: host %q, want the flag's", cfg.Host)
	}

	f = kubeFlags{}
	if cfg, err = f.restConfig(); err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://env.example:6443" {
		t.Errorf("with KUBECONFIG only: host %q, want the variable's", cfg.Host)
	}

	// Nothing configured and not in a pod: a clear error, not a guess.
	t.Setenv("KUBECONFIG", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := f.restConfig(); err == nil {
		t.Error("no kubeconfig and no in-cluster environment: want an error")
	}
	if _, err := os.Stat("/var/run/secrets/kubernetes.io/serviceaccount/token"); err == nil {
		t.Log("running in a pod; the in-cluster branch was not exercised")
	}
}
