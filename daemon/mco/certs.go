package mco

import (
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeward/nodeward/api/kube"
	"github.com/nodeward/nodeward/daemon/update"
)

// The ControllerConfig the daemon's certificate writer follows, its
// annotation asking for a service CA rotation, and the node annotations
// recording what was synced (pkg/daemon/constants and
// pkg/controller/common of the MCO).
const (
	ControllerConfigName              = "machine-config-controller"
	AnnotationServiceCARotate         = "machineconfiguration.openshift.io/service-ca-rotate"
	AnnotationLastSyncedControllerCfg = "machineconfiguration.openshift.io/lastSyncedControllerConfigResourceVersion"
	AnnotationLastObservedServerCA    = "machineconfiguration.openshift.io/lastObservedServerCAAnnotation"
	// KubeconfigDataConfigMap (in MCDNamespace) holds the rotated server
	// CA bundle under KubeconfigDataKey.
	KubeconfigDataConfigMap = "kubeconfig-data"
	KubeconfigDataKey       = "ca-bundle.crt"
	// KubeletUnit is restarted when the server CA rotates.
	KubeletUnit = "kubelet.service"
)

// ControllerConfigResource is the ControllerConfig's resource.
var ControllerConfigResource = schema.GroupVersionResource{Group: "machineconfiguration.openshift.io", Version: "v1", Resource: "controllerconfigs"}

// UnitRestarter restarts a systemd unit and waits for the job
// (systemd.Units).
type UnitRestarter interface {
	Restart(ctx context.Context, unit string) error
}

// CertificateWriter is the machine-config-daemon's certificate writer:
// it follows the ControllerConfig and, whenever its resourceVersion is
// not the one the node's lastSyncedControllerConfigResourceVersion
// records (or a service CA rotation is asked), writes its certificates to
// the host under Root, with no drain and no reboot: the kubelet's CA of
// the API server, the cloud provider's CA, the internal registry's pull
// secret and the registries' CAs under /etc/docker/certs.d. On a rotation
// of the service CA it also merges the new server CAs into
// /etc/kubernetes/kubeconfig and, when the daemon would, restarts the
// kubelet. Then it annotates the node.
type CertificateWriter struct {
	Dynamic dynamic.Interface
	Client  *kube.Client
	Node    string
	// NodeObject is the node as last seen (the agent's watch).
	NodeObject func(ctx context.Context) (*corev1.Node, error)
	// Observe is offered the node a write returned; may be nil.
	Observe func(*corev1.Node)
	// Root is the host's root filesystem; "/" when empty.
	Root string
	// Units restarts the kubelet; nil leaves it running (and says so).
	Units UnitRestarter
	Log   *slog.Logger
	// MinBackoff and MaxBackoff bound the wait before retrying a failed
	// sync: 1 s and 1 min when zero.
	MinBackoff, MaxBackoff time.Duration
	// Resync re-checks the ControllerConfig this often even when it does
	// not change (the daemon's informer resync); 10 min when zero.
	Resync time.Duration

	mu      sync.Mutex
	latest  *unstructured.Unstructured
	changed chan struct{}
	// restartCA is the server CA the kubelet must be restarted with: kept
	// until a restart succeeds, so that a failed one is retried.
	restartCA []byte
}

// Run follows the ControllerConfig until ctx ends. A failed sync is logged
// and retried with backoff, or at the ControllerConfig's next change; it
// never ends Run.
func (w *CertificateWriter) Run(ctx context.Context) error {
	w.changed = make(chan struct{}, 1)
	var informer sync.WaitGroup
	defer informer.Wait()
	informer.Go(func() { w.informer().RunWithContext(ctx) })
	delay := time.Duration(0)
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.changed:
		case <-retry:
		}
		retry = nil
		err := w.syncLatest(ctx)
		if err == nil || ctx.Err() != nil {
			delay = 0
			continue
		}
		delay = min(max(2*delay, orDefault(w.MinBackoff, time.Second)), orDefault(w.MaxBackoff, time.Minute))
		w.Log.Error("sync the certificates of the ControllerConfig", "controllerConfig", ControllerConfigName, "err", err, "retryIn", delay)
		retry = time.After(delay)
	}
}

