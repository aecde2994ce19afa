package metricsauth

import (
	"container/list"
	"sync"
	"time"
)

// cache keeps decisions for a while, at most size of them, the least
// recently used going first. Keys are digests of the token and the request
// (never the token itself).
type cache struct {
	size int

	mu    sync.Mutex
	order *list.List // front: most recently used; values are *entry
	items map[[32]byte]*list.Element
}

type entry struct {
	key     [32]byte
	status  int // the HTTP status the decision answers with
	expires time.Time
}

func newCache(size int) *cache {
	return &cache{size: size, order: list.New(), items: make(map[[32]byte]*list.Element, size)}
}

// get returns the status cached for key, if it has not expired at now.
func (c *cache) get(key [32]byte, now time.Time) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		return 0, false
	}
	e := el.Value.(*entry)
	if !now.Before(e.expires) {
		c.order.Remove(el)
		delete(c.items, key)
		return 0, false
	}
	c.order.MoveToFront(el)
	return e.status, true
}

// put stores status for key until expires, evicting the least recently
// used entry when full.
func (c *cache) put(key [32]byte, status int, expires time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		e := el.Value.(*entry)
		e.status, e.expires = status, expires
		c.order.MoveToFront(el)
		return
	}
	for c.order.Len() >= c.size {
		oldest := c.order.Back()
		c.order.Remove(oldest)
		delete(c.items, oldest.Value.(*entry).key)
	}
	c.items[key] = c.order.PushFront(&entry{key: key, status: status, expires: expires})
}

// len is the number of entries, expired or not.
func (c *cache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
