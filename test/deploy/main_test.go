package deploy_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
)

var env cluster.Env

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

const (
	agentServiceAccount       = "nodeward-agent"
	coordinatorServiceAccount = "nodeward-coordinator"
	// kubectlTimeout bounds one kubectl run; a server dry run of an overlay
	// takes about a second here.
	kubectlTimeout = 2 * time.Minute
)

// manifestsDir is the repository's manifests/ directory, found from this
// file's location so that the tests do not depend on the working directory.
func manifestsDir(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the test source file")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "manifests")
}

// kubectl runs the control plane's kubectl as the admin and returns its
// combined output; a failure fails the test with that output.
func kubectl(t testing.TB, cp *cluster.ControlPlane, args ...string) string {
	t.Helper()
	out, err := runKubectl(cp, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func runKubectl(cp *cluster.ControlPlane, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, cp.Binary("kubectl"), append([]string{"--kubeconfig", cp.KubeconfigPath()}, args...)...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	return out.String(), err
}

// baseInstall applies manifests/base once per package: the RBAC tests need
// the real ServiceAccounts, roles and admission policies in place.
type baseInstall struct {
	once sync.Once
	out  string
	err  error
}

var installed baseInstall

func installBase(t testing.TB, cp *cluster.ControlPlane) {
	t.Helper()
	installed.once.Do(func() {
		installed.out, installed.err = runKubectl(cp, "apply", "--server-side", "--field-manager=nodeward-test", "-k", filepath.Join(manifestsDir(t), "base"))
	})
	if installed.err != nil {
		t.Fatalf("kubectl apply -k manifests/base: %v\n%s", installed.err, installed.out)
	}
}

// boundTo says what a minted token is bound to.
type boundTo struct {
	kind, name, namespace string
}

// serviceAccountClient mints a token for a ServiceAccount of nodeward-system
// with the TokenRequest API, bound to obj (none when obj.kind is empty), and
// returns a clientset that authenticates with it, as a pod's projected token
// would.
func serviceAccountClient(t testing.TB, cp *cluster.ControlPlane, account string, obj boundTo) kubernetes.Interface {
	t.Helper()
	client, err := kubernetes.NewForConfig(serviceAccountConfig(t, cp, account, obj))
	if err != nil {
		t.Fatalf("client for %s: %v", account, err)
	}
	return client
}

// serviceAccountConfig is serviceAccountClient's client configuration, for
// nodeward's own client (api/kube).
func serviceAccountConfig(t testing.TB, cp *cluster.ControlPlane, account string, obj boundTo) *rest.Config {
	t.Helper()
	ctx := context.Background()
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptrTo[int64](3600),
	}}
	if obj.kind != "" {
		ref := &authenticationv1.BoundObjectReference{Kind: obj.kind, APIVersion: "v1", Name: obj.name}
		switch obj.kind {
		case "Node":
			n, err := cp.Client().CoreV1().Nodes().Get(ctx, obj.name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("get node %s to bind a token to: %v", obj.name, err)
			}
			ref.UID = n.UID
		case "Pod":
			p, err := cp.Client().CoreV1().Pods(obj.namespace).Get(ctx, obj.name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("get pod %s/%s to bind a token to: %v", obj.namespace, obj.name, err)
			}
			ref.UID = p.UID
		case "Secret":
			s, err := cp.Client().CoreV1().Secrets(obj.namespace).Get(ctx, obj.name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("get secret %s/%s to bind a token to: %v", obj.namespace, obj.name, err)
			}
			ref.UID = s.UID
		}
		req.Spec.BoundObjectRef = ref
	}
	tok, err := cp.Client().CoreV1().ServiceAccounts(v1alpha1.AgentLeaseNamespace).CreateToken(ctx, account, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s bound to %+v: %v", account, obj, err)
	}
	admin := cp.Config()
	cfg := &rest.Config{
		Host:            admin.Host,
		BearerToken:     tok.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: admin.CAData},
		QPS:             100, Burst: 200,
	}
	return cfg
}

// requireForbidden fails unless err is a 403 whose message contains want
// (empty: any 403).
func requireForbidden(t testing.TB, what string, err error, want string) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Fatalf("%s: want 403 Forbidden, got %v", what, err)
	}
	if want != "" && !strings.Contains(err.Error(), want) {
		t.Fatalf("%s: forbidden for the wrong reason: want a message containing %q, got %v", what, want, err)
	}
}

func requireAllowed(t testing.TB, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: want success, got %v", what, err)
	}
}

func ptrTo[T any](v T) *T { return &v }

// agentPodOn waits for the agent DaemonSet's pod on node and returns its name:
// the DaemonSet of manifests/base runs on every node, kwok's included.
func agentPodOn(t testing.TB, cp *cluster.ControlPlane, node string) string {
	t.Helper()
	var name string
	cluster.WaitFor(t, time.Minute, "the nodeward-agent pod on "+node, func(ctx context.Context) (bool, error) {
		pods, err := cp.Client().CoreV1().Pods(v1alpha1.AgentLeaseNamespace).List(ctx, metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/name=nodeward-agent",
			FieldSelector: "spec.nodeName=" + node,
		})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				name = p.Name
				return true, nil
			}
		}
		return false, nil
	})
	return name
}
