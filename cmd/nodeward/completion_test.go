package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/nodeward/nodeward/test/cluster"
)

// complete runs cobra's hidden __complete command in-process, as the
// shell scripts do, and returns the offered words and the directive line.
func complete(t *testing.T, args ...string) (words []string, directive string) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := newRootCommand()
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(append([]string{cobra.ShellCompRequestCmd}, args...))
	if err := cmd.ExecuteContext(t.Context()); err != nil {
		t.Fatalf("__complete %v: %v\n%s", args, err, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	return lines[:len(lines)-1], lines[len(lines)-1]
}

func hasAll(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	for _, w := range want {
		found := false
		for _, g := range got {
			if g == w || strings.HasPrefix(g, w+"\t") {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: %q not offered in %q", what, w, got)
		}
	}
}

// TestCompletionOffersEnumValues: every flag that takes one of a few
// words completes them, without a cluster.
func TestCompletionOffersEnumValues(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"status", "-o", ""}, []string{"json", "yaml", "wide"}},
		{[]string{"status", "--log-format", ""}, []string{"text", "json"}},
		{[]string{"drain", "--log-level", ""}, []string{"debug", "info", "warn", "error"}},
		{[]string{"drain", "--on-timeout", ""}, []string{"fail", "retry", "yield", "force"}},
		{[]string{"drain", "--dry-run="}, []string{"none", "client", "server"}},
		{[]string{"agent", "--protocol", ""}, []string{"nodeward", "mco"}},
		{[]string{"coordinator", "--metrics-auth", ""}, []string{"kubernetes", "none"}},
	} {
		words, directive := complete(t, c.args...)
		hasAll(t, strings.Join(c.args, " "), words, c.want...)
		if directive != ":4" {
			t.Errorf("%v: directive %s, want :4 (no file completion)", c.args, directive)
		}
	}
}

// TestCompletionOffersNodeAndPoolNames: drain and uncordon complete the
// real API server's node names through the command's own --kubeconfig,
// status its pool names; an unreachable server offers nothing, quietly.
func TestCompletionOffersNodeAndPoolNames(t *testing.T) {
	cp, pool, _ := statusFixture(t, "compl")
	nodes := cp.CreateNodes(t, cluster.NodeSpec{Prefix: "complx", Count: 2})
	kube := "--kubeconfig=" + cp.KubeconfigPath()

	words, directive := complete(t, "drain", kube, "complx")
	if len(words) != 2 || directive != ":4" {
		t.Errorf("drain complx: %q %s, want the two complx nodes", words, directive)
	}
	hasAll(t, "drain", words, nodes...)
	words, _ = complete(t, "drain", kube, nodes[0], "complx")
	if len(words) != 1 || words[0] != nodes[1] {
		t.Errorf("drain NODE complx: %q, want only %s", words, nodes[1])
	}
	words, _ = complete(t, "uncordon", kube, "")
	hasAll(t, "uncordon", words, nodes...)
	if words, _ = complete(t, "uncordon", kube, nodes[0], ""); len(words) != 0 {
		t.Errorf("uncordon takes one node; offered %q", words)
	}
	words, _ = complete(t, "status", kube, "")
	hasAll(t, "status", words, pool)

	var out, errOut bytes.Buffer
	cmd := newRootCommand()
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs([]string{cobra.ShellCompRequestCmd, "drain", "--server=https://127.0.0.1:1", "--token=x", "--request-timeout=2s", ""})
	// cobra's own directive line goes to stderr (the shell scripts drop
	// it); the error must not.
	if err := cmd.ExecuteContext(t.Context()); err != nil || strings.Contains(errOut.String(), "127.0.0.1:1") {
		t.Errorf("completion against an unreachable server is not quiet: %v, stderr %q", err, errOut.String())
	}
	words, directive = complete(t, "drain", "--server=https://127.0.0.1:1", "--token=x", "--request-timeout=2s", "")
	if len(words) != 0 || directive != ":5" {
		t.Errorf("drain against an unreachable server: %q %s, want nothing and :5 (error, no file completion)", words, directive)
	}
}
