// Package cluster starts a real, local Kubernetes control plane for tests:
// etcd, kube-apiserver (RBAC on), kube-controller-manager, kube-scheduler and
// kwok as the kubelet of fake nodes. One control plane serves a whole test
// package (see Env); tests isolate themselves with their own namespace and
// nodes.
package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/nodeward/nodeward/api/kube"
)

// Options tune a control plane.
type Options struct {
	// BinDir holds etcd, kube-apiserver, kube-controller-manager,
	// kube-scheduler, kubectl, kwok and kwok's stages/ (see test/tools).
	BinDir string
	// WorkDir receives data, certificates and logs; a temporary directory
	// when empty.
	WorkDir string
	// Log receives progress lines; nil discards them.
	Log func(format string, args ...any)
	// Controllers is kube-controller-manager's --controllers; default all
	// but serviceaccount-token. Benchmarks with thousands of node objects
	// and no kubelet disable node-lifecycle-controller so that nodes stay
	// Ready.
	Controllers string
	// KwokStages are extra kwok Stage documents (YAML) beside the stock
	// ones, for example PodReadyAgainStage.
	KwokStages []string
	// RealNodes prepares the API server for real kubelets (test/node): a
	// static bearer token per named node (user system:node:NAME in group
	// system:nodes, see NodeToken), the Node authorizer before RBAC and the
	// NodeRestriction admission plugin. Empty: RBAC alone, as before.
	RealNodes []string
}

// ControlPlane is a running control plane. Its methods are safe for
// concurrent use by parallel tests.
type ControlPlane struct {
	opts      Options
	dir       string
	ca        *authority
	host      string
	admin     *rest.Config
	client    kubernetes.Interface
	kube      *kube.Client
	adminKube string
	procs     []*Process        // start order: etcd, apiserver, kcm, scheduler, kwok
	nodeToken map[string]string // RealNodes' bearer tokens by node name
	etcdURL   string            // etcd's client URL

	procMu   sync.Mutex // guards procs against Kill and Restart (restart.go)
	stopOnce sync.Once
}

// Start brings up etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and kwok and returns once all of them are ready. On error
// everything started so far is stopped again.
func Start(ctx context.Context, opts Options) (_ *ControlPlane, err error) {
	if opts.Log == nil {
		opts.Log = func(string, ...any) {}
	}
	if opts.Controllers == "" {
		opts.Controllers = "*,-serviceaccount-token-controller"
	}
	for _, bin := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"} {
		if _, err := os.Stat(filepath.Join(opts.BinDir, bin)); err != nil {
			return nil, fmt.Errorf("control-plane binary %s: %w (run `make testbin`)", bin, err)
		}
	}
	dir := opts.WorkDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "nodeward-cp-"); err != nil {
			return nil, fmt.Errorf("create work dir: %w", err)
		}
	}
	cp := &ControlPlane{opts: opts, dir: dir}
	defer func() {
		if err != nil {
			cp.stopProcesses()
			err = fmt.Errorf("%w (logs in %s)", err, dir)
		}
	}()
	start := time.Now()
	if err := cp.writeCredentials(); err != nil {
		return nil, err
	}
	ports, err := FreePorts(6)
	if err != nil {
		return nil, err
	}
	etcdClient, etcdPeer, apiPort, kcmPort, schedPort, kwokPort := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5]

	if err := cp.startEtcd(ctx, etcdClient, etcdPeer); err != nil {
		return nil, err
	}
	if err := cp.startAPIServer(ctx, etcdClient, apiPort); err != nil {
		return nil, err
	}
	if err := cp.startControllers(ctx, kcmPort, schedPort, kwokPort); err != nil {
		return nil, err
	}
	opts.Log("control plane ready in %s at %s (work dir %s)", time.Since(start).Round(time.Millisecond), cp.host, dir)
	return cp, nil
}

func (cp *ControlPlane) path(name string) string { return filepath.Join(cp.dir, name) }

func (cp *ControlPlane) bin(name string) string { return filepath.Join(cp.opts.BinDir, name) }

