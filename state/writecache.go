package state

import (
	"slices"
	"strings"
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
// When the cache outgrows its bytes it evicts entries not used recently
// until it holds at most 7/8 of them (so an eviction is amortized over
// many writes), writing the dirty ones among them to Pebble in one batch
// first (NamedCache.evict): the hot entries stay, with their unwritten
// changes. Recency is CLOCK's (second chance): a hit only sets the entry's
// referenced bit instead of moving it in the list (which would touch two
// other entries' memory on every read); eviction walks from the oldest
// entry, moves a referenced one to the front with its bit cleared, and
// evicts the others.
//
// Keys are full Pebble keys (keys.go): the values and the map entries of
// every state share one cache. Safe for concurrent use (the async state
// layer reads on other goroutines): mu guards everything; a read that
// misses reads Pebble without the lock and fills the cache only if no
// write, eviction or drop happened to the cache meanwhile (gen).
type writeCache struct {
	mu sync.Mutex
	// commit, when not nil, commits the cache's batches instead of
	// Batch.Commit (a disaggregated store's pebbleStore.commit, which
	// logs them for delta checkpoints).
	commit  func(*pebble.Batch, *pebble.WriteOptions) error
	entries map[string]*cacheEntry
	// lru is the sentinel of the entries' recency list: lru.next is the
	// entry added (or given a second chance) last, lru.prev the oldest.
	lru cacheEntry
	// victims is maybeEvict's scratch list of the entries it evicts.
	victims []*cacheEntry
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
	// scratch holds a decoded value serialized for a batch (which copies it).
	scratch []byte
}

// cacheEntry is one cached key: its value (present false: deleted),
// whether Pebble lacks this version, and its place in the recency list.
// A present value is held either serialized (codec nil: val) or decoded
// (codec not nil: obj, a pointer to the value that the entry owns,
// serialized by the codec only when the entry is written to Pebble or
// read as bytes; see objCodec). A write of a decoded value over a decoded
// value of the same codec copies it into obj in place (objCodec.store):
// no allocation per write, and only the owner goroutine, holding mu, ever
// writes through obj, so a reader under mu never sees a torn value.
type cacheEntry struct {
	key     string // the map key
	obj     any
	codec   *objCodec
	present bool
	dirty   bool
	// absent says Pebble holds no value for the key: a read of it found
	// none, or the cache wrote its delete. A dirty delete of an absent key
	// is not written (a row created and removed between two flushes, such
	// as a join's buffered record its timer removes, never reaches Pebble).
	absent bool
	// ref is CLOCK's referenced bit: set by a hit, cleared when eviction
	// gives the entry its second chance.
	ref        bool
	osize      int // codec.size(obj)
	val        []byte
	prev, next *cacheEntry
}

// inlineKeyLen is the longest key newCacheEntry keeps in the entry's own
// allocation.
const inlineKeyLen = 32

// inlineKeyEntry is an entry with its key's bytes in the same allocation:
// a map lookup compares the key next to the entry it then reads, one
// cache miss instead of two (a state key is about 20 bytes).
type inlineKeyEntry struct {
	kbuf [inlineKeyLen]byte
	e    cacheEntry
}

// newCacheEntry returns an empty entry for key, with its own copy of key
// (in the entry's allocation when short). The copy is never modified.
func newCacheEntry(key []byte) *cacheEntry {
	if len(key) == 0 || len(key) > inlineKeyLen {
		return &cacheEntry{key: string(key)}
	}
	p := &inlineKeyEntry{}
	n := copy(p.kbuf[:], key)
	p.e.key = unsafe.String(&p.kbuf[0], n)
	return &p.e
}

func (e *cacheEntry) size() int {
	return len(e.key) + len(e.val) + e.osize + writeCacheEntryOverhead
}

// setVal makes e hold the serialized value v (nil for a delete), keeping
// c.bytes in step.
func (c *writeCache) setVal(e *cacheEntry, v []byte, present bool) {
	c.bytes += len(v) - len(e.val) - e.osize
	if present {
		e.val = append(e.val[:0], v...)
	} else {
		e.val = nil
	}
	e.obj, e.codec, e.osize, e.present = nil, nil, 0, present
}

// setObj makes e hold a copy of the decoded value obj points to (the
// caller keeps obj): copied into the value e holds decoded by codec in
// place, else into a new one (objCodec.box). c.bytes is kept in step:
// the value's size from the decoded value it replaces when the codec can
// derive it (objCodec.resize), else measured.
func (c *writeCache) setObj(e *cacheEntry, obj any, codec *objCodec) {
	if e.codec == codec && e.obj != nil {
		var size int
		if codec.resize != nil {
			size = codec.resize(e.obj, e.osize, obj)
		} else {
			size = codec.size(obj)
		}
		codec.store(e.obj, obj)
		c.bytes += size - e.osize
		e.osize, e.present = size, true
		return
	}
	c.adoptObj(e, codec.box(obj), codec)
}

// adoptObj makes e hold the decoded value obj, a new pointer the cache
// owns from now on (a value decoded from bytes), keeping c.bytes in step.
func (c *writeCache) adoptObj(e *cacheEntry, obj any, codec *objCodec) {
	size := codec.size(obj)
	c.bytes += size - len(e.val) - e.osize
	e.val, e.obj, e.codec, e.osize, e.present = nil, obj, codec, size, true
}

// bytesOf returns the serialized value of a present entry: val, or its
// decoded value serialized by the codec (a new slice).
func (e *cacheEntry) bytesOf() ([]byte, error) {
	if e.codec == nil {
		return e.val, nil
	}
	return e.codec.encode(nil, e.obj)
}

// objCodec is how the cache holds the decoded values of one state (Flink's
// heap state, Kafka Streams' caching store before serialization): what
// the typed state above put is kept as it is (copied into a value the
// entry owns; every obj is a pointer to a value), and serialized only when it
// is flushed or evicted to Pebble, or read as bytes (a snapshot, a scan,
// an async read); the bytes are those the typed state's serializer writes
// (encode), so Pebble and every snapshot hold what they would hold without
// it. A value read from Pebble is decoded once (decode) and kept decoded.
// size estimates the bytes a decoded value holds, for the cache's bound.
type objCodec struct {
	encode func(dst []byte, obj any) ([]byte, error)
	decode func(b []byte) (any, error)
	size   func(obj any) int
	// resize, if not nil, is size of obj given the decoded value old it
	// replaces and old's size (HeapResizer).
	resize func(old any, oldSize int, obj any) int
	// store copies the value src points to into the one dst points to.
	store func(dst, src any)
	// box returns a pointer to a new copy of the value src points to.
	box func(src any) any
}

func newWriteCache(limit int) *writeCache {
	c := &writeCache{entries: map[string]*cacheEntry{}, limit: limit, bypass: map[uint32]bool{}}
	c.lru.next, c.lru.prev = &c.lru, &c.lru
	return c
}

// bypassed reports whether the cache never holds state id (without a
// map lookup in the common case of no bypassed state).
func (c *writeCache) bypassed(id uint32) bool {
	return len(c.bypass) != 0 && c.bypass[id]
}

// touch marks e used: its referenced bit set, or, if new, linked in at
// the front of the list.
func (c *writeCache) touch(e *cacheEntry) {
	if e.next != nil {
		if !e.ref {
			e.ref = true
		}
		return
	}
	c.pushFront(e)
}

// pushFront links the unlinked e in at the front of the list.
func (c *writeCache) pushFront(e *cacheEntry) {
	e.prev, e.next = &c.lru, c.lru.next
	c.lru.next.prev = e
	c.lru.next = e
}

// pushBack links the unlinked e in at the oldest end of the list.
func (c *writeCache) pushBack(e *cacheEntry) {
	e.next, e.prev = &c.lru, c.lru.prev
	c.lru.prev.next = e
	c.lru.prev = e
}

// unlink removes e from the map and the recency list.
func (c *writeCache) unlink(e *cacheEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
	delete(c.entries, e.key)
	c.bytes -= e.size()
}

// get returns a copy of key's cached value (a decoded one serialized);
// cached false means Pebble must be read, with the generation to pass to
// fill. err is a decoded value's serialization error. hint, if not nil,
// is set to the entry found (the owner goroutine's read before a write of
// the same key: put's hint).
func (c *writeCache) get(id uint32, key []byte, hint *cacheHint) (v []byte, found, cached bool, gen uint64, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bypassed(id) {
		return nil, false, false, 0, nil
	}
	e, ok := c.entries[string(key)]
	if !ok {
		return nil, false, false, c.gen, nil
	}
	c.touch(e)
	if hint != nil {
		*hint = cacheHint{e, c.gen}
	}
	if !e.present {
		return nil, false, true, c.gen, nil
	}
	if e.codec != nil {
		v, err = e.bytesOf()
		return v, err == nil, true, c.gen, err
	}
	return append([]byte{}, e.val...), true, true, c.gen, nil
}

// cacheHint is an entry a read found, for a write of the same key that
// follows (a read-modify-write): valid while the cache's generation is gen
// (no eviction, drop or forget since, so the entry is still in the map).
type cacheHint struct {
	e   *cacheEntry
	gen uint64
}

// getObj returns key's cached value decoded with codec: the pointer the
// entry holds, which the caller must copy the value out of before the
// next write of key (that overwrites it in place); a serialized one is
// decoded and kept decoded. cached false means Pebble must be read, with the generation to
// pass to fillObj. hint is the entry found. Owner goroutine only: the
// entry's form changes.
func (c *writeCache) getObj(id uint32, key []byte, codec *objCodec, hint *cacheHint) (obj any, found, cached bool, gen uint64, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bypassed(id) {
		return nil, false, false, 0, nil
	}
	e, ok := c.entries[string(key)]
	if !ok {
		return nil, false, false, c.gen, nil
	}
	c.touch(e)
	*hint = cacheHint{e, c.gen}
	switch {
	case !e.present:
		return nil, false, true, c.gen, nil
	case e.codec == codec:
		return e.obj, true, true, c.gen, nil
	}
	b, err := e.bytesOf()
	if err == nil {
		obj, err = codec.decode(b)
	}
	if err != nil {
		return nil, false, true, c.gen, err
	}
	c.adoptObj(e, obj, codec)
	return obj, true, true, c.gen, nil
}

// fillObj caches the decoded value of key read from Pebble (found false:
// absent) after a miss in generation gen, as fill does: obj, a new
// pointer from codec.decode, is the cache's from then on.
func (c *writeCache) fillObj(db *pebble.DB, id uint32, key []byte, obj any, found bool, codec *objCodec, gen uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bypassed(id) || c.gen != gen {
		return nil
	}
	if _, ok := c.entries[string(key)]; ok {
		return nil
	}
	e := newCacheEntry(key)
	if found {
		c.adoptObj(e, obj, codec)
	}
	e.absent = !found
	c.entries[e.key] = e
	c.touch(e)
	c.bytes += len(e.key) + writeCacheEntryOverhead
	return c.maybeEvict(db)
}

// putObj caches a write of key's decoded value obj points to (copied: the
// caller keeps obj); false for a state the cache bypasses. hint, if
// still valid and of key, saves the map lookup.
func (c *writeCache) putObj(db *pebble.DB, id uint32, key []byte, obj any, codec *objCodec, hint cacheHint) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bypassed(id) {
		return false, nil
	}
	e := c.hinted(key, hint)
	c.setObj(e, obj, codec)
	c.markDirty(e)
	return true, c.maybeEvict(db)
}

