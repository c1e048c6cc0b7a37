package state

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// writeCacheSizes are the write cache sizes the cache tests run with:
// disabled, one byte (every write flushes and empties it) and the default.
var writeCacheSizes = []struct {
	name  string
	bytes int
}{{"off", -1}, {"tiny", 1}, {"default", 0}}

// TestWriteCacheSnapshotSeesCachedWrites: writes held in the write cache
// are flushed before a snapshot, so a restore from it has them, and a
// write after the snapshot is not in it.
func TestWriteCacheSnapshotSeesCachedWrites(t *testing.T) {
	for _, sz := range writeCacheSizes {
		t.Run(sz.name, func(t *testing.T) {
			cfg := testConfig(t, KindPebble)
			cfg.WriteCacheBytes = sz.bytes
			b := open(t, cfg)
			v := must1(GetValueState(b, ckptValue))(t)
			md := MapStateDescriptor[string, int64]{Name: "m", KeySerializer: StringSerializer{}, ValueSerializer: Int64Serializer{}}
			m := must1(GetMapState(b, md))(t)
			for i := range 100 {
				b.SetCurrentKey(u64key(uint64(i)))
				must(t, v.Update(int64(i)))
				must(t, v.Update(int64(i*2))) // the second write replaces the first in the cache
				must(t, m.Put("a", int64(i)))
				must(t, m.Put("b", int64(i)))
				if i%2 == 0 {
					must(t, m.Remove("b"))
					must(t, v.Clear())
				}
			}
			root := t.TempDir()
			ks := snapshotOf(t, b, filepath.Join(root, "1"), filepath.Join(root, "shared"))
			b.SetCurrentKey(u64key(1))
			must(t, v.Update(-1)) // after the snapshot: not restored

			rcfg := testConfig(t, KindPebble)
			rcfg.WriteCacheBytes = sz.bytes
			nb, err := OpenBackendRestored(rcfg, []RestoreHandle{{Handle: ks.Handle, Dir: filepath.Join(root, "1"), SharedDir: filepath.Join(root, "shared")}})
			must(t, err)
			t.Cleanup(func() { _ = nb.Close() })
			rv := must1(GetValueState(nb, ckptValue))(t)
			rm := must1(GetMapState(nb, md))(t)
			for i := range 100 {
				nb.SetCurrentKey(u64key(uint64(i)))
				got, ok, err := rv.Value()
				must(t, err)
				if wantOK := i%2 == 1; ok != wantOK || (ok && got != int64(i*2)) {
					t.Fatalf("key %d: value %d, %v; want %d, %v", i, got, ok, i*2, wantOK)
				}
				keys := collect(t, rm.Keys())
				want := []string{"a", "b"}
				if i%2 == 0 {
					want = []string{"a"}
				}
				if slices.Sort(keys); !slices.Equal(keys, want) {
					t.Fatalf("key %d: map keys %v, want %v", i, keys, want)
				}
			}
		})
	}
}

// TestWriteCacheListAndClear: a list Add (a Pebble merge) after a cached
// Update, a map Clear after cached Puts, and a reopen (Close flushes) see
// every write in order.
func TestWriteCacheListAndClear(t *testing.T) {
	for _, sz := range writeCacheSizes {
		t.Run(sz.name, func(t *testing.T) {
			cfg := testConfig(t, KindPebble)
			cfg.WriteCacheBytes = sz.bytes
			b := open(t, cfg)
			ld := ListStateDescriptor[int64]{Name: "l", Serializer: Int64Serializer{}}
			md := MapStateDescriptor[string, int64]{Name: "m", KeySerializer: StringSerializer{}, ValueSerializer: Int64Serializer{}}
			l := must1(GetListState(b, ld))(t)
			m := must1(GetMapState(b, md))(t)
			b.SetCurrentKey([]byte("k"))
			must(t, l.Update([]int64{1, 2}))
			must(t, l.Add(3))
			must(t, m.Put("x", 1))
			must(t, m.Put("y", 2))
			must(t, m.Clear())
			must(t, m.Put("z", 3))
			if got := collect(t, l.Get()); !slices.Equal(got, []int64{1, 2, 3}) {
				t.Fatalf("list = %v, want [1 2 3]", got)
			}
			nb, err := reopen(t, b, cfg, nil)
			must(t, err)
			nl := must1(GetListState(nb, ld))(t)
			nm := must1(GetMapState(nb, md))(t)
			nb.SetCurrentKey([]byte("k"))
			if got := collect(t, nl.Get()); !slices.Equal(got, []int64{1, 2, 3}) {
				t.Fatalf("reopened list = %v, want [1 2 3]", got)
			}
			if got := collect(t, nm.Keys()); !slices.Equal(got, []string{"z"}) {
				t.Fatalf("reopened map keys = %v, want [z]", got)
			}
		})
	}
}