func (cp *ControlPlane) writeCredentials() error {
	ca, err := newAuthority()
	if err != nil {
		return err
	}
	cp.ca = ca
	servingCert, servingKey, err := ca.issue("kube-apiserver", nil, []string{"127.0.0.1", "localhost"})
	if err != nil {
		return err
	}
	if err := writeFiles(cp.dir, map[string][]byte{
		"ca.crt": ca.certPEM, "apiserver.crt": servingCert, "apiserver.key": servingKey,
	}); err != nil {
		return err
	}
	if err := cp.writeNodeTokens(); err != nil {
		return err
	}
	return writeServiceAccountKey(cp.path("sa.key"))
}

func (cp *ControlPlane) startEtcd(ctx context.Context, clientPort, peerPort int) error {
	clientURL := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	cp.etcdURL = clientURL
	p, err := startProcess("etcd", cp.bin("etcd"), cp.dir,
		"--name=default",
		"--data-dir="+cp.path("etcd-data"),
		"--listen-client-urls="+clientURL, "--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL,
		"--unsafe-no-fsync", // test data: durability buys nothing, fsync costs seconds
		"--log-level=warn",
	)
	if err != nil {
		return err
	}
	cp.procs = append(cp.procs, p)
	return cp.waitEtcd(ctx, p)
}