// removeObj caches a delete of key as put does, with putObj's hint.
func (c *writeCache) removeObj(db *pebble.DB, id uint32, key []byte, hint cacheHint) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bypassed(id) {
		return false, nil
	}
	e := c.hinted(key, hint)
	c.setVal(e, nil, false)
	c.markDirty(e)
	return true, c.maybeEvict(db)
}

// hinted is entryFor, without the map lookup when hint is still valid and
// of key.
func (c *writeCache) hinted(key []byte, hint cacheHint) *cacheEntry {
	if hint.e != nil && hint.gen == c.gen && hint.e.key == string(key) {
		c.touch(hint.e)
		return hint.e
	}
	return c.entryFor(key)
}

// entryFor returns key's entry, made the most recently used, adding an
// empty one when missing.
func (c *writeCache) entryFor(key []byte) *cacheEntry {
	e, ok := c.entries[string(key)]
	if !ok {
		e = newCacheEntry(key)
		c.entries[e.key] = e
		c.bytes += len(key) + writeCacheEntryOverhead
	}
	c.touch(e)
	return e
}

// markDirty records that Pebble lacks e's version.
func (c *writeCache) markDirty(e *cacheEntry) {
	if !e.dirty {
		e.dirty = true
		c.ndirty++
		c.dirty = append(c.dirty, e)
	}
}