// TestWriteCacheTTLCleanup: background TTL cleanup removes expired values
// written through the cache, and a value written after the cleanup started
// is kept.
func TestWriteCacheTTLCleanup(t *testing.T) {
	for _, sz := range writeCacheSizes {
		t.Run(sz.name, func(t *testing.T) {
			clk := newFakeClock()
			cfg := testConfig(t, KindPebble)
			cfg.WriteCacheBytes = sz.bytes
			cfg.Clock = clk
			cfg.TTLCleanup = TTLCleanupConfig{EntriesPerStep: 1000}
			b := open(t, cfg)
			d := ValueStateDescriptor[int64]{Name: "t", Serializer: Int64Serializer{}, TTL: &StateTtlConfig{TTL: time.Minute}}
			v := must1(GetValueState(b, d))(t)
			for i := range 10 {
				b.SetCurrentKey(u64key(uint64(i)))
				must(t, v.Update(int64(i)))
			}
			clk.at(2 * time.Minute)
			b.SetCurrentKey(u64key(0))
			must(t, v.Update(100)) // fresh
			removed, err := b.CleanupStep()
			must(t, err)
			if removed != 9 {
				t.Fatalf("cleanup removed %d, want 9", removed)
			}
			if n := storedEntries(t, b); n != 1 {
				t.Fatalf("%d entries stored, want 1", n)
			}
			if got, ok, err := v.Value(); err != nil || !ok || got != 100 {
				t.Fatalf("value = %d, %v, %v; want 100", got, ok, err)
			}
		})
	}
}

// TestWriteCacheConcurrentReads: reads on other goroutines (the async
// state layer's) while the owner writes and flushes never see a value
// older than the last write before the read started.
func TestWriteCacheConcurrentReads(t *testing.T) {
	cfg := testConfig(t, KindPebble)
	cfg.WriteCacheBytes = 4 << 10 // small: drops happen during the run
	b := open(t, cfg)
	v := must1(GetValueState(b, ckptValue))(t)
	const keys = 64
	for i := range keys {
		b.SetCurrentKey(u64key(uint64(i)))
		must(t, v.Update(0))
	}
	st := b.core().st.(*pebbleStore)
	vs := v.(*valueState[int64])
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type read struct {
		key   int
		floor int64
	}
	floors := make([]int64, keys) // last value written per key
	errs := make(chan error, 1)
	reqs := make(chan read, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for r := range reqs {
			got, ok, err := vs.bind(b.core().keyRefFor(u64key(uint64(r.key)))).Value()
			if err == nil && (!ok || got < r.floor) {
				err = fmt.Errorf("key %d: read %d, %v; want at least %d", r.key, got, ok, r.floor)
			}
			if err != nil {
				select {
				case errs <- err:
				default:
				}
				cancel()
			}
		}
	}()
	for n := int64(1); n <= 3000 && ctx.Err() == nil; n++ {
		i := int(n % keys)
		b.SetCurrentKey(u64key(uint64(i)))
		must(t, v.Update(n))
		floors[i] = n
		reqs <- read{key: i, floor: floors[i]}
		if n%500 == 0 {
			must(t, st.flushCache())
		}
	}
	close(reqs)
	<-done
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
}

