// Package machineapi runs the REAL OpenShift Machine API controllers (the
// machine controller with its drain controller, the nodelink, MachineSet and
// MachineHealthCheck controllers of github.com/openshift/machine-api-operator)
// against a test/cluster control plane, with a stub actuator standing in for
// the cloud: "creating an instance" creates a kwok Node named after the
// Machine. It is the test bed for nodeward beside the Machine API (issue
// #36): Machines deleted and replaced, drains, lifecycle hooks, health
// checks, as the real controllers do them.
//
// The controllers are built by test/tools/install.sh (`make testbin`) from
// the wrapper module test/machineapi/controllers into
// $NODEWARD_TESTBIN_DIR/machine-api/<version>-<hash>/machine-api-controllers.
//
//	var env cluster.Env
//	func TestMain(m *testing.M) { os.Exit(env.Run(m)) }
//	func TestX(t *testing.T) {
//		cp := env.ControlPlane(t)
//		mapi := machineapi.Start(t, cp, machineapi.Options{})
//		mapi.CreateMachine(ctx, machineapi.MachineSpec{Name: "w-0", Role: "worker"})
//		...
//	}
//
// The controllers have no leader election: two of them against one control
// plane would both act, so tests that run them must not be parallel. Every
// test shares the namespace openshift-machine-api; Start's cleanup removes
// what the test left in it.
package machineapi

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/testenv"
)

// Namespace is where the Machine API objects live, by OpenShift's
// convention.
const Namespace = "openshift-machine-api"

// BinaryVariable names an environment variable that may point at a
// machine-api-controllers binary directly, instead of the testbin cache.
const BinaryVariable = "NODEWARD_MACHINE_API_CONTROLLERS"

// The resources of machine.openshift.io/v1beta1.
var (
	MachineResource    = schema.GroupVersionResource{Group: "machine.openshift.io", Version: "v1beta1", Resource: "machines"}
	MachineSetResource = schema.GroupVersionResource{Group: "machine.openshift.io", Version: "v1beta1", Resource: "machinesets"}
	MHCResource        = schema.GroupVersionResource{Group: "machine.openshift.io", Version: "v1beta1", Resource: "machinehealthchecks"}
)

// The stub actuator's vocabulary (test/machineapi/controllers/stub.go keeps
// the same strings: the wrapper is a module of its own).
const (
	// ProviderIDPrefix + a Node's name is the providerID of a stub instance,
	// and of a kwok node a Machine adopts.
	ProviderIDPrefix = "kwok://"
	// AnnotationDeleted marks a Machine whose instance the stub deleted.
	AnnotationDeleted = "nodeward.test/instance-deleted"
	// AnnotationCreateDelay (a Go duration) holds the stub's Create back
	// until the Machine is that old: it stays Provisioning meanwhile.
	AnnotationCreateDelay = "nodeward.test/create-delay"
	// AnnotationCreateError makes Create fail with an invalid-configuration
	// error (the value is its message): the Machine goes Failed.
	AnnotationCreateError = "nodeward.test/create-error"
	// AnnotationNoNode ("true") makes Create set the providerID but make no
	// Node: the Machine stays Provisioned, without a nodeRef.
	AnnotationNoNode = "nodeward.test/no-node"
	// LabelStubNode marks the Nodes the stub created (value: the Machine's
	// namespace).
	LabelStubNode = "nodeward.test/machine-stub"
)

// The Machine API's own labels and annotations.
const (
	LabelCluster     = "machine.openshift.io/cluster-api-cluster"
	LabelMachineRole = "machine.openshift.io/cluster-api-machine-role"
	LabelMachineType = "machine.openshift.io/cluster-api-machine-type"
	LabelMachineSet  = "machine.openshift.io/cluster-api-machineset"
	// AnnotationMachine is set on a Node by the nodelink controller:
	// "<namespace>/<machine name>".
	AnnotationMachine = "machine.openshift.io/machine"
	// ClusterID is the value of LabelCluster on every object made here.
	ClusterID = "nodeward-test"
)

// Controller names, as the controllers log them when they start working.
var controllerNames = []string{
	"machine-controller", "machine-drain-controller", "nodelink-controller",
	"machineset_controller", "machinehealthcheck-controller",
}

// readyLine is logged by the wrapper's main once the manager runs.
const readyLine = "machine-api-controllers: manager started"

// controllersSource is the wrapper module, relative to the repository root.
const controllersSource = "test/machineapi/controllers"

