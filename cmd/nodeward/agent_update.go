package main

import (
	"fmt"
	"log/slog"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/nodeward/nodeward/api/kube"
	"github.com/nodeward/nodeward/daemon"
	"github.com/nodeward/nodeward/drain"
	"github.com/nodeward/nodeward/systemd"
)

// newUpdateAgent wires the update lifecycle: rpm-ostree through osupdate,
// reboots through logind, readiness through sd_notify, and the coordinator
// protocol (nodeward's annotations or the MCO's).
func newUpdateAgent(client *kube.Client, restConfig *rest.Config, health *daemon.Health,
	nodeName, protocol, stateDir string, host hostFlags, drainOpts drain.Options, log *slog.Logger) (*daemon.UpdateAgent, *daemon.Readiness, error) {
	updater, err := host.updater(stateDir, log)
	if err != nil {
		return nil, nil, fmt.Errorf("OS updater: %w", err)
	}
	readiness := &daemon.Readiness{Notifier: &systemd.Notifier{Log: log}, Log: log}
	cfg := daemon.UpdateAgentConfig{Client: client, NodeName: nodeName, StateDir: stateDir,
		OS: daemon.OSUpdate{Updater: updater}, Reboot: &systemd.Rebooter{Log: log},
		BootID: daemon.FileBootID(host.bootIDFile), PollInterval: host.pollInterval,
		Registerer: health.Registry(), Status: readiness, Log: log, DrainOptions: drainOpts}
	if sel, err := host.postUpdateSelector(); err != nil {
		return nil, nil, err
	} else if sel != nil {
		cfg.Health = daemon.PodsReadyCheck(client, sel)
	}
	switch protocol {
	case "nodeward":
	case "mco":
		dyn, err := dynamic.NewForConfig(restConfig)
		if err != nil {
			return nil, nil, fmt.Errorf("create dynamic client: %w", err)
		}
		cfg.Protocol = &daemon.MCOProtocol{Client: client, Dynamic: dyn, Node: nodeName}
	default:
		return nil, nil, fmt.Errorf("--protocol %q: want nodeward or mco", protocol)
	}
	update, err := daemon.NewUpdateAgent(cfg)
	if err != nil {
		return nil, nil, err
	}
	readiness.Add("health", health.Ready)
	readiness.Add("update", daemon.SyncedCheck(update.Synced()))
	return update, readiness, nil
}
