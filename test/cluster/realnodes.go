package cluster

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
)

// writeNodeTokens writes the API server's static token file for
// Options.RealNodes: one line per node, "token,user,uid,groups".
func (cp *ControlPlane) writeNodeTokens() error {
	if len(cp.opts.RealNodes) == 0 {
		return nil
	}
	cp.nodeToken = map[string]string{}
	var lines strings.Builder
	for _, name := range cp.opts.RealNodes {
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return fmt.Errorf("node token for %s: %w", name, err)
		}
		token := hex.EncodeToString(b)
		cp.nodeToken[name] = token
		fmt.Fprintf(&lines, "%s,system:node:%s,node-%s,\"system:nodes\"\n", token, name, name)
	}
	if err := os.WriteFile(cp.path("node-tokens.csv"), []byte(lines.String()), 0o600); err != nil {
		return fmt.Errorf("write the node token file: %w", err)
	}
	return cp.writeKubeletClientCert()
}

// writeKubeletClientCert issues the API server's client certificate for
// the kubelets (their x509 authentication trusts the control plane's CA):
// without it the API server cannot reach a kubelet, and a pod's log, exec
// or port-forward fails ("nodeward must-gather" reads the agents' logs).
func (cp *ControlPlane) writeKubeletClientCert() error {
	cert, key, err := cp.ca.issue("kube-apiserver-kubelet-client", nil, nil)
	if err != nil {
		return err
	}
	return writeFiles(cp.dir, map[string][]byte{"kubelet-client.crt": cert, "kubelet-client.key": key})
}

func (cp *ControlPlane) authorizationMode() string {
	if len(cp.opts.RealNodes) > 0 {
		return "Node,RBAC"
	}
	return "RBAC"
}

// realNodeArgs are the API server flags for Options.RealNodes. The
// ServiceAccount admission plugin is on by default (pods get their projected
// token) and the controller manager publishes the CA (--root-ca-file) in
// every namespace's kube-root-ca.crt.
func (cp *ControlPlane) realNodeArgs() []string {
	if len(cp.opts.RealNodes) == 0 {
		return nil
	}
	return []string{
		"--token-auth-file=" + cp.path("node-tokens.csv"),
		"--enable-admission-plugins=NodeRestriction",
		"--kubelet-client-certificate=" + cp.path("kubelet-client.crt"),
		"--kubelet-client-key=" + cp.path("kubelet-client.key"),
		// The real nodes' names resolve nowhere; their InternalIP is the
		// loopback their kubelets listen on.
		"--kubelet-preferred-address-types=InternalIP",
	}
}

// NodeToken is the static bearer token of a node named in
// Options.RealNodes, for its kubelet's kubeconfig; "" for any other name.
func (cp *ControlPlane) NodeToken(name string) string { return cp.nodeToken[name] }

// CACertPEM is the control plane's CA certificate (it signed the API
// server's serving certificate and every client certificate).
func (cp *ControlPlane) CACertPEM() []byte { return cp.ca.certPEM }
