package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/mustgather"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/coordinatortest"
)

// The secrets planted in the cluster and on the host; none may appear
// anywhere in the archive.
const (
	plantedSecretToken   = "planted-secret-token-7f3a91"
	plantedPEMBody       = "MIIEplantedPEMbodyQ9xZ"
	plantedNodePEMBody   = "MIIEplantedNodeAnnotationPEMk2"
	plantedKubeToken     = "planted-kubeconfig-token-5c1e"
	plantedBearer        = "planted-bearer-credential-88xy"
	plantedPoolToken     = "planted-pool-token-42ab"
	plantedJWTSignature  = "cGxhbnRlZEpXVHNpZ25hdHVyZQ"
	plantedHostPEMBody   = "MIIEplantedHostStatePEMbody7"
	mustGatherPoolPrefix = "mustgather"
)

func pemKey(body string) string {
	return "-----BEGIN RSA PRIVATE KEY-----\n" + body + "\nAAAABBBBCCCC+/==\n-----END RSA PRIVATE KEY-----\n"
}

func plantedKubeconfig() string {
	return "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    server: https://10.0.0.1:6443\n  name: c\n" +
		"contexts:\n- context:\n    cluster: c\n    user: u\n  name: x\ncurrent-context: x\nusers:\n- name: u\n  user:\n    token: " + plantedKubeToken + "\n"
}

// TestMustGatherMidRollout: a rollout held mid-way (one node's drain
// blocked by a PDB) under nodeward's coordinator and in-process agents,
// with credentials planted in a Secret, a ConfigMap, a Node annotation, a
// pool annotation, an Event and the host's state file. `nodeward
// must-gather` (the release binary) collects every part, lists them in
// index.json, and no planted credential is anywhere in the archive. Run
// as a service account bound to the shipped ClusterRole and Role it
// collects the same; bound to the ClusterRole alone, the namespaced
// parts fail, are named in the index, and the rest is still collected.
func TestMustGatherMidRollout(t *testing.T) {
	t.Parallel()
	p := newPool(t, mustGatherPoolPrefix, poolOptions{count: 2, maxUnavailable: 1})
	ns := p.cp.Namespace(t)
	blocked := p.names[0]
	blockDrain(p, blocked, ns)
	dyn := installPoolAPI(t, p.cp)
	if err := cluster.CreateAgentLeases(context.Background(), p.cp.Client(), p.names); err != nil {
		t.Fatal(err)
	}
	p.createPool(dyn, v1alpha1.UpdatePoolSpec{OSImage: toOS, MaxUnavailable: ptr.To(intstr.FromInt32(1))})
	p.startAgents()
	coordinatortest.Start(t, p.cp, coordinatortest.Options{Pools: mustGatherPoolPrefix, Resync: time.Second})
	p.waitStep(blocked, v1alpha1.StepDraining, 2*time.Minute)
	plantSecrets(t, p, ns)
	waitForGuard(t, p)
	bin, err := cluster.NodewardBinary(cluster.ReleaseBuild)
	if err != nil {
		t.Fatal(err)
	}
	hostRoot := plantHostState(t)

	files, idx, stderr := runMustGather(t, bin, p.cp.KubeconfigPath(), "--host-root="+hostRoot, "--host-check")
	assertParts(t, p, files, idx, blocked)
	assertProgress(t, stderr, idx)
	assertNoPlantedSecrets(t, files)
	assertJSONValid(t, files)

	assertGatherEntrypoint(t, bin, p.cp.KubeconfigPath())

	limited := bindMustGatherRoles(t, p, ns)
	files, idx, _ = runMustGather(t, bin, p.cp.KubeconfigPath(), "--as=system:serviceaccount:"+ns+":"+limited.full)
	assertCollected(t, files, idx, nil)
	files, idx, _ = runMustGather(t, bin, p.cp.KubeconfigPath(), "--as=system:serviceaccount:"+ns+":"+limited.clusterOnly)
	assertCollected(t, files, idx, []string{"leases", "configmaps", "logs"})
	assertNoPlantedSecrets(t, files)
}