// controllersKey is the cache key test/tools/install.sh builds the wrapper
// under: the machine-api-operator version from its go.mod, a dash, and the
// first 12 hex digits of the SHA-256 of go.mod, go.sum and the *.go files
// concatenated in name order.
func controllersKey(src string) (string, error) {
	gomod, err := os.ReadFile(filepath.Join(src, "go.mod"))
	if err != nil {
		return "", err
	}
	var version string
	for line := range strings.Lines(string(gomod)) {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "github.com/openshift/machine-api-operator" {
			version = f[1]
		}
	}
	if version == "" {
		return "", fmt.Errorf("%s/go.mod requires no github.com/openshift/machine-api-operator", src)
	}
	files, err := filepath.Glob(filepath.Join(src, "*.go"))
	if err != nil {
		return "", err
	}
	files = append(files, filepath.Join(src, "go.mod"), filepath.Join(src, "go.sum"))
	slices.SortFunc(files, func(a, b string) int { return strings.Compare(filepath.Base(a), filepath.Base(b)) })
	h := sha256.New()
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		h.Write(data)
	}
	return version + "-" + hex.EncodeToString(h.Sum(nil))[:12], nil
}

// Binary finds the machine-api-controllers binary: $NODEWARD_MACHINE_API_CONTROLLERS,
// else the one `make testbin` built for the current wrapper source under
// $NODEWARD_TESTBIN_DIR (or test/tools/install.sh's cache, where
// test/cluster finds the control plane; it does not build the controllers
// itself, `make testbin` does).
func Binary() (string, error) {
	if p := os.Getenv(BinaryVariable); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s: %w", BinaryVariable, err)
		}
		return p, nil
	}
	root, err := cluster.RepoRoot()
	if err != nil {
		return "", err
	}
	key, err := controllersKey(filepath.Join(root, controllersSource))
	if err != nil {
		return "", err
	}
	binDir, err := cluster.BinDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(binDir, "machine-api", key, "machine-api-controllers")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("%w (run `make testbin`: it builds the Machine API controllers for this source)", err)
	}
	return bin, nil
}

// RequireBinary returns Binary, or skips the test (fails it in CI) without it.
func RequireBinary(t testing.TB) string {
	t.Helper()
	bin, err := Binary()
	testenv.Require(t, err == nil, fmt.Sprintf("the real Machine API controllers are not built: %v", err))
	return bin
}

// Options tune the controllers.
type Options struct {
	// NoNodes makes the stub actuator create no Node for any Machine (it
	// still sets the providerID), as when real kubelets register them.
	NoNodes bool
	// Args are extra flags after the harness's own, for example "-v=4".
	Args []string
}

// Controllers is the running machine-api-controllers process of one test,
// with clients for the Machine API objects in Namespace.
type Controllers struct {
	t      testing.TB
	cp     *cluster.ControlPlane
	bin    string
	logDir string
	// Kube and Dynamic are the control plane's admin clients.
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface

	mu     sync.Mutex
	opts   Options
	proc   *cluster.Process
	starts int
	logs   []string
}

var (
	runningMu sync.Mutex
	running   *Controllers
)

// Start installs the Machine API CRDs (test/machineapi/crds) and the
// namespace, starts the controllers against cp and waits until all five
// work. When the test ends the controllers stop, the Machine API objects in
// Namespace and the Nodes the stub made are removed, and, if the test
// failed, the tail of the controllers' log is printed.
func Start(t testing.TB, cp *cluster.ControlPlane, opts Options) *Controllers {
	t.Helper()
	bin := RequireBinary(t)
	dyn, err := dynamic.NewForConfig(cp.Config())
	if err != nil {
		t.Fatalf("dynamic client: %v", err)
	}
	c := &Controllers{t: t, cp: cp, bin: bin, logDir: t.TempDir(), Kube: cp.Client(), Dynamic: dyn}
	runningMu.Lock()
	if running != nil {
		runningMu.Unlock()
		t.Fatalf("Machine API controllers already run (test %s): tests that run them must not be parallel", running.t.Name())
	}
	running = c
	runningMu.Unlock()
	// Registered after t.TempDir, so it runs before the logs are removed,
	// and before Start's callers' cleanups are registered, so it runs after
	// them.
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			c.dumpLogs()
		}
		c.removeAll()
		runningMu.Lock()
		running = nil
		runningMu.Unlock()
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := InstallCRDs(ctx, cp.Client(), dyn); err != nil {
		t.Fatal(err)
	}
	if err := c.start(opts); err != nil {
		t.Fatal(err)
	}
	return c
}

// InstallCRDs installs the Machine, MachineSet and MachineHealthCheck CRDs
// and the namespace, and waits until the CRDs are served. What exists is
// kept.
func InstallCRDs(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface) error {
	root, err := cluster.RepoRoot()
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(root, "test", "machineapi", "crds", "*.crd.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no CRDs in test/machineapi/crds (%v)", err)
	}
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var crd unstructured.Unstructured
		if err := yaml.Unmarshal(data, &crd.Object); err != nil {
			return fmt.Errorf("parse %s: %w", f, err)
		}
		if _, err := dyn.Resource(crds).Create(ctx, &crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("install CRD %s: %w", crd.GetName(), err)
		}
	}
	_, err = kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", Namespace, err)
	}
	for _, gvr := range []schema.GroupVersionResource{MachineResource, MachineSetResource, MHCResource} {
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			_, err := dyn.Resource(gvr).Namespace(Namespace).List(ctx, metav1.ListOptions{Limit: 1})
			return err == nil, nil
		})
		if err != nil {
			return fmt.Errorf("wait until %s is served: %w", gvr.Resource, err)
		}
	}
	return nil
}

