package state

import (
	"slices"
	"sync"
	"unsafe"

	"github.com/cockroachdb/pebble/v2"
)

// DefaultWriteCacheBytes is the default of BackendConfig.WriteCacheBytes:
// the write-back cache of one Pebble backend holds about this many bytes of
// keys and values (with a fixed 64-byte overhead per entry counted).
const DefaultWriteCacheBytes = 16 << 20

// writeCacheEntryOverhead is what one cached entry counts against the
// cache's bytes besides its key and value: the map slot and the entry.
const writeCacheEntryOverhead = 64

// writeCache is the write-back cache in front of a Pebble store (Kafka
// Streams' caching key-value store with its ThreadCache/NamedCache): point
// reads and writes of values and map entries are served from it, and the
// writes reach Pebble in one batch when it is flushed, which the store
// does before every snapshot, scan, merge, count, cleanup and close. A hot
// key read and written once per record thus costs two map operations
// instead of a Pebble Get and Set.
//
// When the cache outgrows its bytes it evicts the least recently used
// entries until it holds at most 7/8 of them (so an eviction is amortized
// over many writes), writing the dirty ones among them to Pebble in one
// batch first (NamedCache.evict): the hot entries stay, with their
// unwritten changes.
//
// Keys are full Pebble keys (keys.go): the values and the map entries of
// every state share one cache. Safe for concurrent use (the async state
// layer reads on other goroutines): mu guards everything; a read that
// misses reads Pebble without the lock and fills the cache only if no
// write, eviction or drop happened to the cache meanwhile (gen).
type writeCache struct {
	mu      sync.Mutex
	entries map[string]*cacheEntry
	// lru is the sentinel of the entries' recency list: lru.next is the
	// most recently used entry, lru.prev the least.
	lru cacheEntry
	// dirty holds every entry with dirty set, in the order it became
	// dirty, and entries that were evicted since (dirty false, skipped):
	// a flush visits these only, so a flush before every scan (the rules
	// operator scans its window per record) costs the writes since the
	// last one, not the cache's size. ndirty counts the dirty ones.
	dirty  []*cacheEntry
	ndirty int
	bytes  int    // keys + values + overhead of the entries
	limit  int    // bytes above which entries are evicted
	gen    uint64 // bumped by every eviction or drop of entries
	// bypass are the state ids the cache never holds: states with
	// background TTL cleanup, which rewrites Pebble behind the cache.
	bypass map[uint32]bool
}

// cacheEntry is one cached key: its value (present false: deleted),
// whether Pebble lacks this version, and its place in the recency list.
type cacheEntry struct {
	key        string // the map key
	val        []byte
	present    bool
	dirty      bool
	prev, next *cacheEntry
}

func (e *cacheEntry) size() int { return len(e.key) + len(e.val) + writeCacheEntryOverhead }

func newWriteCache(limit int) *writeCache {
	c := &writeCache{entries: map[string]*cacheEntry{}, limit: limit, bypass: map[uint32]bool{}}
	c.lru.next, c.lru.prev = &c.lru, &c.lru
	return c
}

// touch makes e the most recently used entry (linking it in if new).
func (c *writeCache) touch(e *cacheEntry) {
	if c.lru.next == e {
		return
	}
	if e.next != nil {
		e.prev.next, e.next.prev = e.next, e.prev
	}
	e.prev, e.next = &c.lru, c.lru.next
	c.lru.next.prev = e
	c.lru.next = e
}

// unlink removes e from the map and the recency list.
func (c *writeCache) unlink(e *cacheEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
	delete(c.entries, e.key)
	c.bytes -= e.size()
}

// get returns a copy of key's cached value; cached false means Pebble must
// be read, with the generation to pass to fill.
func (c *writeCache) get(id uint32, key []byte) (v []byte, found, cached bool, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bypass[id] {
		return nil, false, false, 0
	}
	e, ok := c.entries[string(key)]
	if !ok {
		return nil, false, false, c.gen
	}
	c.touch(e)
	if !e.present {
		return nil, false, true, c.gen
	}
	return append([]byte{}, e.val...), true, true, c.gen
}

// fill caches what Pebble returned for key after a miss in generation gen,
// unless the cache changed for key since (a write, an eviction or a drop).
func (c *writeCache) fill(db *pebble.DB, id uint32, key, v []byte, found bool, gen uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bypass[id] || c.gen != gen {
		return nil
	}
	if _, ok := c.entries[string(key)]; ok {
		return nil
	}
	e := &cacheEntry{key: string(key), present: found}
	if found {
		e.val = append([]byte{}, v...)
	}
	c.entries[e.key] = e
	c.touch(e)
	c.bytes += e.size()
	return c.maybeEvict(db)
}