func (cp *ControlPlane) waitEtcd(ctx context.Context, p *Process) error {
	httpClient := &http.Client{Timeout: 2 * time.Second}
	return Poll(ctx, "etcd health", 100*time.Millisecond, []*Process{p}, func(ctx context.Context) (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, cp.etcdURL+"/health", nil)
		resp, err := httpClient.Do(req)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

func (cp *ControlPlane) startAPIServer(ctx context.Context, etcdPort, port int) error {
	args := append([]string{
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", etcdPort),
		fmt.Sprintf("--secure-port=%d", port),
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--cert-dir=" + cp.path("apiserver-certs"),
		"--tls-cert-file=" + cp.path("apiserver.crt"), "--tls-private-key-file=" + cp.path("apiserver.key"),
		"--client-ca-file=" + cp.path("ca.crt"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + cp.path("sa.key"),
		"--service-account-signing-key-file=" + cp.path("sa.key"),
		"--authorization-mode=" + cp.authorizationMode(),
		"--service-cluster-ip-range=10.96.0.0/16",
		"--allow-privileged=true",
		"--profiling=false",
		// Benchmarks create thousands of objects quickly; the defaults
		// (400/200) would queue them behind the test's own watches.
		"--max-requests-inflight=1000", "--max-mutating-requests-inflight=500",
		"--v=0",
	}, cp.realNodeArgs()...)
	p, err := startProcess("kube-apiserver", cp.bin("kube-apiserver"), cp.dir, args...)
	if err != nil {
		return err
	}
	cp.procs = append(cp.procs, p)
	cp.host = fmt.Sprintf("https://127.0.0.1:%d", port)
	if cp.admin, err = cp.UserConfig("nodeward-test-admin", "system:masters"); err != nil {
		return err
	}
	if cp.client, err = kubernetes.NewForConfig(cp.admin); err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	if cp.kube, err = kube.NewForConfig(cp.admin); err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	cp.adminKube = cp.path("admin.kubeconfig")
	if err := cp.WriteKubeconfig(cp.admin, cp.adminKube); err != nil {
		return err
	}
	return cp.waitAPIServer(ctx, p)
}

func (cp *ControlPlane) waitAPIServer(ctx context.Context, p *Process) error {
	return Poll(ctx, "kube-apiserver /readyz", 200*time.Millisecond, []*Process{p}, func(ctx context.Context) (bool, error) {
		body, err := cp.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return false, fmt.Errorf("%w: %s", err, firstLines(string(body), 3))
		}
		return true, nil
	})
}

// startControllers starts the controller manager, the scheduler and kwok,
// and waits until they are healthy and the controller manager acts.
func (cp *ControlPlane) startControllers(ctx context.Context, kcmPort, schedPort, kwokPort int) error {
	if err := cp.startControllerManager(kcmPort); err != nil {
		return err
	}
	if err := cp.startScheduler(schedPort); err != nil {
		return err
	}
	if err := cp.startKwok(kwokPort); err != nil {
		return err
	}
	return cp.waitControllers(ctx, kcmPort, schedPort, kwokPort)
}

func (cp *ControlPlane) startControllerManager(port int) error {
	kcm, err := startProcess("kube-controller-manager", cp.bin("kube-controller-manager"), cp.dir,
		"--kubeconfig="+cp.adminKube,
		"--authentication-kubeconfig="+cp.adminKube, "--authorization-kubeconfig="+cp.adminKube,
		// serviceaccount-token needs a private key and mints legacy token
		// Secrets nobody here uses; everything else runs.
		"--controllers="+cp.opts.Controllers,
		"--use-service-account-credentials=false",
		"--leader-elect=false",
		fmt.Sprintf("--secure-port=%d", port), "--bind-address=127.0.0.1",
		"--root-ca-file="+cp.path("ca.crt"),
		"--kube-api-qps=200", "--kube-api-burst=400",
		"--concurrent-replicaset-syncs=10", "--concurrent-deployment-syncs=10",
		"--v=0",
	)
	if err != nil {
		return err
	}
	cp.procs = append(cp.procs, kcm)
	return nil
}

func (cp *ControlPlane) startScheduler(port int) error {
	sched, err := startProcess("kube-scheduler", cp.bin("kube-scheduler"), cp.dir,
		"--kubeconfig="+cp.adminKube,
		"--authentication-kubeconfig="+cp.adminKube, "--authorization-kubeconfig="+cp.adminKube,
		"--leader-elect=false",
		fmt.Sprintf("--secure-port=%d", port), "--bind-address=127.0.0.1",
		"--kube-api-qps=200", "--kube-api-burst=400",
		"--v=0",
	)
	if err != nil {
		return err
	}
	cp.procs = append(cp.procs, sched)
	return nil
}

// startKwok starts kwok on the nodes annotated KwokAnnotation=fake, with
// the stages test/tools/install.sh copied.
func (cp *ControlPlane) startKwok(port int) error {
	stages, err := cp.writeKwokStages()
	if err != nil {
		return err
	}
	kwok, err := startProcess("kwok", cp.bin("kwok"), cp.dir,
		"--kubeconfig="+cp.adminKube,
		"--config="+stages,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector="+KwokAnnotation+"=fake",
		fmt.Sprintf("--server-address=127.0.0.1:%d", port),
		"--cidr=10.240.0.0/12",
		// The heartbeat stage renews node status only every ~10 min and
		// leaves liveness to the node Lease; without Leases the node
		// lifecycle controller marks every node NotReady after its
		// 50 s grace period and every pod on them not Ready.
		"--node-lease-duration-seconds=40",
	)
	if err != nil {
		return err
	}
	cp.procs = append(cp.procs, kwok)
	return nil
}

// waitControllers polls the health endpoints of the controller manager,
// the scheduler and kwok, then waits for the default ServiceAccount.
func (cp *ControlPlane) waitControllers(ctx context.Context, kcmPort, schedPort, kwokPort int) error {
	insecure := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // components serve self-signed certs
	}}
	for _, c := range []struct {
		name string
		url  string
	}{
		{"kube-controller-manager", fmt.Sprintf("https://127.0.0.1:%d/healthz", kcmPort)},
		{"kube-scheduler", fmt.Sprintf("https://127.0.0.1:%d/healthz", schedPort)},
		{"kwok", fmt.Sprintf("http://127.0.0.1:%d/healthz", kwokPort)},
	} {
		if err := Poll(ctx, c.name+" health", 100*time.Millisecond, cp.procs, func(ctx context.Context) (bool, error) {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
			resp, err := insecure.Do(req)
			if err != nil {
				return false, err
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, nil
		}); err != nil {
			return err
		}
	}
	// The service-account controller creating "default" proves the
	// controller manager's informers are synced and it is acting.
	return Poll(ctx, "the default ServiceAccount", 100*time.Millisecond, cp.procs, func(ctx context.Context) (bool, error) {
		_, err := cp.client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, err
	})
}

// writeKwokStages joins the Stage files copied by test/tools/install.sh into
// one kwok config: node initialize, heartbeat with lease, and the whole
// general pod chain (create, init containers, ready, complete, delete), which
// kwok needs together for pods to reach Running and for deletions to honour
// the grace period.
func (cp *ControlPlane) writeKwokStages() (string, error) {
	files, err := filepath.Glob(filepath.Join(cp.opts.BinDir, "stages", "*.yaml"))
	if err != nil || len(files) == 0 {
		return "", fmt.Errorf("kwok stages in %s: none found (run `make testbin`)", filepath.Join(cp.opts.BinDir, "stages"))
	}
	var joined strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("read kwok stage: %w", err)
		}
		joined.WriteString("---\n")
		joined.Write(data)
		joined.WriteString("\n")
	}
	for _, stage := range cp.opts.KwokStages {
		joined.WriteString("---\n")
		joined.WriteString(stage)
		joined.WriteString("\n")
	}
	path := cp.path("kwok-stages.yaml")
	return path, os.WriteFile(path, []byte(joined.String()), 0o600)
}

