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
// (write, delete, read-through fill, merge forget, flush, drop) over 40
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
				case r < 90: // a merge: the store forgets the key, then writes Pebble
					must(t, st.cache.forget(st.db, k))
					v := fmt.Sprintf("m%d", op)
					must(t, st.db.Set(k, []byte(v), pebble.NoSync))
					model[string(k)] = v
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
