package results

import (
	"container/list"
	"sync"
)

// cache is a bounded LRU of recently stored records, by task id, for lookups
// of records the broker already holds. Safe for concurrent use.
type cache struct {
	mu         sync.Mutex
	maxEntries int
	maxBytes   int64
	bytes      int64
	ll         *list.List // of *cacheItem, front = most recent
	m          map[string]*list.Element
}

type cacheItem struct {
	id       string
	body     []byte
	terminal bool
}

func newCache(maxEntries int, maxBytes int64) *cache {
	return &cache{maxEntries: maxEntries, maxBytes: maxBytes, ll: list.New(), m: make(map[string]*list.Element)}
}

// put records body as the task's latest record, unless that would replace a
// terminal record with a non-terminal one. A body over the byte bound is not
// cached.
func (c *cache) put(id string, body []byte, terminal bool) {
	if int64(len(body)) > c.maxBytes {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.m[id]; ok {
		it := el.Value.(*cacheItem)
		if it.terminal && !terminal {
			return
		}
		c.bytes += int64(len(body) - len(it.body))
		it.body, it.terminal = body, terminal
		c.ll.MoveToFront(el)
	} else {
		c.m[id] = c.ll.PushFront(&cacheItem{id: id, body: body, terminal: terminal})
		c.bytes += int64(len(body))
	}
	for c.ll.Len() > c.maxEntries || c.bytes > c.maxBytes {
		el := c.ll.Back()
		it := el.Value.(*cacheItem)
		c.ll.Remove(el)
		delete(c.m, it.id)
		c.bytes -= int64(len(it.body))
	}
}

func (c *cache) get(id string) (body []byte, terminal, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.m[id]
	if !ok {
		return nil, false, false
	}
	c.ll.MoveToFront(el)
	it := el.Value.(*cacheItem)
	return it.body, it.terminal, true
}
