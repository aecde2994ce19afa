package coordinator

import (
	"sync"
	"time"
)

// statusInterval bounds how often a pool's status is written.
const statusInterval = time.Second

// statusPace owns when each pool's status was last written, so that it is
// written at most once per statusInterval: the status changes with every
// grant, and writing it on the path from a freed slot to the next grant
// would delay the grant.
type statusPace struct {
	mu      sync.Mutex
	written map[string]time.Time
}

func newStatusPace() *statusPace { return &statusPace{written: map[string]time.Time{}} }

// wait is how long pool's status must wait at now (≤ 0: write now).
func (s *statusPace) wait(pool string, now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.written[pool].Add(statusInterval).Sub(now)
}

// wrote records a status write of pool at now.
func (s *statusPace) wrote(pool string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.written[pool] = now
}
