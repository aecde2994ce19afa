package mustgather

import (
	"encoding/json"
	"strings"
	"testing"
)

const testPEMKey = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAplantedPEMbody0123\nabcdefghij+/=\n-----END RSA PRIVATE KEY-----"

const testCert = "-----BEGIN CERTIFICATE-----\nMIIBcertificatebodyPUBLIC\n-----END CERTIFICATE-----"

const testJWT = "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ.eyJzdWIiOiJzeXN0ZW06c2EifQ.c2lnbmF0dXJlcGxhbnRlZA"

func TestRedactTextRemovesSecrets(t *testing.T) {
	cases := []struct {
		name, in string
		gone     []string
		kept     []string
	}{
		{"pem key", "before\n" + testPEMKey + "\nafter", []string{"plantedPEMbody", "abcdefghij"}, []string{"before", "after", "RSA PRIVATE KEY"}},
		{"pem key JSON-escaped", `{"tls.key":"` + strings.ReplaceAll(testPEMKey, "\n", `\n`) + `","x":"y"}`,
			[]string{"plantedPEMbody"}, []string{`"x":"y"`}},
		{"pem key cut short", "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIplantedTruncated", []string{"plantedTruncated"}, []string{"EC PRIVATE KEY"}},
		{"certificate kept", testCert, nil, []string{"MIIBcertificatebodyPUBLIC"}},
		{"bearer header", `msg="request" header="Authorization: Bearer s3cr3t-planted-bearer.value"`, []string{"s3cr3t-planted-bearer"}, []string{"Bearer " + Redacted}},
		{"jwt", "token was " + testJWT + " end", []string{"c2lnbmF0dXJlcGxhbnRlZA", "eyJzdWIi"}, []string{" end"}},
		{"kubeconfig token line", "users:\n- name: u\n  user:\n    token: planted-kube-token\n", []string{"planted-kube-token"}, []string{"users:"}},
		{"client-key-data", "    client-key-data: cGxhbnRlZC1rZXk=\n", []string{"cGxhbnRlZC1rZXk"}, nil},
		{"json password", `{"password": "hunter2-planted", "user": "bob"}`, []string{"hunter2-planted"}, []string{`"user": "bob"`}},
		{"env assignment", "AWS_SECRET_ACCESS_KEY=planted/secret+key", []string{"planted/secret"}, nil},
		{"flag", "--token=planted-flag-token --v=2", []string{"planted-flag-token"}, []string{"--v=2"}},
		{"harmless", `{"resourceVersion":"12","step":"Draining"}`, nil, []string{`"resourceVersion":"12"`, "Draining"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := string(RedactText([]byte(c.in)))
			for _, g := range c.gone {
				if strings.Contains(out, g) {
					t.Errorf("%q survives the redaction:\n%s", g, out)
				}
			}
			for _, k := range c.kept {
				if !strings.Contains(out, k) {
					t.Errorf("%q was lost:\n%s", k, out)
				}
			}
		})
	}
}

func TestRedactTextKeepsJSONValid(t *testing.T) {
	in := map[string]any{"data": map[string]any{"tls.key": testPEMKey, "config": "token: abc\npassword=xyz\n", "sa": testJWT,
		"note": "Authorization: Bearer abcdefghijkl"}}
	raw, err := json.MarshalIndent(in, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	out := RedactText(raw)
	var back map[string]any
	if err := json.Unmarshal(out, &back); err != nil {
		t.Fatalf("redacted JSON no longer parses: %v\n%s", err, out)
	}
	for _, gone := range []string{"plantedPEMbody", "abc\\n", "xyz", "c2lnbmF0dXJl", "abcdefghijkl"} {
		if strings.Contains(string(out), gone) {
			t.Errorf("%q survives:\n%s", gone, out)
		}
	}
}

func TestRedactObject(t *testing.T) {
	kubeconfig := "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    server: https://x\n  name: c\nusers:\n- name: u\n  user:\n    client-certificate-data: Y2VydA==\n"
	obj := map[string]any{
		"metadata": map[string]any{"name": "cm", "managedFields": []any{map[string]any{"manager": "kubectl"}},
			"annotations": map[string]any{"example.com/api-token": "planted-annotation-token", "nodeward.io/x": "kept"}},
		"data": map[string]any{"kubeconfig": kubeconfig, "tls.key": testPEMKey, "ca.crt": testCert, "plain": "value"},
		"list": []any{"Bearer planted-in-list-xyz", map[string]any{"secret": "planted-nested"}},
	}
	RedactObject(obj)
	raw, _ := json.Marshal(obj)
	out := string(raw)
	for _, gone := range []string{"managedFields", "planted-annotation-token", "client-certificate-data", "plantedPEMbody",
		"planted-in-list-xyz", "planted-nested"} {
		if strings.Contains(out, gone) {
			t.Errorf("%q survives RedactObject:\n%s", gone, out)
		}
	}
	for _, kept := range []string{`"nodeward.io/x":"kept"`, "MIIBcertificatebodyPUBLIC", `"plain":"value"`, Redacted + " (kubeconfig)"} {
		if !strings.Contains(out, kept) {
			t.Errorf("%q lost by RedactObject:\n%s", kept, out)
		}
	}
}

func TestLooksLikeKubeconfig(t *testing.T) {
	for in, want := range map[string]bool{
		"apiVersion: v1\nkind: Config\n":                        true,
		`{"clusters":[],"users":[],"contexts":[]}`:              true,
		"clusters:\n- name: a\nusers:\n- name: b\n":             true,
		"apiVersion: nodeward.io/v1alpha1\nkind: AgentConfig\n": false,
		"users: 3": false,
	} {
		if got := LooksLikeKubeconfig(in); got != want {
			t.Errorf("LooksLikeKubeconfig(%q) = %v, want %v", in, got, want)
		}
	}
}

// TestRedactJSONKeepsStructure: the JSON pass leaves a credential-named
// key's number or object alone (the file stays valid JSON) and still
// takes out a PEM key, a bearer credential and a JWT inside strings.
func TestRedactJSONKeepsStructure(t *testing.T) {
	obj := map[string]any{"tokenExpirationSeconds": 3600, "serviceAccountToken": map[string]any{"path": "t"},
		"note": "Authorization: Bearer abcdefghijkl", "key": testPEMKey, "sa": testJWT, "secrets": []any{"a"}}
	raw, err := json.MarshalIndent(obj, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	out := RedactJSON(raw)
	var back map[string]any
	if err := json.Unmarshal(out, &back); err != nil {
		t.Fatalf("RedactJSON broke the JSON: %v\n%s", err, out)
	}
	for _, gone := range []string{"plantedPEMbody", "abcdefghijkl", "c2lnbmF0dXJl"} {
		if strings.Contains(string(out), gone) {
			t.Errorf("%q survives RedactJSON:\n%s", gone, out)
		}
	}
	if back["tokenExpirationSeconds"] != float64(3600) {
		t.Errorf("a number under a credential-named key changed: %v", back["tokenExpirationSeconds"])
	}
}