// TestWriteCacheModel: a seeded random sequence of the cache's operations
// (write, delete, read-through fill, a Set behind the cache, a merge,
// a hint of absence, flush, drop) over 40
// keys, with a limit of a few entries so evictions happen; after every
// operation a read through the cache, and after every flush Pebble
// itself, equal a plain map of what was written.
func TestWriteCacheModel(t *testing.T) {
	for _, limit := range []int{1, 600, 1 << 20} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			cfg := testConfig(t, KindPebble)
			cfg.WriteCacheBytes = limit
			st := open(t, cfg).core().st.(*pebbleStore)
			model := map[string]string{}
			rng := rand.New(rand.NewPCG(uint64(limit), 7))
			key := func(i int) []byte { return fmt.Appendf(nil, "\x00key-%02d", i) }
			check := func(op int, k []byte) {
				t.Helper()
				v, found, err := st.cachedGet(1, k)
				must(t, err)
				if want, ok := model[string(k)]; found != ok || string(v) != want {
					t.Fatalf("op %d: %q = %q, %v; want %q, %v", op, k, v, found, want, ok)
				}
			}
			for op := range 5000 {
				k := key(rng.IntN(40))
				switch r := rng.IntN(100); {
				case r < 45:
					v := fmt.Sprintf("v%d-%s", op, strings.Repeat("x", rng.IntN(40)))
					must(t, st.cachedWrite(1, k, []byte(v), true))
					model[string(k)] = v
				case r < 65:
					must(t, st.cachedWrite(1, k, nil, false))
					delete(model, string(k))
				case r < 85:
					check(op, k)
				case r < 87: // a Set behind the cache: the store forgets the key, then writes Pebble
					must(t, st.cache.forget(st.db, k))
					v := fmt.Sprintf("s%d", op)
					must(t, st.db.Set(k, []byte(v), pebble.NoSync))
					model[string(k)] = v
				case r < 89: // a merge (mergeEntry): in the cache when it knows the value, else in Pebble
					v := fmt.Sprintf("m%d", op)
					done, err := st.cache.appendTo(st.db, 1, k, []byte(v))
					must(t, err)
					if !done {
						must(t, st.cache.forget(st.db, k))
						must(t, st.db.Merge(k, []byte(v), pebble.NoSync))
					}
					model[string(k)] += v
				case r < 90: // a hint, true whenever the model lacks the key (a cached delete is no-op'd)
					if _, ok := model[string(k)]; !ok {
						must(t, st.cache.assumeAbsent(st.db, 1, k))
					}
				case r < 97:
					must(t, st.flushCache())
					for i := range 40 {
						k := key(i)
						v, closer, err := st.db.Get(k)
						got, found := "", err == nil
						if found {
							got = string(v)
							must(t, closer.Close())
						} else if !errors.Is(err, pebble.ErrNotFound) {
							t.Fatal(err)
						}
						if want, ok := model[string(k)]; found != ok || got != want {
							t.Fatalf("op %d: pebble %q = %q, %v; want %q, %v", op, k, got, found, want, ok)
						}
					}
				default:
					must(t, st.dropCache())
				}
				check(op, k)
			}
		})
	}
}

// TestWriteCacheEvictsLeastRecentlyUsed: with room for 21 entries, a
// key read or written between every two of 200 cold writes stays cached
// with its unwritten change (Pebble lacks it until a flush), while the
// oldest cold keys are evicted with their writes in Pebble.
func TestWriteCacheEvictsLeastRecentlyUsed(t *testing.T) {
	cfg := testConfig(t, KindPebble)
	cfg.WriteCacheBytes = 20 * (writeCacheEntryOverhead + 16)
	st := open(t, cfg).core().st.(*pebbleStore)
	hot := []byte("\x00hot-key")
	must(t, st.cachedWrite(1, hot, []byte("h0"), true))
	for i := range 200 {
		must(t, st.cachedWrite(1, fmt.Appendf(nil, "\x00cold-%03d", i), []byte("c"), true))
		if i%2 == 0 {
			must(t, st.cachedWrite(1, hot, fmt.Appendf(nil, "h%d", i), true))
		} else {
			_, _, err := st.cachedGet(1, hot)
			must(t, err)
		}
	}
	if !st.cache.contains(1, hot) {
		t.Fatal("the hot key was evicted")
	}
	if _, closer, err := st.db.Get(hot); !errors.Is(err, pebble.ErrNotFound) {
		if err == nil {
			_ = closer.Close()
		}
		t.Fatalf("pebble has the hot key before a flush (%v), want its writes held in the cache", err)
	}
	if st.cache.contains(1, []byte("\x00cold-000")) {
		t.Fatal("the oldest cold key is still cached")
	}
	v, closer, err := st.db.Get([]byte("\x00cold-000"))
	must(t, err)
	if string(v) != "c" {
		t.Fatalf("evicted cold key in pebble = %q, want c", v)
	}
	must(t, closer.Close())
	// 1,600 bytes of room, 74 bytes per cold entry and 76 for the hot one:
	// the last eviction left 19 entries (at most 7/8 of the room), two cold
	// writes since.
	if n, b := len(st.cache.entries), st.cache.bytes; n != 21 || b != 1556 {
		t.Fatalf("%d entries of %d bytes cached, want 21 of 1556", n, b)
	}
	must(t, st.flushCache())
	v, closer, err = st.db.Get(hot)
	must(t, err)
	if string(v) != "h198" {
		t.Fatalf("hot key after the flush = %q, want h198", v)
	}
	must(t, closer.Close())
}