// Restart stops the controllers and starts them again with opts, waiting
// until they work.
func (c *Controllers) Restart(opts Options) {
	c.t.Helper()
	c.Stop()
	if err := c.start(opts); err != nil {
		c.t.Fatal(err)
	}
}

func (c *Controllers) start(opts Options) error {
	c.mu.Lock()
	c.starts++
	logPath := filepath.Join(c.logDir, fmt.Sprintf("machine-api-controllers-%d.log", c.starts))
	args := []string{"--kubeconfig=" + c.cp.KubeconfigPath(), "--namespace=" + Namespace, "-v=2"}
	if opts.NoNodes {
		args = append(args, "--create-nodes=false")
	}
	args = append(args, opts.Args...)
	began := time.Now()
	proc, err := cluster.StartProcess("machine-api-controllers", c.bin, logPath, args...)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	c.opts, c.proc, c.logs = opts, proc, append(c.logs, logPath)
	c.mu.Unlock()
	if err := waitReady(proc); err != nil {
		return err
	}
	c.t.Logf("machine-api-controllers ready in %s", time.Since(began).Round(10*time.Millisecond))
	return nil
}

// waitReady waits for the manager's line and each controller's "Starting
// workers" (logged once its informers synced).
func waitReady(proc *cluster.Process) error {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		data, _ := os.ReadFile(proc.LogPath())
		missing := notStarted(data)
		if len(missing) == 0 {
			return nil
		}
		select {
		case <-proc.Done():
			_, err := proc.Exited()
			return fmt.Errorf("machine-api-controllers ended before ready: %w\n%s", err, cluster.Tail(data, 4096))
		case <-ctx.Done():
			return fmt.Errorf("machine-api-controllers not ready after 90s (not started: %v)\n%s", missing, cluster.Tail(data, 4096))
		case <-tick.C:
		}
	}
}

func notStarted(log []byte) []string {
	var missing []string
	if !bytes.Contains(log, []byte(readyLine)) {
		missing = append(missing, "manager")
	}
	started := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(log))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "Starting workers") {
			continue
		}
		for _, n := range controllerNames {
			if strings.Contains(line, `controller="`+n+`"`) {
				started[n] = true
			}
		}
	}
	for _, n := range controllerNames {
		if !started[n] {
			missing = append(missing, n)
		}
	}
	return missing
}

// Stop ends the controllers (SIGTERM, SIGKILL after 10 s) and waits.
// Stopping stopped controllers does nothing.
func (c *Controllers) Stop() {
	c.mu.Lock()
	proc := c.proc
	c.proc = nil
	c.mu.Unlock()
	if proc != nil {
		proc.Stop(10 * time.Second)
	}
}

// LogPath is the log of the current (or last) start.
func (c *Controllers) LogPath() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.logs[len(c.logs)-1]
}

// LogContains reports whether the current start's log holds text.
func (c *Controllers) LogContains(text string) bool {
	return cluster.LogContains(c.LogPath(), text)
}

func (c *Controllers) dumpLogs() {
	c.mu.Lock()
	logs := slices.Clone(c.logs)
	c.mu.Unlock()
	cluster.DumpLogs(c.t, logs)
}

// removeAll deletes what a test left in Namespace, the controllers stopped:
// MachineHealthChecks and MachineSets first (nothing recreates Machines
// then), Machines with their finalizers dropped, their Events, and the
// stub's Nodes.
func (c *Controllers) removeAll() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, gvr := range []schema.GroupVersionResource{MHCResource, MachineSetResource, MachineResource} {
		res := c.Dynamic.Resource(gvr).Namespace(Namespace)
		list, err := res.List(ctx, metav1.ListOptions{})
		if err != nil {
			c.t.Logf("cleanup: list %s: %v", gvr.Resource, err)
			continue
		}
		for _, o := range list.Items {
			if len(o.GetFinalizers()) > 0 {
				_, err := res.Patch(ctx, o.GetName(), types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
				if err != nil && !apierrors.IsNotFound(err) {
					c.t.Logf("cleanup: drop finalizers of %s %s: %v", gvr.Resource, o.GetName(), err)
				}
			}
			if err := res.Delete(ctx, o.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				c.t.Logf("cleanup: delete %s %s: %v", gvr.Resource, o.GetName(), err)
			}
		}
	}
	// Events too: a later test's Machine of the same name must not find
	// this one's.
	if err := c.Kube.CoreV1().Events(Namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		c.t.Logf("cleanup: delete events: %v", err)
	}
	err := c.Kube.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: LabelStubNode + "=" + Namespace})
	if err != nil {
		c.t.Logf("cleanup: delete the stub's nodes: %v", err)
	}
}
