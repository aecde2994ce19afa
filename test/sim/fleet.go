package sim

import (
	"context"
	"fmt"
	"sync"
)

// StartFleet starts the agent of every node and serves their reboots
// until stop, which also stops every agent. newNode builds each node's
// SimNode (host, state directory, delays).
func StartFleet(names []string, newNode func(name string) *SimNode) (nodes []*SimNode, stop func(), err error) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	stop = func() {
		cancel()
		wg.Wait()
		for _, n := range nodes {
			n.Kill()
		}
	}
	for _, name := range names {
		n := newNode(name)
		if err := n.Start(); err != nil {
			stop()
			return nil, nil, fmt.Errorf("start the agent of %s: %w", name, err)
		}
		nodes = append(nodes, n)
		wg.Go(func() { n.RunReboots(ctx) })
	}
	return nodes, stop, nil
}
