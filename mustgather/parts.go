package mustgather

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// part is one row of what must-gather collects: its name in the index
// and on stderr, what it is, the API it needs served (else it is skipped,
// not failed) and how it is collected.
type part struct {
	name        string
	description string
	// requires, when set, must be served (discovery) for the part to
	// apply: the MCO's and the Machine APIs' CRDs are optional.
	requires *schema.GroupVersionResource
	// skipUnless, when set, says why the part does not apply to these
	// options ("" when it does): the host parts need a host.
	skipUnless func(o Options) string
	collect    func(ctx context.Context, g *Gatherer, w *partWriter) error
}

// The resources must-gather reads; the ClusterRole in
// manifests/base/rbac-must-gather.yaml grants exactly these.
var (
	updatePools         = schema.GroupVersionResource{Group: "nodeward.io", Version: "v1alpha1", Resource: "updatepools"}
	nodes               = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	events              = schema.GroupVersionResource{Version: "v1", Resource: "events"}
	pods                = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	configMaps          = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	leases              = schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}
	machineConfigNodes  = schema.GroupVersionResource{Group: "machineconfiguration.openshift.io", Version: "v1", Resource: "machineconfignodes"}
	machineConfigPools  = schema.GroupVersionResource{Group: "machineconfiguration.openshift.io", Version: "v1", Resource: "machineconfigpools"}
	openshiftMachines   = schema.GroupVersionResource{Group: "machine.openshift.io", Version: "v1beta1", Resource: "machines"}
	clusterAPIMachines  = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta1", Resource: "machines"}
	nodewardPodSelector = "app.kubernetes.io/part-of=nodeward"
)

// parts, in the order they run (and show on stderr).
var parts = []part{
	{name: "updatepools", description: "the UpdatePools, whole (spec and status)", requires: &updatePools, collect: collectUpdatePools},
	{name: "nodes", description: "every Node's nodeward and MCO annotations, labels, taints, conditions and node info", collect: collectNodes},
	{name: "events", description: "Events in nodeward's namespace and Events about Nodes and UpdatePools", collect: collectEvents},
	{name: "logs", description: "the coordinator's and agents' container logs (" + nodewardPodSelector + " in nodeward's namespace)", collect: collectLogs},
	{name: "leases", description: "the Leases of nodeward's namespace: the agents' liveness Leases and the coordinator's leader Lease", collect: collectLeases},
	{name: "configmaps", description: "the ConfigMaps of nodeward's namespace: the disruption guard and the agents' configuration", collect: collectConfigMaps},
	{name: "machineconfignodes", description: "the MCO's MachineConfigNodes (MCO mode)", requires: &machineConfigNodes, collect: listInto(machineConfigNodes, "mco/machineconfignodes.json")},
	{name: "machineconfigpools", description: "the MCO's MachineConfigPools (MCO mode)", requires: &machineConfigPools, collect: listInto(machineConfigPools, "mco/machineconfigpools.json")},
	{name: "machines-openshift", description: "OpenShift Machines: annotations, lifecycle hooks, phase and node", requires: &openshiftMachines, collect: machinesInto(openshiftMachines, "machines/openshift.json")},
	{name: "machines-cluster-api", description: "Cluster API Machines: annotations (pre-drain hooks), phase and node", requires: &clusterAPIMachines, collect: machinesInto(clusterAPIMachines, "machines/cluster-api.json")},
	{name: "host", description: "the agent's state files and host configuration under --host-root", skipUnless: needsHostRoot, collect: collectHost},
	{name: "host-check", description: "`nodeward check --json` on the machine must-gather runs on: every probe sampled once, the taints that would follow", skipUnless: needsHostCheck, collect: collectHostCheck},
}

func needsHostRoot(o Options) string {
	if o.HostRoot == "" {
		return "no --host-root: not run on a node"
	}
	return ""
}

func needsHostCheck(o Options) string {
	if o.HostCheck == nil {
		return "no --host-check"
	}
	return ""
}

func collectHostCheck(ctx context.Context, g *Gatherer, w *partWriter) error {
	report, err := g.opts.HostCheck(ctx)
	if report != nil {
		if err := w.file("host/check.json", "the probes' report, as nodeward check --json prints it", report); err != nil {
			return err
		}
	}
	return err
}

// applies says why p does not apply ("" when it does): an API that is
// not served, or no host root.
func (g *Gatherer) applies(ctx context.Context, p part) (skip string, err error) {
	if p.skipUnless != nil {
		if skip := p.skipUnless(g.opts); skip != "" {
			return skip, nil
		}
	}
	if p.requires == nil {
		return "", nil
	}
	served, err := g.served(ctx, *p.requires)
	if err != nil {
		return "", err
	}
	if !served {
		return fmt.Sprintf("%s not served (its CRD is not installed)", groupResource(*p.requires)), nil
	}
	return "", nil
}