// fill caches what Pebble returned for key after a miss in generation gen,
// unless the cache changed for key since (a write, an eviction or a drop).
func (c *writeCache) fill(db *pebble.DB, id uint32, key, v []byte, found bool, gen uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bypassed(id) || c.gen != gen {
		return nil
	}
	if _, ok := c.entries[string(key)]; ok {
		return nil
	}
	e := newCacheEntry(key)
	e.present, e.absent = found, !found
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
// hint, if still valid and of key (what a get of key found), saves the
// map lookup.
func (c *writeCache) put(db *pebble.DB, id uint32, key, v []byte, present bool, hint cacheHint) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bypassed(id) {
		return false, nil
	}
	e := c.hinted(key, hint)
	c.setVal(e, v, present)
	c.markDirty(e)
	return true, c.maybeEvict(db)
}

// putCold is put of a present value v the caller does not expect to read
// soon (MapState PutCold): a new entry joins the recency list at its
// oldest end, unreferenced, so the next eviction takes it (writing it to
// Pebble) before any entry that was used; an entry already cached keeps
// its place and bit. A stream of such writes thus does not push the hot
// entries out of the cache. False for a state the cache bypasses.
func (c *writeCache) putCold(db *pebble.DB, id uint32, key, v []byte) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bypassed(id) {
		return false, nil
	}
	e, ok := c.entries[string(key)]
	if !ok {
		e = newCacheEntry(key)
		c.entries[e.key] = e
		c.bytes += len(key) + writeCacheEntryOverhead
		c.pushBack(e)
	}
	c.setVal(e, v, true)
	c.markDirty(e)
	return true, c.maybeEvict(db)
}