// contains reports whether key of state id is cached (for the tests).
func (c *writeCache) contains(id uint32, key []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bypass[id] {
		return false
	}
	_, ok := c.entries[string(key)]
	return ok
}

// TestWriteCacheSecondChance: eviction is CLOCK's. With room for 22
// entries of 71 bytes, 22 written and then all read, a 23rd write
// evicts down to 7/8 of the room (19 entries): every read entry gets its
// second chance (moved to the front, bit cleared), so the unread new one
// goes first, then the oldest, k000 to k002; each evicted write is in
// Pebble, the others wait for a flush. A read after that saves k003 from
// the next eviction, which takes k004 and the entries after it.
func TestWriteCacheSecondChance(t *testing.T) {
	cfg := testConfig(t, KindPebble)
	cfg.WriteCacheBytes = 20 * (writeCacheEntryOverhead + 16)
	st := open(t, cfg).core().st.(*pebbleStore)
	key := func(i int) []byte { return fmt.Appendf(nil, "\x00k-%03d", i) }
	for i := range 22 {
		must(t, st.cachedWrite(1, key(i), []byte{'a' + byte(i)}, true))
	}
	for i := range 22 {
		_, _, err := st.cachedGet(1, key(i))
		must(t, err)
	}
	must(t, st.cachedWrite(1, key(22), []byte("w"), true))
	cached := func() []int {
		var in []int
		for i := range 30 {
			if st.cache.contains(1, key(i)) {
				in = append(in, i)
			}
		}
		return in
	}
	inPebble := func() []int {
		var in []int
		for i := range 30 {
			if _, closer, err := st.db.Get(key(i)); err == nil {
				must(t, closer.Close())
				in = append(in, i)
			}
		}
		return in
	}
	seq := func(lo, hi int) []int {
		var s []int
		for i := lo; i < hi; i++ {
			s = append(s, i)
		}
		return s
	}
	if got, want := cached(), seq(3, 22); !slices.Equal(got, want) {
		t.Fatalf("cached after the first eviction %v, want %v", got, want)
	}
	if got, want := inPebble(), []int{0, 1, 2, 22}; !slices.Equal(got, want) {
		t.Fatalf("in pebble after the first eviction %v, want %v", got, want)
	}
	if n, b := len(st.cache.entries), st.cache.bytes; n != 19 || b != 19*71 {
		t.Fatalf("%d entries of %d bytes cached, want 19 of %d", n, b, 19*71)
	}
	_, _, err := st.cachedGet(1, key(3))
	must(t, err)
	for i := 23; i < 27; i++ { // the 4th new write overflows: 23 entries of 71 bytes
		must(t, st.cachedWrite(1, key(i), []byte("n"), true))
	}
	// The walk starts at k003 (read: moved to the front) and evicts k004
	// to k007 (284 bytes: 1633 -> 1349, at most 1400).
	if got, want := cached(), append(append([]int{3}, seq(8, 22)...), seq(23, 27)...); !slices.Equal(got, want) {
		t.Fatalf("cached after the second eviction %v, want %v", got, want)
	}
	if got, want := inPebble(), []int{0, 1, 2, 4, 5, 6, 7, 22}; !slices.Equal(got, want) {
		t.Fatalf("in pebble after the second eviction %v, want %v", got, want)
	}
	must(t, st.flushCache())
	for i := range 27 {
		v, found, err := st.cachedGet(1, key(i))
		must(t, err)
		want := string([]byte{'a' + byte(i)})
		switch {
		case i == 22:
			want = "w"
		case i > 22:
			want = "n"
		}
		if !found || string(v) != want {
			t.Fatalf("key %d = %q (found %v), want %q", i, v, found, want)
		}
	}
}

// TestWriteCacheKeyLengths: keys kept in the entry's allocation (up to
// inlineKeyLen bytes) and longer ones read, write, evict and flush alike.
func TestWriteCacheKeyLengths(t *testing.T) {
	cfg := testConfig(t, KindPebble)
	cfg.WriteCacheBytes = 8 * (writeCacheEntryOverhead + 64)
	st := open(t, cfg).core().st.(*pebbleStore)
	key := func(n int) []byte { return append([]byte{0}, strings.Repeat(fmt.Sprint(n%10), n-1)...) }
	for n := 1; n <= 2*inlineKeyLen; n++ {
		must(t, st.cachedWrite(1, key(n), fmt.Appendf(nil, "v%d", n), true))
	}
	must(t, st.flushCache())
	for n := 1; n <= 2*inlineKeyLen; n++ {
		v, found, err := st.cachedGet(1, key(n))
		must(t, err)
		if !found || string(v) != fmt.Sprintf("v%d", n) {
			t.Fatalf("key of %d bytes = %q (found %v), want v%d", n, v, found, n)
		}
		if e, ok := st.cache.entries[string(key(n))]; ok && e.key != string(key(n)) {
			t.Fatalf("entry of the key of %d bytes holds key %q", n, e.key)
		}
	}
}