// Stop stops every component in reverse start order (the API server before
// etcd: it hangs for a long time without etcd) and waits for each.
func (cp *ControlPlane) Stop() {
	cp.stopOnce.Do(cp.stopProcesses)
}

func (cp *ControlPlane) stopProcesses() {
	cp.procMu.Lock()
	defer cp.procMu.Unlock()
	var wg sync.WaitGroup
	// kwok, the scheduler and the controller manager are independent.
	for i := len(cp.procs) - 1; i >= 2; i-- {
		wg.Add(1)
		go func(p *Process) { defer wg.Done(); p.Stop(10 * time.Second) }(cp.procs[i])
	}
	wg.Wait()
	for i := min(len(cp.procs), 2) - 1; i >= 0; i-- {
		cp.procs[i].Stop(15 * time.Second)
	}
}

// Dir is the work directory holding data, certificates and logs.
func (cp *ControlPlane) Dir() string { return cp.dir }

// Config returns a fresh copy of the admin (system:masters) client config.
func (cp *ControlPlane) Config() *rest.Config { return rest.CopyConfig(cp.admin) }

// Client is a clientset with the admin identity.
func (cp *ControlPlane) Client() kubernetes.Interface { return cp.client }

// Kube is nodeward's own client (package kube) with the admin identity, for
// the packages under test that take one.
func (cp *ControlPlane) Kube() *kube.Client { return cp.kube }

// KubeconfigPath is a kubeconfig file for the admin identity.
func (cp *ControlPlane) KubeconfigPath() string { return cp.adminKube }

// Binary is the path of a control-plane binary such as "kubectl".
func (cp *ControlPlane) Binary(name string) string { return cp.bin(name) }

// UserConfig mints a client certificate for user with groups and returns a
// client config that authenticates as that identity, for RBAC tests.
func (cp *ControlPlane) UserConfig(user string, groups ...string) (*rest.Config, error) {
	certPEM, keyPEM, err := cp.ca.issue(user, groups, nil)
	if err != nil {
		return nil, err
	}
	return &rest.Config{
		Host: cp.host,
		TLSClientConfig: rest.TLSClientConfig{
			CAData: cp.ca.certPEM, CertData: certPEM, KeyData: keyPEM,
		},
		QPS: 200, Burst: 400,
	}, nil
}

// WriteKubeconfig writes cfg (host, CA and a client certificate or bearer
// token) as a kubeconfig file, for commands run as separate processes.
func (cp *ControlPlane) WriteKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken,
	}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	kc.CurrentContext = "test"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, " | ")
}