// putNew is put of a present value v for a key the caller knows Pebble
// holds no value for: an entry it adds is marked absent (one already
// cached keeps what it knows).
func (c *writeCache) putNew(db *pebble.DB, id uint32, key, v []byte) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bypassed(id) {
		return false, nil
	}
	e, ok := c.entries[string(key)]
	if !ok {
		e = newCacheEntry(key)
		e.absent = true
		c.entries[e.key] = e
		c.bytes += len(key) + writeCacheEntryOverhead
	}
	c.touch(e)
	c.setVal(e, v, true)
	c.markDirty(e)
	return true, c.maybeEvict(db)
}

// appendTo caches a merge of key (MapAppender.AppendValue: v appended to
// its value) when the cache knows key's whole value: a present serialized
// value gets v appended in place, a cached delete or a key known absent
// becomes v. The entry is dirty, and its flush writes the whole value (a
// Set, which equals Pebble's value with the merge applied). False, and
// nothing changes, when the cache does not hold key, holds it decoded, or
// bypasses the state: the caller then merges in Pebble (after forget).
func (c *writeCache) appendTo(db *pebble.DB, id uint32, key, v []byte) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bypassed(id) {
		return false, nil
	}
	e, ok := c.entries[string(key)]
	if !ok || e.codec != nil {
		return false, nil
	}
	c.touch(e)
	if e.present {
		// In place: a copy get handed out, or dirtyIn's clone, does not
		// share the bytes appended to (they lie past its length).
		e.val = append(e.val, v...)
		c.bytes += len(v)
	} else {
		c.setVal(e, v, true)
	}
	c.markDirty(e)
	return true, c.maybeEvict(db)
}