// TestWriteCacheSkipsDeleteOfAbsentKey: a value created and cleared
// between two flushes reaches Pebble not at all when a read had found
// the key absent (its delete is not written: nothing goes to Pebble's
// WAL), and as a delete when nothing said Pebble lacks it; either way
// the key reads absent, before and after a reopen.
func TestWriteCacheSkipsDeleteOfAbsentKey(t *testing.T) {
	cfg := testConfig(t, KindPebble)
	b := open(t, cfg)
	v := must1(GetValueState(b, ckptValue))(t)
	ps := b.core().st.(*pebbleStore)
	walIn := func() uint64 { return ps.db.Metrics().WAL.BytesIn }
	flush := func() {
		t.Helper()
		must(t, ps.flushCache())
	}
	flush()
	base := walIn()
	b.SetCurrentKey(u64key(1))
	if _, ok, err := v.Value(); err != nil || ok {
		t.Fatalf("key 1: %v, %v before any write", ok, err)
	}
	must(t, v.Update(7))
	must(t, v.Clear())
	flush()
	if got := walIn(); got != base {
		t.Errorf("a value read absent, written and cleared wrote %d WAL bytes, want none", got-base)
	}
	b.SetCurrentKey(u64key(2))
	must(t, v.Update(7)) // no read: the cache does not know Pebble lacks it
	must(t, v.Clear())
	flush()
	if got := walIn(); got == base {
		t.Error("a value written and cleared without a read wrote nothing; want its delete written")
	}
	b.SetCurrentKey(u64key(1))
	must(t, v.Update(8)) // present again after the skipped delete, then written
	flush()
	must(t, v.Clear()) // now Pebble holds it: the delete must be written
	flush()
	must(t, b.Close())
	rb := open(t, cfg)
	rv := must1(GetValueState(rb, ckptValue))(t)
	for _, k := range []uint64{1, 2} {
		rb.SetCurrentKey(u64key(k))
		if got, ok, err := rv.Value(); err != nil || ok {
			t.Errorf("key %d after reopen: %d, %v, %v; want absent", k, got, ok, err)
		}
	}
}

// TestTimerFiredBeforeFlushNotWritten: a timer registered and fired (or
// deleted) between two flushes writes nothing to Pebble, and one that
// was flushed is deleted for good: after a reopen only the timer still
// registered is loaded.
func TestTimerFiredBeforeFlushNotWritten(t *testing.T) {
	cfg := testConfig(t, KindPebble)
	b := open(t, cfg)
	q, err := NewTimerQueue(b)
	must(t, err)
	ps := b.core().st.(*pebbleStore)
	walIn := func() uint64 { return ps.db.Metrics().WAL.BytesIn }
	must(t, ps.flushCache())
	base := walIn()
	for i := range 10 {
		must1(q.Register(EventTime, u64key(uint64(i)), int64(100+i)))(t)
	}
	must(t, q.Delete(EventTime, u64key(9), 109))
	for range 9 {
		if _, ok, err := q.PopDue(EventTime, 1000); err != nil || !ok {
			t.Fatalf("PopDue: %v, %v", ok, err)
		}
	}
	must(t, ps.flushCache())
	if got := walIn(); got != base {
		t.Errorf("10 timers registered and fired or deleted before a flush wrote %d WAL bytes, want none", got-base)
	}
	must1(q.Register(EventTime, u64key(1), 200))(t) // flushed, then fired: its delete is written
	must1(q.Register(EventTime, u64key(2), 300))(t) // still registered at the reopen
	must(t, ps.flushCache())
	if tm, ok, err := q.PopDue(EventTime, 250); err != nil || !ok || tm.Timestamp != 200 {
		t.Fatalf("PopDue at 250: %v, %v, %v", tm, ok, err)
	}
	must(t, b.Close())
	rb := open(t, cfg)
	rq, err := NewTimerQueue(rb)
	must(t, err)
	if tm, ok := rq.Peek(EventTime); !ok || tm.Timestamp != 300 || rq.Len(EventTime) != 1 {
		t.Errorf("after reopen: %v, %v, %d timers; want only the timer at 300", tm, ok, rq.Len(EventTime))
	}
}

