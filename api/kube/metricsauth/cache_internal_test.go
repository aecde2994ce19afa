package metricsauth

import (
	"crypto/sha256"
	"testing"
	"time"
)

func TestCacheBoundedAndExpiring(t *testing.T) {
	c := newCache(2)
	now := time.Unix(1000, 0)
	key := func(s string) [32]byte { return sha256.Sum256([]byte(s)) }
	c.put(key("a"), 200, now.Add(time.Minute))
	c.put(key("b"), 403, now.Add(10*time.Second))
	if _, ok := c.get(key("a"), now); !ok { // a is now the most recently used
		t.Fatal("a missing")
	}
	c.put(key("c"), 200, now.Add(time.Minute))
	if c.len() != 2 {
		t.Errorf("cache holds %d entries, want at most 2", c.len())
	}
	if _, ok := c.get(key("b"), now); ok {
		t.Error("b, the least recently used, was not evicted")
	}
	if s, ok := c.get(key("c"), now.Add(59*time.Second)); !ok || s != 200 {
		t.Errorf("c = %d %v, want 200 before its expiry", s, ok)
	}
	if _, ok := c.get(key("c"), now.Add(time.Minute)); ok {
		t.Error("c served at its expiry")
	}
	if c.len() != 1 {
		t.Errorf("expired entry kept: %d entries", c.len())
	}
}