// assumeAbsent records that Pebble holds no value for key, which the
// caller knows (MapState's HintAbsent): a clean entry marked absent, so
// that a read of key is answered without Pebble and a merge of it stays in
// the cache (appendTo). Nothing changes when key is cached already or the
// state is bypassed.
func (c *writeCache) assumeAbsent(db *pebble.DB, id uint32, key []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bypassed(id) {
		return nil
	}
	if _, ok := c.entries[string(key)]; ok {
		return nil
	}
	e := newCacheEntry(key)
	e.absent = true
	c.entries[e.key] = e
	c.touch(e)
	c.bytes += len(key) + writeCacheEntryOverhead
	return c.maybeEvict(db)
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

// maybeEvict evicts entries not used recently while the cache holds more
// than 7/8 of its limit, once it holds more than the limit (CLOCK: from the
// oldest, a referenced entry moves to the front with its bit cleared, an
// unreferenced one is evicted); the dirty ones among them reach Pebble in
// one batch first.
func (c *writeCache) maybeEvict(db *pebble.DB) error {
	if c.bytes <= c.limit {
		return nil
	}
	low := c.limit - c.limit/8
	var b *pebble.Batch
	freed := 0
	victims := c.victims[:0]
	defer func() { clear(victims); c.victims = victims[:0] }()
	// The walk ends: an entry moved to the front comes up again with its
	// bit clear, after every older one.
	for e := c.lru.prev; e != &c.lru && c.bytes-freed > low; {
		prev := e.prev
		if e.ref {
			e.ref = false
			e.prev.next, e.next.prev = e.next, e.prev
			c.pushFront(e)
			if prev == &c.lru { // e was the only entry left to visit
				prev = e
			}
			e = prev
			continue
		}
		victims = append(victims, e)
		freed += e.size()
		e = prev
		if v := victims[len(victims)-1]; !v.dirty || (!v.present && v.absent) {
			continue
		}
		if b == nil {
			b = db.NewBatch()
			defer b.Close()
		}
		if err := batchWrite(b, victims[len(victims)-1], &c.scratch); err != nil {
			return err
		}
	}
	if b != nil {
		if err := c.commitBatch(b); err != nil {
			return err
		}
	}
	c.gen++
	for _, e := range victims {
		if e.dirty {
			e.dirty = false // its slot in c.dirty is skipped by the next flush
			c.ndirty--
		}
		c.unlink(e)
		e.val, e.obj, e.codec = nil, nil, nil
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

// dirtyKV is a dirty cache entry's version as dirtyIn copies it.
type dirtyKV struct {
	key     string
	val     []byte
	present bool
}

// dirtyIn returns, sorted by key, the dirty entries (the versions Pebble
// lacks) whose keys lie in [lower, upper), so that a range read can merge
// them over a Pebble iterator instead of flushing; ok is false, and
// nothing is returned, when more than limit entries are dirty (the caller
// flushes: the walk over the dirty list stays bounded).
func (c *writeCache) dirtyIn(lower, upper []byte, limit int) (out []dirtyKV, ok bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ndirty > limit {
		return nil, false, nil
	}
	for _, e := range c.dirty {
		if !e.dirty || e.key < string(lower) || e.key >= string(upper) {
			continue
		}
		kv := dirtyKV{key: e.key, present: e.present}
		if e.present {
			v, err := e.bytesOf()
			if err != nil {
				return nil, false, err
			}
			kv.val = slices.Clone(v)
		}
		out = append(out, kv)
	}
	slices.SortFunc(out, func(a, b dirtyKV) int { return strings.Compare(a.key, b.key) })
	return out, true, nil
}

func (c *writeCache) flushLocked(db *pebble.DB) error {
	b, err := c.dirtyBatchLocked(db)
	if b == nil || err != nil {
		return err
	}
	defer b.Close()
	if err := c.commitBatch(b); err != nil {
		return err
	}
	c.markCleanLocked()
	return nil
}

// capture takes every dirty entry into a batch it returns (nil when none
// is dirty) and marks the entries clean, as flush does, but leaves the
// commit to the caller (a delta checkpoint commits the batch to Pebble
// after its synchronous part: pebbleStore.commitLater). The caller owns
// and closes the batch.
func (c *writeCache) capture(db *pebble.DB) (*pebble.Batch, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.captureLocked(db)
}

func (c *writeCache) captureLocked(db *pebble.DB) (*pebble.Batch, error) {
	b, err := c.dirtyBatchLocked(db)
	if b == nil || err != nil {
		return nil, err
	}
	c.markCleanLocked()
	return b, nil
}

// dirtyBatchLocked returns a batch of every dirty entry's version (nil
// when none is dirty).
func (c *writeCache) dirtyBatchLocked(db *pebble.DB) (*pebble.Batch, error) {
	if c.ndirty == 0 {
		clear(c.dirty)
		c.dirty = c.dirty[:0]
		return nil, nil
	}
	// The batch sized in advance from the entries' sizes (at least their
	// keys and values): one allocation instead of a doubling buffer that
	// copies what it holds at each step (a checkpoint's flush of a keyed
	// job's working set is megabytes).
	size := 0
	for _, e := range c.dirty {
		if e.dirty && e.present {
			size += e.size()
		}
	}
	b := db.NewBatchWithSize(size)
	for _, e := range c.dirty {
		if !e.dirty || (!e.present && e.absent) {
			continue
		}
		if err := batchWrite(b, e, &c.scratch); err != nil {
			_ = b.Close()
			return nil, err
		}
	}
	return b, nil
}

// markCleanLocked marks every dirty entry clean (its version in Pebble,
// or in a batch bound for it) and forgets the dirty list.
func (c *writeCache) markCleanLocked() {
	for _, e := range c.dirty {
		if e.dirty {
			e.dirty, e.absent = false, !e.present
		}
	}
	clear(c.dirty) // no references to evicted entries
	c.dirty = c.dirty[:0]
	c.ndirty = 0
}

// batchWrite adds e's version to b (the batch copies key and value); a
// decoded value is serialized first.
func batchWrite(b *pebble.Batch, e *cacheEntry, scratch *[]byte) error {
	k := unsafe.Slice(unsafe.StringData(e.key), len(e.key))
	if !e.present {
		return b.Delete(k, nil)
	}
	if e.codec == nil {
		return b.Set(k, e.val, nil)
	}
	v, err := e.codec.encode((*scratch)[:0], e.obj)
	if err != nil {
		return err
	}
	*scratch = v
	return b.Set(k, v, nil)
}

// commitBatch commits b with NoSync, through commit when set.
func (c *writeCache) commitBatch(b *pebble.Batch) error {
	if c.commit != nil {
		return c.commit(b, pebble.NoSync)
	}
	return b.Commit(pebble.NoSync)
}