func groupResource(gvr schema.GroupVersionResource) string {
	return gvr.GroupResource().String() + "/" + gvr.Version
}

// served asks discovery whether gvr is served: the group version's
// resource list, a 404 meaning the group version is not.
func (g *Gatherer) served(ctx context.Context, gvr schema.GroupVersionResource) (bool, error) {
	path := "/apis/" + gvr.Group + "/" + gvr.Version
	if gvr.Group == "" {
		path = "/api/" + gvr.Version
	}
	raw, err := g.core.Get().AbsPath(path).Do(ctx).Raw()
	if apierrors.IsNotFound(err) || statusCode(err) == http.StatusNotFound {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discover %s: %w", gvr.GroupVersion(), err)
	}
	var list metav1.APIResourceList
	if err := json.Unmarshal(raw, &list); err != nil {
		return false, fmt.Errorf("decode the discovery of %s: %w", gvr.GroupVersion(), err)
	}
	for _, r := range list.APIResources {
		if r.Name == gvr.Resource {
			return true, nil
		}
	}
	return false, nil
}

func statusCode(err error) int32 {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return status.Status().Code
	}
	return 0
}

// list lists gvr in namespace ("" for all), redacted.
func (g *Gatherer) list(ctx context.Context, gvr schema.GroupVersionResource, namespace string, opts metav1.ListOptions) ([]map[string]any, error) {
	l, err := g.dyn.Resource(gvr).Namespace(namespace).List(ctx, opts)
	if err != nil {
		where := ""
		if namespace != "" {
			where = " in " + namespace
		}
		return nil, fmt.Errorf("list %s%s: %w", gvr.GroupResource(), where, err)
	}
	items := make([]map[string]any, 0, len(l.Items))
	for _, item := range l.Items {
		RedactObject(item.Object)
		items = append(items, item.Object)
	}
	return items, nil
}

func collectUpdatePools(ctx context.Context, g *Gatherer, w *partWriter) error {
	return listInto(updatePools, "updatepools.json")(ctx, g, w)
}

// listInto writes every object of gvr, whole but redacted, into one file.
func listInto(gvr schema.GroupVersionResource, file string) func(context.Context, *Gatherer, *partWriter) error {
	return func(ctx context.Context, g *Gatherer, w *partWriter) error {
		items, err := g.list(ctx, gvr, "", metav1.ListOptions{})
		if err != nil {
			return err
		}
		return w.json(file, fmt.Sprintf("%d %s", len(items), gvr.GroupResource()), items)
	}
}

func collectLeases(ctx context.Context, g *Gatherer, w *partWriter) error {
	items, err := g.list(ctx, leases, g.opts.Namespace, metav1.ListOptions{})
	if err != nil {
		return err
	}
	return w.json("leases.json", fmt.Sprintf("%d Leases of %s", len(items), g.opts.Namespace), items)
}

func collectConfigMaps(ctx context.Context, g *Gatherer, w *partWriter) error {
	items, err := g.list(ctx, configMaps, g.opts.Namespace, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, cm := range items {
		name, _, _ := unstructured.NestedString(cm, "metadata", "name")
		if err := w.json("configmaps/"+safeName(name)+".json", "ConfigMap "+g.opts.Namespace+"/"+name+", data redacted", cm); err != nil {
			return err
		}
	}
	return nil
}

// eventLists are the Events collected: one file each.
var eventLists = []struct {
	file, description, fieldSelector string
	// inNamespace: in nodeward's namespace, else in every namespace.
	inNamespace bool
}{
	{"events/namespace.json", "Events in nodeward's namespace", "", true},
	{"events/nodes.json", "Events about Nodes", "involvedObject.kind=Node", false},
	{"events/updatepools.json", "Events about UpdatePools", "involvedObject.kind=UpdatePool", false},
}

func collectEvents(ctx context.Context, g *Gatherer, w *partWriter) error {
	var errs []error
	for _, l := range eventLists {
		namespace := ""
		if l.inNamespace {
			namespace = g.opts.Namespace
		}
		items, err := g.list(ctx, events, namespace, metav1.ListOptions{FieldSelector: l.fieldSelector})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := w.json(l.file, fmt.Sprintf("%s: %d", l.description, len(items)), items); err != nil {
			return err
		}
	}
	return errors.Join(errs...)
}

// safeName keeps a file name inside its directory.
func safeName(name string) string {
	name = strings.NewReplacer("/", "_", "..", "_").Replace(name)
	if name == "" {
		return "_"
	}
	return name
}