// runMustGather runs the binary into a fresh tarball and returns its
// files by path (without the top directory), the index and stderr.
func runMustGather(t *testing.T, bin, kubeconfig string, extra ...string) (map[string]string, mustgather.Index, string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "mg.tar.gz")
	args := append([]string{"must-gather", "--kubeconfig=" + kubeconfig, "--output=" + out, "--since=1h"}, extra...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && (!errors.As(err, &exit) || exit.ExitCode() != 2) {
		t.Fatalf("nodeward %s: %v\nstderr:\n%s", strings.Join(args, " "), err, stderr.String())
	}
	t.Logf("must-gather %v took %v, exit %v; stderr:\n%s", extra, time.Since(start).Round(time.Millisecond), err, stderr.String())
	files := untar(t, out)
	var idx mustgather.Index
	if err := json.Unmarshal([]byte(files["index.json"]), &idx); err != nil {
		t.Fatalf("index.json: %v\n%s", err, files["index.json"])
	}
	failed := idx.Failed()
	if (len(failed) > 0) != (err != nil) {
		t.Errorf("exit %v with failed parts %v: exit 2 is for failed parts, and only for them", err, failed)
	}
	return files, idx, stderr.String()
}

func untar(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s is no gzip: %v", path, err)
	}
	files := map[string]string{}
	tr := tar.NewReader(gz)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		top, rest, _ := strings.Cut(hdr.Name, "/")
		if !strings.HasPrefix(top, "nodeward-must-gather-") {
			t.Errorf("%s: outside the archive's top directory", hdr.Name)
		}
		files[rest] = string(data)
	}
}

func partOf(idx mustgather.Index, name string) (mustgather.PartResult, bool) {
	for _, p := range idx.Parts {
		if p.Name == name {
			return p, true
		}
	}
	return mustgather.PartResult{}, false
}

// assertParts checks each part of the full run, one by one.
func assertParts(t *testing.T, p *pool, files map[string]string, idx mustgather.Index, blocked string) {
	t.Helper()
	wantIn := map[string][]string{
		"updatepools.json":           {`"name": "` + mustGatherPoolPrefix + `"`, toOS},
		"nodes/" + blocked + ".json": {`"` + v1alpha1.AnnotationState + `": "Draining"`, `"taints"`, `"conditions"`, `"labels"`},
		"leases.json":                {v1alpha1.AgentLeaseName(blocked)},
		"configmaps/" + v1alpha1.GuardConfigMapName + ".json": {v1alpha1.GuardConfigMapName},
		"events/nodes.json":                       {`"kind": "Node"`},
		"events/namespace.json":                   {"mg-planted"},
		"events/updatepools.json":                 nil,
		"host/check.json":                         {`"probes"`, "NodewardMemoryPressure"},
		"host/var/lib/nodeward/update-state.json": {"Draining"},
	}
	for file, contents := range wantIn {
		data, ok := files[file]
		if !ok {
			t.Errorf("the archive lacks %s", file)
			continue
		}
		for _, c := range contents {
			if !strings.Contains(data, c) {
				t.Errorf("%s lacks %q:\n%.2000s", file, c, data)
			}
		}
	}
	if strings.Contains(files["nodes/"+blocked+".json"], `"images"`) {
		t.Errorf("nodes/%s.json holds the images list", blocked)
	}
	assertCollected(t, files, idx, nil)
	for part, skipped := range map[string]string{"machineconfignodes": "not served", "machineconfigpools": "not served",
		"machines-openshift": "not served", "machines-cluster-api": "not served"} {
		if r, _ := partOf(idx, part); !strings.Contains(r.Skipped, skipped) || r.Error != "" {
			t.Errorf("part %s: %+v; want skipped, %s", part, r, skipped)
		}
	}
	for _, n := range p.names {
		if _, ok := files["nodes/"+n+".json"]; !ok {
			t.Errorf("the archive lacks node %s", n)
		}
	}
}

// assertCollected checks that every part is in the index, that its files
// are in the archive and listed, and that exactly failing fail.
func assertCollected(t *testing.T, files map[string]string, idx mustgather.Index, failing []string) {
	t.Helper()
	listed := map[string]bool{}
	for _, f := range idx.Files {
		listed[f.Path] = true
		if _, ok := files[f.Path]; !ok {
			t.Errorf("index.json lists %s, which the archive lacks", f.Path)
		}
	}
	for _, name := range []string{"updatepools", "nodes", "events", "logs", "leases", "configmaps", "machineconfignodes",
		"machineconfigpools", "machines-openshift", "machines-cluster-api", "host", "host-check"} {
		r, ok := partOf(idx, name)
		if !ok {
			t.Errorf("index.json lacks the part %s", name)
			continue
		}
		wantFail := contains(failing, name)
		switch {
		case wantFail && r.Error == "":
			t.Errorf("part %s did not fail: %+v", name, r)
		case wantFail && !strings.Contains(r.Error, "forbidden"):
			t.Errorf("part %s failed, but not for want of permission: %s", name, r.Error)
		case !wantFail && r.Error != "" && name != "logs":
			t.Errorf("part %s failed: %s", name, r.Error)
		}
		for _, f := range r.Files {
			if !listed[f] {
				t.Errorf("part %s's file %s is not in index.json's files", name, f)
			}
		}
		if r.Error == "" && r.Skipped == "" && len(r.Files) == 0 {
			t.Errorf("part %s: collected, yet no files", name)
		}
	}
	assertLogsPart(t, idx, contains(failing, "logs"))
}

