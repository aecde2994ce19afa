package coordinator

import (
	"sync"
	"time"
)

// guardrailState is what the controller remembers of a pool's guardrails
// between passes: the gates' last verdict and the last silence sync. Both
// are rebuilt from the outside world after a restart (Prometheus is asked
// again, Alertmanager's silences are listed).
type guardrailState struct {
	verdict   *gateVerdict
	evaluated time.Time
	// silenced is the sorted node list of the last successful sync,
	// silencedAt its time, silenceErr the last sync's error ("" if none).
	silenced   string
	silencedAt time.Time
	silenceErr string
}

// guardrailMemory owns every pool's guardrailState.
type guardrailMemory struct {
	mu    sync.Mutex
	pools map[string]guardrailState
}

func newGuardrailMemory() *guardrailMemory {
	return &guardrailMemory{pools: map[string]guardrailState{}}
}

// of returns a copy of pool's state.
func (m *guardrailMemory) of(pool string) guardrailState {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pools[pool]
}

// update changes pool's state under the lock.
func (m *guardrailMemory) update(pool string, change func(*guardrailState)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.pools[pool]
	change(&g)
	m.pools[pool] = g
}