// informer watches the one ControllerConfig, by a field selector on its
// name. A plain informer over the dynamic client: client-go's dynamic
// informer factory links the informers of every API group.
func (w *CertificateWriter) informer() cache.Controller {
	sel := fields.OneTermEqualSelector("metadata.name", ControllerConfigName).String()
	res := w.Dynamic.Resource(ControllerConfigResource)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = sel
			return res.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = sel
			return res.Watch(ctx, opts)
		},
	}
	_, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &unstructured.Unstructured{},
		ResyncPeriod:  orDefault(w.Resync, 10*time.Minute),
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    w.delivered,
			UpdateFunc: func(_, obj any) { w.delivered(obj) },
		},
	})
	return ctrl
}

func (w *CertificateWriter) delivered(obj any) {
	cc, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	w.mu.Lock()
	w.latest = cc
	w.mu.Unlock()
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

func (w *CertificateWriter) syncLatest(ctx context.Context) error {
	w.mu.Lock()
	cc := w.latest
	w.mu.Unlock()
	if cc == nil {
		return nil
	}
	return w.Sync(ctx, cc)
}

// Sync brings the host and the node's annotations to cc.
func (w *CertificateWriter) Sync(ctx context.Context, cc *unstructured.Unstructured) error {
	node, err := w.NodeObject(ctx)
	if err != nil {
		return err
	}
	rotate := cc.GetAnnotations()[AnnotationServiceCARotate]
	have := node.Annotations
	if have[AnnotationLastSyncedControllerCfg] != cc.GetResourceVersion() || rotate == "true" {
		if err := w.write(ctx, cc, rotate == "true" && have[AnnotationLastObservedServerCA] != rotate); err != nil {
			return fmt.Errorf("ControllerConfig %s (resourceVersion %s): %w", cc.GetName(), cc.GetResourceVersion(), err)
		}
	}
	if err := w.annotate(ctx, node, cc.GetResourceVersion(), rotate); err != nil {
		return err
	}
	return w.restartKubelet(ctx)
}

// write puts cc's certificates on the host; rotate also merges the
// rotated server CAs into the kubeconfig.
func (w *CertificateWriter) write(ctx context.Context, cc *unstructured.Unstructured, rotate bool) error {
	spec, err := parseCertSpec(cc)
	if err != nil {
		return err
	}
	files := map[string][]byte{KubeletCAPath: spec.kubeletCA, CloudCAPath: spec.cloudCA, RegistryAuthPath: spec.pullSecret}
	var merged caMerge
	if rotate {
		if merged, err = w.mergeServerCA(ctx); err != nil {
			return err
		}
		if merged.Kubeconfig != nil {
			files[KubeconfigPath] = merged.Kubeconfig
		}
	}
	for path, data := range files {
		if err := writeHostFile(w.root(), path, data); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	present, err := syncImageCAs(w.root(), spec.bundles)
	if err != nil {
		return err
	}
	if !present {
		w.Log.Warn("the host has no registry CA directory: the registries' CAs are not written", "dir", ImageCADir)
	}
	if merged.Restart {
		w.setRestart(merged.CA)
	}
	w.Log.Info("wrote the certificates of the ControllerConfig", "resourceVersion", cc.GetResourceVersion(),
		"registryCAs", len(spec.bundles), "kubeconfigCAsChanged", merged.Kubeconfig != nil, "kubeletRestart", merged.Restart)
	return nil
}

// mergeServerCA reads the rotated server CA bundle and merges it with the
// kubeconfig's. A ConfigMap that is missing or not filled yet is logged
// and skipped, as the daemon does; any other failure to read it is an
// error, retried.
func (w *CertificateWriter) mergeServerCA(ctx context.Context) (caMerge, error) {
	cm, err := w.Client.ConfigMaps(MCDNamespace).Get(ctx, KubeconfigDataConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		w.Log.Warn("no service CA bundle to rotate to yet", "configMap", MCDNamespace+"/"+KubeconfigDataConfigMap)
		return caMerge{}, nil
	}
	if err != nil {
		return caMerge{}, fmt.Errorf("read ConfigMap %s/%s: %w", MCDNamespace, KubeconfigDataConfigMap, err)
	}
	bundle := configMapData(cm, KubeconfigDataKey)
	if bundle == nil {
		w.Log.Warn("the service CA bundle is not filled yet", "configMap", MCDNamespace+"/"+KubeconfigDataConfigMap, "key", KubeconfigDataKey)
		return caMerge{}, nil
	}
	kc, err := os.ReadFile(filepath.Join(w.root(), KubeconfigPath))
	if err != nil {
		return caMerge{}, fmt.Errorf("read %s: %w", KubeconfigPath, err)
	}
	return mergeServerCA(kc, bundle)
}

// configMapData is key of cm: its binary data, else its data, base64
// decoded when it is base64, as the daemon reads it.
func configMapData(cm *corev1.ConfigMap, key string) []byte {
	if b, ok := cm.BinaryData[key]; ok {
		return b
	}
	s, ok := cm.Data[key]
	if !ok {
		return nil
	}
	if raw, err := base64.StdEncoding.DecodeString(s); err == nil {
		return raw
	}
	return []byte(s)
}

// annotate records on the node the resourceVersion synced and the
// rotation observed; nothing is written when the node has both.
func (w *CertificateWriter) annotate(ctx context.Context, node *corev1.Node, version, rotate string) error {
	set := map[string]*string{}
	if node.Annotations[AnnotationLastSyncedControllerCfg] != version {
		set[AnnotationLastSyncedControllerCfg] = &version
	}
	if node.Annotations[AnnotationLastObservedServerCA] != rotate {
		set[AnnotationLastObservedServerCA] = &rotate
	}
	if len(set) == 0 {
		return nil
	}
	written, err := update.PatchAnnotations(ctx, w.Client, w.Node, set)
	if err != nil {
		return err
	}
	if w.Observe != nil {
		w.Observe(written)
	}
	w.Log.Info("certificates synced from the ControllerConfig", "resourceVersion", version)
	return nil
}

func (w *CertificateWriter) setRestart(ca []byte) {
	w.mu.Lock()
	w.restartCA = ca
	w.mu.Unlock()
}

// restartKubelet, when a rotated server CA asks for it, gives the
// kubelet's own kubeconfig the new CA and restarts the kubelet. A failure
// is returned and the restart retried at the next sync.
func (w *CertificateWriter) restartKubelet(ctx context.Context) error {
	w.mu.Lock()
	ca := w.restartCA
	w.mu.Unlock()
	if ca == nil {
		return nil
	}
	if w.Units == nil {
		w.Log.Error("the server CA rotated and the kubelet must restart to trust it, but this agent cannot restart units: restart kubelet.service by hand")
		w.setRestart(nil)
		return nil
	}
	path := filepath.Join(w.root(), KubeletKubeconfigPath)
	kc, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", KubeletKubeconfigPath, err)
	}
	out, err := setKubeconfigCA(kc, ca, KubeletKubeconfigPath)
	if err != nil {
		return err
	}
	if err := writeHostFile(w.root(), KubeletKubeconfigPath, out); err != nil {
		return fmt.Errorf("write %s: %w", KubeletKubeconfigPath, err)
	}
	w.Log.Info("restarting the kubelet: the service CA rotated")
	if err := w.Units.Restart(ctx, KubeletUnit); err != nil {
		return fmt.Errorf("restart the kubelet after the service CA rotation: %w", err)
	}
	w.setRestart(nil)
	return nil
}

func (w *CertificateWriter) root() string {
	if w.Root == "" {
		return "/"
	}
	return w.Root
}