// assertLogsPart: the nodeward pod's log is either collected or its
// failure names the pod. kwok's nodes have no kubelet to serve logs,
// so here it fails at the kubelet, past the API server's authorization.
func assertLogsPart(t *testing.T, idx mustgather.Index, wantForbidden bool) {
	t.Helper()
	r, _ := partOf(idx, "logs")
	if wantForbidden {
		return
	}
	if len(r.Files) == 0 && !strings.Contains(r.Error, "mg-planted-agent") {
		t.Errorf("logs: no file and the error does not name the pod: %+v", r)
	}
	if strings.Contains(r.Error, "forbidden") {
		t.Errorf("logs: refused by RBAC: %s", r.Error)
	}
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

// assertProgress: one line per part on stderr.
func assertProgress(t *testing.T, stderr string, idx mustgather.Index) {
	t.Helper()
	for _, part := range idx.Parts {
		if !strings.Contains(stderr, "must-gather: "+part.Name+" ") {
			t.Errorf("stderr has no progress line for %s:\n%s", part.Name, stderr)
		}
	}
}

func assertNoPlantedSecrets(t *testing.T, files map[string]string) {
	t.Helper()
	planted := []string{plantedSecretToken, base64.StdEncoding.EncodeToString([]byte(plantedSecretToken)), plantedPEMBody,
		plantedNodePEMBody, plantedKubeToken, plantedBearer, plantedPoolToken, plantedJWTSignature, plantedHostPEMBody,
		"mg-planted-secret", `"managedFields"`}
	for name, data := range files {
		for _, s := range planted {
			if strings.Contains(data, s) {
				t.Errorf("%s holds the planted %q", name, s)
			}
		}
	}
}

// assertGatherEntrypoint runs the binary as the image's /usr/bin/gather
// does (a link named gather), with oc's MUST_GATHER_SINCE: it writes the
// files unpacked (here under a temporary --dest-dir given after the
// default /must-gather, which it overrides) with the window from the
// environment.
func assertGatherEntrypoint(t *testing.T, bin, kubeconfig string) {
	t.Helper()
	dir := t.TempDir()
	gather := filepath.Join(dir, "gather")
	if err := os.Symlink(bin, gather); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(dir, "must-gather")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, gather, "--kubeconfig="+kubeconfig, "--dest-dir="+dest)
	cmd.Env = append(os.Environ(), "MUST_GATHER_SINCE=30m0s")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && (!errors.As(err, &exit) || exit.ExitCode() != 2) {
		t.Fatalf("gather: %v\n%s", err, out)
	}
	var idx mustgather.Index
	data, err := os.ReadFile(filepath.Join(dest, "index.json"))
	if err != nil {
		t.Fatalf("gather wrote no index.json: %v\n%s", err, out)
	}
	if err := json.Unmarshal(data, &idx); err != nil {
		t.Fatal(err)
	}
	if idx.LogsSince != "30m0s" {
		t.Errorf("gather's logs window %q, want MUST_GATHER_SINCE's 30m0s", idx.LogsSince)
	}
	for _, f := range idx.Files {
		if _, err := os.Stat(filepath.Join(dest, filepath.FromSlash(f.Path))); err != nil {
			t.Errorf("gather: index.json lists %s: %v", f.Path, err)
		}
	}
	if len(idx.Files) < 5 {
		t.Errorf("gather wrote %d files: %+v", len(idx.Files), idx.Files)
	}
}

// assertJSONValid: the redaction left every JSON file valid.
func assertJSONValid(t *testing.T, files map[string]string) {
	t.Helper()
	for name, data := range files {
		if strings.HasSuffix(name, ".json") && !json.Valid([]byte(data)) {
			t.Errorf("%s is not valid JSON after the redaction:\n%.2000s", name, data)
		}
	}
}
