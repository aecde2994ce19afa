package cluster

import (
	"context"
	"fmt"
	"time"
)

// Component names a control-plane process that chaos tests crash and
// restart.
type Component string

// The restartable components.
const (
	Etcd      Component = "etcd"
	APIServer Component = "kube-apiserver"
)

// component returns the running process of c (index 0 is etcd, 1 the API
// server, in start order).
func (cp *ControlPlane) component(c Component) (int, *Process, error) {
	for i, p := range cp.procs {
		if p.name == string(c) {
			return i, p, nil
		}
	}
	return 0, nil, fmt.Errorf("no control-plane component %q", c)
}

// Kill crashes c: SIGKILL to its process group, then waits until it is
// gone. Nothing is shut down cleanly; etcd's data dir and the API server's
// certificates stay for Restart. Killing a component that is not running
// does nothing.
func (cp *ControlPlane) Kill(c Component) error {
	cp.procMu.Lock()
	defer cp.procMu.Unlock()
	_, p, err := cp.component(c)
	if err != nil {
		return err
	}
	p.Kill()
	return nil
}

// Restart starts c again with the flags, ports and data dir of its first
// start (killing it first if it still runs) and waits until it is healthy:
// etcd's /health, or the API server's /readyz, which includes its etcd
// check. Restart the API server only once etcd serves.
func (cp *ControlPlane) Restart(ctx context.Context, c Component) error {
	cp.procMu.Lock()
	i, p, err := cp.component(c)
	if err != nil {
		cp.procMu.Unlock()
		return err
	}
	p.Kill()
	next, err := p.Again()
	if err != nil {
		cp.procMu.Unlock()
		return err
	}
	cp.procs[i] = next
	cp.procMu.Unlock()
	start := time.Now()
	switch c {
	case Etcd:
		err = cp.waitEtcd(ctx, next)
	case APIServer:
		err = cp.waitAPIServer(ctx, next)
	}
	if err != nil {
		return fmt.Errorf("restart %s: %w", c, err)
	}
	cp.opts.Log("%s restarted, healthy after %s", c, time.Since(start).Round(time.Millisecond))
	return nil
}

// WaitAPIServer waits until the running API server answers /readyz (for
// example after etcd came back).
func (cp *ControlPlane) WaitAPIServer(ctx context.Context) error {
	cp.procMu.Lock()
	_, p, err := cp.component(APIServer)
	cp.procMu.Unlock()
	if err != nil {
		return err
	}
	return cp.waitAPIServer(ctx, p)
}