// put caches a write of key: v, or a delete when present is false. It
// returns false for a state the cache bypasses (the caller writes Pebble).
func (c *writeCache) put(db *pebble.DB, id uint32, key, v []byte, present bool) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bypass[id] {
		return false, nil
	}
	e, ok := c.entries[string(key)]
	if !ok {
		e = &cacheEntry{key: string(key)}
		c.entries[e.key] = e
		c.bytes += len(key) + writeCacheEntryOverhead
	}
	c.touch(e)
	c.bytes += len(v) - len(e.val)
	if present {
		e.val = append(e.val[:0], v...)
	} else {
		e.val = nil
	}
	e.present = present
	if !e.dirty {
		e.dirty = true
		c.ndirty++
		c.dirty = append(c.dirty, e)
	}
	return true, c.maybeEvict(db)
}

// forget drops key from the cache after flushing it: the caller is about
// to write it to Pebble directly (a merge).
func (c *writeCache) forget(db *pebble.DB, key []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++ // a read of key in flight must not fill the cache with what preceded the merge
	e, ok := c.entries[string(key)]
	if !ok {
		return nil
	}
	if e.dirty {
		if err := c.flushLocked(db); err != nil {
			return err
		}
	}
	c.unlink(e)
	return nil
}

// flush writes every dirty entry to Pebble in one batch (without sync:
// checkpoints give durability); the entries stay cached, clean.
func (c *writeCache) flush(db *pebble.DB) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.flushLocked(db)
}

// drop flushes, then empties the cache.
func (c *writeCache) drop(db *pebble.DB) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dropLocked(db)
}

// bypassIDs makes the cache stop holding the states ids (flushing and
// dropping what it holds first, when an id is new).
func (c *writeCache) bypassIDs(db *pebble.DB, ids []uint32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	added := false
	for _, id := range ids {
		if !c.bypass[id] {
			c.bypass[id], added = true, true
		}
	}
	if !added {
		return nil
	}
	return c.dropLocked(db)
}

// maybeEvict evicts the least recently used entries while the cache holds
// more than 7/8 of its limit, once it holds more than the limit; the dirty
// ones among them reach Pebble in one batch first.
func (c *writeCache) maybeEvict(db *pebble.DB) error {
	if c.bytes <= c.limit {
		return nil
	}
	low := c.limit - c.limit/8
	var b *pebble.Batch
	freed := 0
	for e := c.lru.prev; e != &c.lru && c.bytes-freed > low; e = e.prev {
		freed += e.size()
		if !e.dirty {
			continue
		}
		if b == nil {
			b = db.NewBatch()
			defer b.Close()
		}
		if err := batchWrite(b, e); err != nil {
			return err
		}
	}
	if b != nil {
		if err := b.Commit(pebble.NoSync); err != nil {
			return err
		}
	}
	c.gen++
	for c.lru.prev != &c.lru && freed > 0 {
		e := c.lru.prev
		freed -= e.size()
		if e.dirty {
			e.dirty = false // its slot in c.dirty is skipped by the next flush
			c.ndirty--
		}
		c.unlink(e)
		e.val = nil
	}
	if len(c.dirty) > 64 && len(c.dirty) > 2*c.ndirty { // evicted entries' slots outnumber the dirty ones
		c.dirty = slices.DeleteFunc(c.dirty, func(e *cacheEntry) bool { return !e.dirty })
	}
	return nil
}

func (c *writeCache) dropLocked(db *pebble.DB) error {
	if err := c.flushLocked(db); err != nil {
		return err
	}
	clear(c.entries)
	c.lru.next, c.lru.prev = &c.lru, &c.lru
	c.bytes = 0
	c.gen++
	return nil
}

func (c *writeCache) flushLocked(db *pebble.DB) error {
	if c.ndirty == 0 {
		clear(c.dirty)
		c.dirty = c.dirty[:0]
		return nil
	}
	b := db.NewBatch()
	defer b.Close()
	for _, e := range c.dirty {
		if !e.dirty {
			continue
		}
		if err := batchWrite(b, e); err != nil {
			return err
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return err
	}
	for _, e := range c.dirty {
		e.dirty = false
	}
	clear(c.dirty) // no references to evicted entries
	c.dirty = c.dirty[:0]
	c.ndirty = 0
	return nil
}

// batchWrite adds e's version to b (the batch copies key and value).
func batchWrite(b *pebble.Batch, e *cacheEntry) error {
	k := unsafe.Slice(unsafe.StringData(e.key), len(e.key))
	if e.present {
		return b.Set(k, e.val, nil)
	}
	return b.Delete(k, nil)
}
