package health

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/nodeward/nodeward/api/kube"
	"github.com/nodeward/nodeward/oomkill"
)

// OOMConfig turns on the OOM-kill Events: the kernel's OOM kills in the
// kubepods memory cgroups (package oomkill), each a Warning Event on the
// Node naming the pod and container.
type OOMConfig struct {
	Enabled bool
	// CgroupRoot is the kubepods cgroup to watch; empty: the first of
	// oomkill.DefaultRootsUnder(CgroupFS) that exists.
	CgroupRoot string
	// CgroupFS is where the host's cgroup filesystem is mounted; empty:
	// /sys/fs/cgroup (the host service). The DaemonSet mounts the host's at
	// /host/sys/fs/cgroup.
	CgroupFS string
}

// oomEvents reports each OOM kill of a pod on the node as a Warning Event
// on the Node (the agent records Events about its own Node only), with the
// pod's namespace and name read from the API, and counts them.
type oomEvents struct {
	watcher *oomkill.Watcher
	client  *kube.Client
	node    string
	record  func(reason, message string)
	kills   prometheus.Counter
	log     *slog.Logger
}

func newOOMEvents(cfg OOMConfig, client *kube.Client, node string, record func(reason, message string),
	reg prometheus.Registerer, log *slog.Logger) (*oomEvents, error) {
	root := cfg.CgroupRoot
	defaults := oomkill.DefaultRoots()
	if cfg.CgroupFS != "" {
		defaults = oomkill.DefaultRootsUnder(cfg.CgroupFS)
	}
	if root == "" {
		for _, r := range defaults {
			if _, err := os.Stat(r); err == nil {
				root = r
				break
			}
		}
		if root == "" {
			return nil, fmt.Errorf("oom kills: none of the kubepods cgroups %v exists", defaults)
		}
	}
	w, err := oomkill.New(oomkill.Options{Root: root, Log: log})
	if err != nil {
		return nil, fmt.Errorf("oom kills: %w", err)
	}
	kills := prometheus.NewCounter(prometheus.CounterOpts{Name: "nodeward_oom_kills_total",
		Help: "Processes the kernel's OOM killer killed in the node's pods (their memory cgroups' oom_kill counters)."})
	watched := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "nodeward_oom_watched_cgroups",
		Help: "Memory cgroups whose OOM kills are watched (the kubepods cgroup and those under it)."},
		func() float64 { return float64(w.Watched()) })
	for _, c := range []prometheus.Collector{kills, watched} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("oom kills: register the metrics: %w", err)
		}
	}
	return &oomEvents{watcher: w, client: client, node: node, record: record, kills: kills, log: log}, nil
}

// run reports kills until ctx ends.
func (o *oomEvents) run(ctx context.Context) {
	kills := make(chan oomkill.Kill, 64)
	done := make(chan error, 1)
	go func() { done <- o.watcher.Run(ctx, kills) }()
	for {
		select {
		case k := <-kills:
			o.report(ctx, k)
		case err := <-done:
			if err != nil {
				o.log.Error("oom kills: the watcher stopped", "err", err)
			}
			return
		}
	}
}

func (o *oomEvents) report(ctx context.Context, k oomkill.Kill) {
	o.kills.Add(float64(k.Count))
	who := "cgroup " + k.Cgroup
	if k.PodUID != "" {
		who = "pod " + o.podName(ctx, k.PodUID)
		if k.ContainerID != "" {
			who += ", container " + k.ContainerID
		}
	}
	o.record("OOMKilling", fmt.Sprintf("the kernel's OOM killer killed %d process(es) of %s (%d in all)", k.Count, who, k.Total))
}

// podName is "<namespace>/<name> (uid <uid>)" of the node's pod with uid,
// or the uid alone when the API does not say.
func (o *oomEvents) podName(ctx context.Context, uid string) string {
	pods, err := o.client.Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", o.node).String()})
	if err != nil {
		o.log.Warn("oom kills: list the node's pods", "err", err)
		return "uid " + uid
	}
	for _, p := range pods.Items {
		if string(p.UID) == uid {
			return fmt.Sprintf("%s/%s (uid %s)", p.Namespace, p.Name, uid)
		}
	}
	return "uid " + uid
}
