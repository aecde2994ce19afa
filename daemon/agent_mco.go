package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/nodeward/nodeward/daemon/mco"
	"github.com/nodeward/nodeward/daemon/update"
	"github.com/nodeward/nodeward/machineconfig"
)

// MCOConfig configures the MCO protocol (--protocol=mco).
type MCOConfig struct {
	// Drain is "controller" (the default: the MCO's drain controller
	// drains, through the desiredDrain handshake, as for the MCD) or
	// "nodeward" (nodeward's own ordered, PDB-aware drain).
	Drain string
	// Root is the host's root filesystem, under which the rendered
	// config's files, units and SSH keys are written; "/" when empty.
	Root string
	// DrainDegradeAfter is how long a blocked drain waits before the node
	// reports Degraded; the MCD's 1 h when zero.
	DrainDegradeAfter time.Duration
	// DegradeAfter is how long a step may keep failing before the node
	// reports Degraded; 30 s when zero.
	DegradeAfter time.Duration
	// PolicyWait is how long an update waits for the node disruption
	// policies to catch up with their spec; the daemon's 2 min when zero.
	PolicyWait time.Duration
	// Units runs the node disruption policies' unit actions (reload,
	// restart, daemon-reload) on the host's systemd, and restarts the
	// kubelet when the service CA rotates, as the MCD does.
	Units mco.UnitActions
}

// mcoParts replaces the protocol, the OS edge and, with the drain
// handshake, the workloads of the update half for the MCO protocol.
func (a *Agent) mcoParts(rc *rest.Config, uc UpdateConfig, own update.Workloads) (update.Protocol, update.OSUpdater, update.Workloads, error) {
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("create dynamic client: %w", err)
	}
	ownDrain := false
	switch uc.MCO.Drain {
	case "", "controller":
	case "nodeward":
		ownDrain = true
	default:
		return nil, nil, nil, fmt.Errorf("MCO drain %q: want controller or nodeward", uc.MCO.Drain)
	}
	root := uc.MCO.Root
	if root == "" {
		root = "/"
	}
	name := a.cfg.NodeName
	protocol := &mco.Protocol{Client: a.client, Node: name, Now: a.cfg.Now, DrainDegradeAfter: uc.MCO.DrainDegradeAfter,
		DegradeAfter: uc.MCO.DegradeAfter, PolicyWait: uc.MCO.PolicyWait,
		Status:      &mco.NodeStatus{Dynamic: dyn, Node: name, OwnDrain: ownDrain},
		Coexistence: &mco.Coexistence{Client: a.client, Node: name, Now: a.cfg.Now},
		Bootstrap:   &mco.Bootstrap{Root: root}}
	host := &mco.Host{OS: uc.OS, Configs: &mco.Configs{Dynamic: dyn}, Log: a.cfg.Log,
		Policies: &mco.PolicySource{Dynamic: dyn}, Units: uc.MCO.Units,
		Events: func(_ context.Context, warning bool, reason, message string) {
			a.events.Event(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, warning, reason, message)
		},
		Files:      machineconfig.Writer{Root: root, StateDir: filepath.Join(uc.StateDir, "machineconfig")},
		RecordPath: filepath.Join(uc.StateDir, "mco-host.json"),
		Current: func(ctx context.Context) (string, error) {
			node, err := a.watch.Node(ctx)
			if err != nil {
				return "", err
			}
			return node.Annotations[mco.AnnotationCurrentConfig], nil
		}}
	watch := &mco.DriftWatch{Files: host.Files, Configs: host.Configs, Protocol: protocol, Events: host.Events, Log: a.cfg.Log}
	protocol.Drift = watch
	a.companions = append(a.companions, watch.Run)
	certs := &mco.CertificateWriter{Dynamic: dyn, Client: a.client, Node: name, NodeObject: a.watch.Node,
		Observe: a.watch.Observe, Root: root, Units: uc.MCO.Units, Log: a.cfg.Log.With("part", "certificates")}
	a.companions = append(a.companions, certs.Run)
	workloads := own
	if !ownDrain {
		workloads = &mco.DrainHandshake{Client: a.client, NodeName: name, Node: a.watch, Own: own}
	}
	return protocol, host, workloads, nil
}
