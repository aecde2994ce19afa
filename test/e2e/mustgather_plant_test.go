package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
)

// plantSecrets creates, in nodeward's namespace, a Secret, a ConfigMap
// holding a PEM private key, a kubeconfig and a bearer credential, a
// nodeward pod (its log is collected) and an Event carrying a JWT; it
// annotates a Node with a PEM key and the pool with a token and a
// kubeconfig.
func plantSecrets(t *testing.T, p *pool, _ string) {
	t.Helper()
	ctx := context.Background()
	core := p.cp.Client().CoreV1()
	nw := v1alpha1.AgentLeaseNamespace
	jwt := "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQifQ." + plantedJWTSignature
	objects := []func() error{
		func() error {
			_, err := core.Secrets(nw).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "mg-planted-secret"},
				StringData: map[string]string{"token": plantedSecretToken}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := core.ConfigMaps(nw).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "mg-planted",
				Annotations: map[string]string{"example.com/note": "Authorization: Bearer " + plantedBearer}},
				Data: map[string]string{"tls.key": pemKey(plantedPEMBody), "kubeconfig": plantedKubeconfig(),
					"settings": "verbose: true\n"}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := core.Pods(nw).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "mg-planted-agent",
				Labels: map[string]string{"app.kubernetes.io/part-of": "nodeward", "app.kubernetes.io/component": "agent"}},
				Spec: corev1.PodSpec{NodeName: p.names[1], Containers: []corev1.Container{{Name: "agent", Image: "nodeward"}},
					Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := core.Events(nw).Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "mg-planted-event"},
				InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: p.names[1], APIVersion: "v1", Namespace: nw},
				Reason:         "Planted", Message: "the agent used token " + jwt, Type: corev1.EventTypeNormal,
				FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Count: 1}, metav1.CreateOptions{})
			return err
		},
	}
	for _, create := range objects {
		if err := create(); err != nil {
			t.Fatalf("plant: %v", err)
		}
	}
	t.Cleanup(func() {
		_ = core.Secrets(nw).Delete(context.Background(), "mg-planted-secret", metav1.DeleteOptions{})
		_ = core.ConfigMaps(nw).Delete(context.Background(), "mg-planted", metav1.DeleteOptions{})
		_ = core.Pods(nw).Delete(context.Background(), "mg-planted-agent", metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		_ = core.Events(nw).Delete(context.Background(), "mg-planted-event", metav1.DeleteOptions{})
	})
	patchNode(t, p, p.names[1], map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		"nodeward.io/planted-key": pemKey(plantedNodePEMBody)}}})
	annotatePool(t, p, map[string]string{"support.example.com/token": plantedPoolToken,
		"nodeward.io/planted-kubeconfig": plantedKubeconfig()})
}

func annotatePool(t *testing.T, p *pool, ann map[string]string) {
	t.Helper()
	dyn := installPoolAPI(t, p.cp)
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(v1alpha1.UpdatePoolResource()).Patch(context.Background(), p.prefix, types.MergePatchType, patch,
		metav1.PatchOptions{}); err != nil {
		t.Fatalf("annotate pool %s: %v", p.prefix, err)
	}
}

// waitForGuard waits for the coordinator's disruption guard ConfigMap.
func waitForGuard(t *testing.T, p *pool) {
	t.Helper()
	cluster.WaitFor(t, time.Minute, "the disruption guard ConfigMap", func(ctx context.Context) (bool, error) {
		_, err := p.cp.Client().CoreV1().ConfigMaps(v1alpha1.AgentLeaseNamespace).Get(ctx, v1alpha1.GuardConfigMapName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
}

// plantHostState writes a host root with the agent's state file (a
// planted PEM key in it) and host mode's configuration.
func plantHostState(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	state := `{"step":"Draining","target":"os-2","note":"` + strings.ReplaceAll(pemKey(plantedHostPEMBody), "\n", `\n`) + `"}`
	for path, data := range map[string]string{
		"var/lib/nodeward/update-state.json": state,
		"etc/nodeward/config.yaml":           "apiVersion: nodeward.io/v1alpha1\nkind: AgentConfig\n",
	} {
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// mustGatherAccounts are two service accounts: full is bound to the
// shipped ClusterRole and Role, clusterOnly to the ClusterRole only.
type mustGatherAccounts struct{ full, clusterOnly string }

// bindMustGatherRoles creates manifests/base/rbac-must-gather.yaml's
// roles as shipped and binds them to two service accounts of ns.
func bindMustGatherRoles(t *testing.T, p *pool, ns string) mustGatherAccounts {
	t.Helper()
	ctx := context.Background()
	clusterRole, role := shippedMustGatherRoles(t)
	rbac := p.cp.Client().RbacV1()
	if _, err := rbac.ClusterRoles().Create(ctx, clusterRole, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := rbac.Roles(role.Namespace).Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	accounts := mustGatherAccounts{full: "mg-full", clusterOnly: "mg-cluster-only"}
	for _, sa := range []string{accounts.full, accounts.clusterOnly} {
		subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}
		crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + sa}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole.Name}}
		if _, err := rbac.ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rbac.ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{}) })
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + accounts.full, Namespace: role.Namespace},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: accounts.full, Namespace: ns}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}}
	if _, err := rbac.RoleBindings(role.Namespace).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = rbac.RoleBindings(role.Namespace).Delete(context.Background(), rb.Name, metav1.DeleteOptions{})
	})
	return accounts
}

// shippedMustGatherRoles reads the ClusterRole and the Role of
// manifests/base/rbac-must-gather.yaml.
func shippedMustGatherRoles(t *testing.T) (*rbacv1.ClusterRole, *rbacv1.Role) {
	t.Helper()
	_, here, _, _ := runtime.Caller(0)
	data, err := os.ReadFile(filepath.Join(filepath.Dir(here), "..", "..", "manifests", "base", "rbac-must-gather.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(data), "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("rbac-must-gather.yaml: %d documents, want a ClusterRole and a Role", len(docs))
	}
	var clusterRole rbacv1.ClusterRole
	var role rbacv1.Role
	if err := yaml.UnmarshalStrict([]byte(docs[0]), &clusterRole); err != nil || clusterRole.Kind != "ClusterRole" {
		t.Fatalf("rbac-must-gather.yaml's first document: %v, kind %q", err, clusterRole.Kind)
	}
	if err := yaml.UnmarshalStrict([]byte(docs[1]), &role); err != nil || role.Kind != "Role" {
		t.Fatalf("rbac-must-gather.yaml's second document: %v, kind %q", err, role.Kind)
	}
	return &clusterRole, &role
}
