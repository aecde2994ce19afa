// Command machine-api-controllers runs the real OpenShift Machine API
// controllers of github.com/openshift/machine-api-operator (the machine
// controller with the drain controller it starts, the nodelink, MachineSet
// and MachineHealthCheck controllers) in one process against a test control
// plane, with a stub actuator (stub.go) standing in for the cloud: it
// "creates an instance" by creating a kwok-managed Node named after the
// Machine. nodeward's test/machineapi package starts it per test.
//
// No leader election, no webhooks; the metrics and health listeners are off
// unless given addresses, so parallel test binaries never collide on the
// upstream mains' fixed ports.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	apifeatures "github.com/openshift/api/features"
	machinev1 "github.com/openshift/api/machine/v1beta1"
	"github.com/openshift/library-go/pkg/features"
	"github.com/openshift/machine-api-operator/pkg/controller/machine"
	"github.com/openshift/machine-api-operator/pkg/controller/machinehealthcheck"
	"github.com/openshift/machine-api-operator/pkg/controller/machineset"
	"github.com/openshift/machine-api-operator/pkg/controller/nodelink"
	"k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/featuregate"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// ReadyLine is logged once the manager runs; the harness waits for it and
// for each controller's "Starting workers" line.
const ReadyLine = "machine-api-controllers: manager started"

func main() {
	ctrl.SetLogger(klog.NewKlogr())
	klog.InitFlags(nil)
	if err := flag.Set("logtostderr", "true"); err != nil {
		klog.Fatalf("set logtostderr: %v", err)
	}

	// controller-runtime's client/config package registers --kubeconfig on
	// the default flag set when something links it in: reuse it then.
	if flag.Lookup("kubeconfig") == nil {
		flag.String("kubeconfig", "", "kubeconfig of the cluster (required)")
	}
	namespace := flag.String("namespace", "openshift-machine-api", "the namespace of the Machines, MachineSets and MachineHealthChecks")
	metricsAddr := flag.String("metrics-bind-address", "0", `metrics listener ("0": off)`)
	healthAddr := flag.String("health-addr", "", `health and readiness listener (empty: off)`)
	syncPeriod := flag.Duration("sync-period", 10*time.Minute, "the informers' resync period (upstream: 10m)")
	createNodes := flag.Bool("create-nodes", true, "the stub actuator creates a kwok Node for each Machine it provisions (false: it only sets the providerID, as when a real kubelet registers the Node)")

	// Feature gates as the upstream provider mains set them up (SelfManaged
	// feature set); MachineAPIMigration stays off unless --feature-gates
	// turns it on.
	gate := feature.DefaultMutableFeatureGate
	gateOpts, err := features.NewFeatureGateOptions(gate, apifeatures.SelfManaged, apifeatures.FeatureGateMachineAPIMigration)
	if err != nil {
		klog.Fatalf("set up feature gates: %v", err)
	}
	gateOpts.AddFlagsToGoFlagSet(nil)
	flag.Parse()

	kubeconfig := flag.Lookup("kubeconfig").Value.String()
	if kubeconfig == "" {
		klog.Fatal("--kubeconfig is required")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		klog.Fatalf("load %s: %v", kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = 100, 200

	warnings, err := gateOpts.ApplyTo(gate)
	if err != nil {
		klog.Fatalf("apply feature gates: %v", err)
	}
	if len(warnings) > 0 {
		klog.Infof("feature gate warnings: %v", warnings)
	}
	klog.Infof("FeatureGateMachineAPIMigration: %t", gate.Enabled(featuregate.Feature(apifeatures.FeatureGateMachineAPIMigration)))

	opts := manager.Options{
		Metrics:                server.Options{BindAddress: *metricsAddr},
		HealthProbeBindAddress: *healthAddr,
		Cache: cache.Options{
			SyncPeriod:        syncPeriod,
			DefaultNamespaces: map[string]cache.Config{*namespace: {}},
		},
		LeaderElection: false,
	}
	mgr, err := manager.New(cfg, opts)
	if err != nil {
		klog.Fatalf("create manager: %v", err)
	}
	if err := machinev1.Install(mgr.GetScheme()); err != nil {
		klog.Fatalf("install machine.openshift.io/v1beta1: %v", err)
	}

	actuator := &stubActuator{client: mgr.GetClient(), reader: mgr.GetAPIReader(), createNodes: *createNodes}
	if err := machine.AddWithActuator(mgr, actuator, gate); err != nil {
		klog.Fatalf("machine controller: %v", err)
	}
	if err := nodelink.Add(mgr, opts); err != nil {
		klog.Fatalf("nodelink controller: %v", err)
	}
	if err := machineset.Add(mgr, opts, gate); err != nil {
		klog.Fatalf("machineset controller: %v", err)
	}
	if err := machinehealthcheck.Add(mgr, opts); err != nil {
		klog.Fatalf("machinehealthcheck controller: %v", err)
	}
	if *healthAddr != "" {
		if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
			klog.Fatal(err)
		}
		if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
			klog.Fatal(err)
		}
	}
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		klog.Info(ReadyLine)
		<-ctx.Done()
		return nil
	})); err != nil {
		klog.Fatal(err)
	}
	klog.Infof("machine-api-controllers: namespace %s, controllers: machine-controller, machine-drain-controller, nodelink-controller, machineset_controller, machinehealthcheck-controller; args %s",
		*namespace, strings.Join(os.Args[1:], " "))
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
		os.Exit(1)
	}
}
