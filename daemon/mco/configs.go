package mco

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/nodeward/nodeward/daemon/update"
	"github.com/nodeward/nodeward/machineconfig"
)

// Configs reads rendered MachineConfigs from the API server and parses
// them. A rendered config's name carries the hash of its content, so a
// parsed config is kept for the agent's life (a handful per update).
type Configs struct {
	Dynamic dynamic.Interface
	// Timeout bounds one read; 10 s when zero.
	Timeout time.Duration

	mu     sync.Mutex
	parsed map[string]*machineconfig.Config
}

// Get returns the parsed MachineConfig name. A malformed config is an
// error wrapping update.ErrRefused that names the field; an unreadable one
// is a plain error, retried.
func (c *Configs) Get(ctx context.Context, name string) (*machineconfig.Config, error) {
	c.mu.Lock()
	cfg, ok := c.parsed[name]
	c.mu.Unlock()
	if ok {
		return cfg, nil
	}
	ctx, cancel := context.WithTimeout(ctx, orDefault(c.Timeout, 10*time.Second))
	defer cancel()
	obj, err := c.Dynamic.Resource(MachineConfigResource).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read MachineConfig %s: %w", name, err)
	}
	data, err := obj.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("encode MachineConfig %s: %w", name, err)
	}
	cfg, err = machineconfig.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%w: MachineConfig %s: %w", update.ErrRefused, name, err)
	}
	c.mu.Lock()
	if c.parsed == nil {
		c.parsed = map[string]*machineconfig.Config{}
	}
	c.parsed[name] = cfg
	c.mu.Unlock()
	return cfg, nil
}