// TestWriteCachePutColdKeepsHotEntries: entries written with PutCold join
// the write cache at its eviction end, so 400 of them through a cache with
// room for about 40 entries evict only each other: the ten values written
// before stay cached, while the same 400 writes with Put evict them. Every cold entry reads back its value
// (evicted ones from Pebble), also after a snapshot and restore; on the
// hashmap backend PutCold is Put.
func TestWriteCachePutColdKeepsHotEntries(t *testing.T) {
	md := MapStateDescriptor[string, int64]{Name: "m", KeySerializer: StringSerializer{}, ValueSerializer: Int64Serializer{}}
	run := func(t *testing.T, kind string, cold bool) (KeyedStateBackend, ValueState[int64], MapState[string, int64]) {
		cfg := testConfig(t, kind)
		cfg.WriteCacheBytes = 40 * (writeCacheEntryOverhead + 24)
		b := open(t, cfg)
		v := must1(GetValueState(b, ckptValue))(t)
		m := must1(GetMapState(b, md))(t)
		for i := range 10 {
			b.SetCurrentKey(u64key(uint64(i)))
			must(t, v.Update(int64(i)))
		}
		for i := range 400 {
			b.SetCurrentKey(u64key(uint64(i % 10)))
			put := m.Put
			if cold {
				put = m.(ColdPutter[string, int64]).PutCold
			}
			must(t, put(fmt.Sprintf("c%03d", i), int64(i)))
		}
		return b, v, m
	}
	readCold := func(b KeyedStateBackend, m MapState[string, int64]) {
		for i := range 400 {
			b.SetCurrentKey(u64key(uint64(i % 10)))
			got, ok, err := m.Get(fmt.Sprintf("c%03d", i))
			must(t, err)
			if !ok || got != int64(i) {
				t.Fatalf("cold entry %d = %d, %v; want %d", i, got, ok, i)
			}
		}
	}
	hotCached := func(b KeyedStateBackend, v ValueState[int64]) (n int) {
		st := b.(interface{ core() *backend }).core().st.(*pebbleStore)
		c := v.(*valueState[int64]).c
		for i := range 10 {
			b.SetCurrentKey(u64key(uint64(i)))
			k, err := c.stateKey(nil)
			must(t, err)
			if st.cache.contains(c.id, appendStateKey(nil, k)) {
				n++
			}
		}
		return n
	}
	t.Run("pebble", func(t *testing.T) {
		b, v, m := run(t, KindPebble, true)
		if n := hotCached(b, v); n != 10 {
			t.Fatalf("%d of the 10 hot values cached after 400 cold puts, want 10", n)
		}
		readCold(b, m)
		root := t.TempDir()
		ks := snapshotOf(t, b, filepath.Join(root, "1"), filepath.Join(root, "shared"))
		nb, err := OpenBackendRestored(testConfig(t, KindPebble), []RestoreHandle{{Handle: ks.Handle, Dir: filepath.Join(root, "1"), SharedDir: filepath.Join(root, "shared")}})
		must(t, err)
		t.Cleanup(func() { _ = nb.Close() })
		rv := must1(GetValueState(nb, ckptValue))(t)
		rm := must1(GetMapState(nb, md))(t)
		for i := range 400 {
			nb.SetCurrentKey(u64key(uint64(i % 10)))
			got, ok, err := rm.Get(fmt.Sprintf("c%03d", i))
			must(t, err)
			if !ok || got != int64(i) {
				t.Fatalf("restored cold entry %d = %d, %v; want %d", i, got, ok, i)
			}
		}
		for i := range 10 {
			nb.SetCurrentKey(u64key(uint64(i)))
			got, ok, err := rv.Value()
			must(t, err)
			if !ok || got != int64(i) {
				t.Fatalf("restored hot value %d = %d, %v", i, got, ok)
			}
		}
	})
	t.Run("pebble-put", func(t *testing.T) {
		b, v, m := run(t, KindPebble, false)
		if n := hotCached(b, v); n != 0 {
			t.Fatalf("%d of the 10 hot values cached after 400 puts, want 0 (evicted)", n)
		}
		readCold(b, m)
	})
	t.Run("hashmap", func(t *testing.T) {
		b, _, m := run(t, KindHashmap, true)
		readCold(b, m)
	})
}
