package state

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// heapStrings is a HeapSerializer of []string with the bytes of
// JSONSerializer[[]string] (the same name), counting its calls. A list
// holding "bad" cannot be serialized.
type heapStrings struct {
	appends, decodes, copies *atomic.Int64
}

func newHeapStrings() heapStrings {
	return heapStrings{new(atomic.Int64), new(atomic.Int64), new(atomic.Int64)}
}

var errBadItem = errors.New("bad item")

func (heapStrings) Name() string { return "json" }

func (h heapStrings) Append(dst []byte, v []string) ([]byte, error) {
	h.appends.Add(1)
	if slices.Contains(v, "bad") {
		return dst, errBadItem
	}
	return JSONSerializer[[]string]{}.Append(dst, v)
}

func (h heapStrings) Decode(b []byte) ([]string, error) {
	h.decodes.Add(1)
	return JSONSerializer[[]string]{}.Decode(b)
}

func (h heapStrings) Copy(v []string, _ [][]string) ([]string, error) {
	h.copies.Add(1)
	if slices.Contains(v, "bad") {
		return nil, errBadItem
	}
	return slices.Clone(v), nil
}

func (h heapStrings) AppendKept(dst []byte, v []string) ([]byte, error) { return h.Append(dst, v) }

func (heapStrings) View(v []string) []string { return slices.Clone(v) }

func (heapStrings) Size(v []string) int {
	n := 24
	for _, s := range v {
		n += 16 + len(s)
	}
	return n
}

// heapDesc is a map state kept decoded; refDesc the same state (name and
// bytes) serialized on every access.
func heapDesc(ser heapStrings) MapStateDescriptor[string, []string] {
	return MapStateDescriptor[string, []string]{Name: "lists", KeySerializer: StringSerializer{}, ValueSerializer: ser}
}

var refDesc = MapStateDescriptor[string, []string]{Name: "lists", KeySerializer: StringSerializer{}, ValueSerializer: JSONSerializer[[]string]{}}

// pebbleContents flushes b's write cache and returns every key and value
// of its key-group space as Pebble holds them.
func pebbleContents(t *testing.T, b KeyedStateBackend) map[string]string {
	t.Helper()
	st := b.(*pebbleBackend).st
	must(t, st.flushCache())
	it, err := st.db.NewIter(&pebble.IterOptions{LowerBound: keyGroupsStart, UpperBound: keyGroupsEnd})
	must(t, err)
	out := map[string]string{}
	for ok := it.First(); ok; ok = it.Next() {
		out[string(it.Key())] = string(it.Value())
	}
	must(t, it.Close())
	return out
}

// TestHeapMapStateKeepsValuesDecoded: on Pebble a HeapSerializer's values
// are neither serialized on Put nor decoded on Get while the write cache
// holds them; a flush serializes each dirty entry once, and the entry stays
// decoded after it. On hashmap, and with TTL, every Put serializes.
func TestHeapMapStateKeepsValuesDecoded(t *testing.T) {
	ser := newHeapStrings()
	b := open(t, testConfig(t, KindPebble))
	s := must1(GetMapState(b, heapDesc(ser)))(t)
	b.SetCurrentKey([]byte("k"))
	for i := range 3 {
		must(t, s.Put("r", []string{fmt.Sprint(i)}))
	}
	must(t, s.Put("q", []string{"x"}))
	if v, ok, err := s.Get("r"); err != nil || !ok || !slices.Equal(v, []string{"2"}) {
		t.Fatalf("Get = %q %v %v", v, ok, err)
	}
	if a, d, c := ser.appends.Load(), ser.decodes.Load(), ser.copies.Load(); a != 0 || d != 0 || c != 4 {
		t.Fatalf("before the flush: %d appends, %d decodes, %d copies; want 0, 0, 4", a, d, c)
	}
	if got := storedEntries(t, b); got != 2 {
		t.Fatalf("stored entries %d, want 2", got)
	}
	if a := ser.appends.Load(); a != 2 {
		t.Fatalf("the flush serialized %d values, want 2 (one per dirty entry)", a)
	}
	v, ok, err := s.Get("q")
	if err != nil || !ok || !slices.Equal(v, []string{"x"}) || ser.decodes.Load() != 0 {
		t.Fatalf("Get after the flush = %q %v %v, %d decodes", v, ok, err, ser.decodes.Load())
	}
	if ok := must1(s.Contains("q"))(t); !ok {
		t.Fatal("Contains(q) false")
	}
	must(t, s.Remove("q"))
	if ok := must1(s.Contains("q"))(t); ok {
		t.Fatal("Contains(q) after Remove")
	}

	for _, tc := range []struct {
		name string
		cfg  BackendConfig
		ttl  bool
	}{{"hashmap", testConfig(t, KindHashmap), false}, {"pebble with ttl", testConfig(t, KindPebble), true}, {"pebble without cache", func() BackendConfig {
		c := testConfig(t, KindPebble)
		c.WriteCacheBytes = -1
		return c
	}(), false}} {
		ser := newHeapStrings()
		b := open(t, tc.cfg)
		d := heapDesc(ser)
		if tc.ttl {
			d.TTL = &StateTtlConfig{TTL: 1 << 40, DisableCleanupInBackground: true}
		}
		s := must1(GetMapState(b, d))(t)
		b.SetCurrentKey([]byte("k"))
		must(t, s.Put("r", []string{"a"}))
		if v := get(t, s, "r"); !slices.Equal(v, []string{"a"}) || ser.appends.Load() != 1 || ser.decodes.Load() != 1 || ser.copies.Load() != 0 {
			t.Fatalf("%s: Get = %q after %d appends, %d decodes, %d copies; want 1, 1, 0", tc.name, v, ser.appends.Load(), ser.decodes.Load(), ser.copies.Load())
		}
	}
}

// TestHeapMapStateAliasing: a value Get returned is not changed by later
// Puts nor by changes to what was put, and changing it (an element, an
// append) does not change the state.
func TestHeapMapStateAliasing(t *testing.T) {
	b := open(t, testConfig(t, KindPebble))
	s := must1(GetMapState(b, heapDesc(newHeapStrings())))(t)
	b.SetCurrentKey([]byte("k"))
	put := []string{"a", "b"}
	must(t, s.Put("r", put))
	put[0] = "changed"
	got := get(t, s, "r")
	if !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("Get = %q after the put slice changed", got)
	}
	must(t, s.Put("r", append(got, "c")))
	if !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("an earlier Get's value changed to %q by a Put", got)
	}
	got2 := get(t, s, "r")
	got2[0] = "x"
	_ = append(got2[:1], "y")
	if now := get(t, s, "r"); !slices.Equal(now, []string{"a", "b", "c"}) {
		t.Fatalf("state %q after changes to a Get's value", now)
	}
}

// TestHeapMapStatePutError: a value the serializer refuses fails the Put
// (Copy reports what Append would) and leaves the stored value as it was.
func TestHeapMapStatePutError(t *testing.T) {
	b := open(t, testConfig(t, KindPebble))
	s := must1(GetMapState(b, heapDesc(newHeapStrings())))(t)
	b.SetCurrentKey([]byte("k"))
	must(t, s.Put("r", []string{"a"}))
	if err := s.Put("r", []string{"bad"}); !errors.Is(err, errBadItem) {
		t.Fatalf("Put of a bad value: %v", err)
	}
	if v := get(t, s, "r"); !slices.Equal(v, []string{"a"}) {
		t.Fatalf("Get = %q after the failed Put", v)
	}
}

// TestHeapMapStateMatchesSerialized runs the same random Puts, Removes and
// Gets over 300 keys on a state kept decoded (with a write cache big
// enough for everything, and one of 4 KiB that evicts all the time) and on
// the same state serialized on every access; every Get returns the same,
// Pebble holds the same bytes after every flush, a bound handle
// (ApplyToAllKeys) reads the same, and so do a checkpoint's restore and
// the reopened directory.
func TestHeapMapStateMatchesSerialized(t *testing.T) {
	for _, cacheBytes := range []int{0, 4 << 10} {
		t.Run(fmt.Sprintf("cache=%d", cacheBytes), func(t *testing.T) {
			cfg := testConfig(t, KindPebble)
			cfg.WriteCacheBytes = cacheBytes
			hb := open(t, cfg)
			rb := open(t, testConfig(t, KindPebble))
			hs := must1(GetMapState(hb, heapDesc(newHeapStrings())))(t)
			rs := must1(GetMapState(rb, refDesc))(t)
			rng := rand.New(rand.NewPCG(3, 4))
			for i := range 20000 {
				key := []byte(fmt.Sprintf("key-%03d", rng.IntN(300)))
				uk := fmt.Sprintf("r%d", rng.IntN(4))
				hb.SetCurrentKey(key)
				rb.SetCurrentKey(key)
				hv, hok, herr := hs.Get(uk)
				rv, rok, rerr := rs.Get(uk)
				if herr != nil || rerr != nil || hok != rok || !slices.Equal(hv, rv) || (hv == nil) != (rv == nil) {
					t.Fatalf("op %d: Get(%s/%s) = %q %v %v, serialized %q %v %v", i, key, uk, hv, hok, herr, rv, rok, rerr)
				}
				switch op := rng.IntN(10); {
				case op < 2:
					must(t, hs.Remove(uk))
					must(t, rs.Remove(uk))
				case op < 3:
					must(t, hs.Put(uk, []string{}))
					must(t, rs.Put(uk, []string{}))
				default:
					v := append(hv, fmt.Sprint(i))
					must(t, hs.Put(uk, v))
					must(t, rs.Put(uk, append(rv, fmt.Sprint(i))))
					v[len(v)-1] = "changed after the put"
				}
				if i%2500 == 2499 {
					if h, r := pebbleContents(t, hb), pebbleContents(t, rb); !maps.Equal(h, r) {
						t.Fatalf("op %d: Pebble holds %d entries, serialized %d, or other bytes", i, len(h), len(r))
					}
				}
			}
			want := pebbleContents(t, rb)
			if h := pebbleContents(t, hb); !maps.Equal(h, want) || len(want) == 0 {
				t.Fatalf("Pebble holds %d entries, serialized %d, or other bytes", len(h), len(want))
			}
			// Decoded entries read as bytes by bound handles.
			for _, k := range []string{"key-000", "key-001"} {
				hb.SetCurrentKey([]byte(k))
				must(t, hs.Put("r9", []string{k}))
			}
			seen := 0
			must(t, ApplyToAllKeys(hb, heapDesc(newHeapStrings()), func(key []byte, s MapState[string, []string]) error {
				if k := string(key); k == "key-000" || k == "key-001" {
					v, ok, err := s.Get("r9")
					if err != nil || !ok || !slices.Equal(v, []string{k}) {
						return fmt.Errorf("bound Get(%s/r9) = %q %v %v", k, v, ok, err)
					}
					seen++
				}
				return nil
			}))
			if seen != 2 {
				t.Fatalf("ApplyToAllKeys saw %d of the 2 keys", seen)
			}
			for _, k := range []string{"key-000", "key-001"} {
				hb.SetCurrentKey([]byte(k))
				must(t, hs.Remove("r9"))
			}
			root := t.TempDir()
			ks := snapshotOf(t, hb, filepath.Join(root, "chk"), "")
			restored, err := OpenBackendRestored(testConfig(t, KindPebble), []RestoreHandle{{Handle: ks.Handle, Dir: filepath.Join(root, "chk")}})
			must(t, err)
			if got := pebbleContents(t, restored); !maps.Equal(got, want) {
				t.Fatalf("restored %d entries, serialized %d, or other bytes", len(got), len(want))
			}
			must(t, restored.Close())
			must(t, hb.Close())
			reopened := open(t, cfg)
			if got := pebbleContents(t, reopened); !maps.Equal(got, want) {
				t.Fatalf("reopened %d entries, serialized %d, or other bytes", len(got), len(want))
			}
		})
	}
}

// get returns the value of uk, failing the test on an error or absence.
func get(t *testing.T, s MapState[string, []string], uk string) []string {
	t.Helper()
	v, ok, err := s.Get(uk)
	if err != nil || !ok {
		t.Fatalf("Get(%s) = %q %v %v", uk, v, ok, err)
	}
	return v
}

// TestHeapValueStateMatchesSerialized: a ValueState whose serializer is a
// HeapSerializer keeps its values decoded on Pebble (no serialization on
// Update, no decoding on Value while cached) and Pebble, a snapshot's
// restore and a reopened directory hold exactly the bytes of the same
// state serialized on every access, after random updates, clears and
// reads with a cache that keeps everything and with one that evicts all
// the time. ApplyToAllValueKeys reads the decoded values through bound
// handles; HasState knows the state once registered.
func TestHeapValueStateMatchesSerialized(t *testing.T) {
	for _, cacheBytes := range []int{0, 4 << 10} {
		t.Run(fmt.Sprintf("cache=%d", cacheBytes), func(t *testing.T) {
			cfg := testConfig(t, KindPebble)
			cfg.WriteCacheBytes = cacheBytes
			hb := open(t, cfg)
			rb := open(t, testConfig(t, KindPebble))
			ser := newHeapStrings()
			if HasState(hb, "values") {
				t.Fatal("HasState before the state was registered")
			}
			hs := must1(GetValueState(hb, ValueStateDescriptor[[]string]{Name: "values", Serializer: ser}))(t)
			rs := must1(GetValueState(rb, ValueStateDescriptor[[]string]{Name: "values", Serializer: JSONSerializer[[]string]{}}))(t)
			if !HasState(hb, "values") || HasState(hb, "other") {
				t.Fatal("HasState: want values only")
			}
			rng := rand.New(rand.NewPCG(5, 6))
			for i := range 20000 {
				key := []byte(fmt.Sprintf("key-%03d", rng.IntN(300)))
				hb.SetCurrentKey(key)
				rb.SetCurrentKey(key)
				hv, hok, herr := hs.Value()
				rv, rok, rerr := rs.Value()
				if herr != nil || rerr != nil || hok != rok || !slices.Equal(hv, rv) {
					t.Fatalf("op %d: Value(%s) = %q %v %v, serialized %q %v %v", i, key, hv, hok, herr, rv, rok, rerr)
				}
				if i == 1000 && cacheBytes == 0 {
					if a, d := ser.appends.Load(), ser.decodes.Load(); a != 0 || d != 0 {
						t.Fatalf("after 1000 operations on the cache: %d appends, %d decodes; want none", a, d)
					}
				}
				switch op := rng.IntN(10); {
				case op < 2:
					must(t, hs.Clear())
					must(t, rs.Clear())
				default:
					v := append(hv, fmt.Sprint(i))
					must(t, hs.Update(v))
					must(t, rs.Update(append(rv, fmt.Sprint(i))))
					v[len(v)-1] = "changed after the update"
				}
				if i%2500 == 2499 {
					if h, r := pebbleContents(t, hb), pebbleContents(t, rb); !maps.Equal(h, r) {
						t.Fatalf("op %d: Pebble holds %d entries, serialized %d, or other bytes", i, len(h), len(r))
					}
				}
			}
			want := pebbleContents(t, rb)
			if h := pebbleContents(t, hb); !maps.Equal(h, want) || len(want) == 0 {
				t.Fatalf("Pebble holds %d entries, serialized %d, or other bytes", len(h), len(want))
			}
			hb.SetCurrentKey([]byte("key-000"))
			must(t, hs.Update([]string{"bound"}))
			seen := 0
			must(t, ApplyToAllValueKeys(hb, ValueStateDescriptor[[]string]{Name: "values", Serializer: ser}, func(key []byte, s ValueState[[]string]) error {
				seen++
				if string(key) == "key-000" {
					if v, ok, err := s.Value(); err != nil || !ok || !slices.Equal(v, []string{"bound"}) {
						return fmt.Errorf("bound Value(key-000) = %q %v %v", v, ok, err)
					}
				}
				return nil
			}))
			if wantKeys := len(pebbleContents(t, hb)); seen != wantKeys {
				t.Fatalf("ApplyToAllValueKeys saw %d keys, want %d", seen, wantKeys)
			}
			hb.SetCurrentKey([]byte("key-000"))
			rb.SetCurrentKey([]byte("key-000"))
			must(t, hs.Update([]string{"last"}))
			must(t, rs.Update([]string{"last"}))
			want = pebbleContents(t, rb)
			root := t.TempDir()
			ks := snapshotOf(t, hb, filepath.Join(root, "chk"), "")
			restored, err := OpenBackendRestored(testConfig(t, KindPebble), []RestoreHandle{{Handle: ks.Handle, Dir: filepath.Join(root, "chk")}})
			must(t, err)
			if got := pebbleContents(t, restored); !maps.Equal(got, want) {
				t.Fatalf("restored %d entries, serialized %d, or other bytes", len(got), len(want))
			}
			if !HasState(restored, "values") {
				t.Fatal("HasState false after the restore")
			}
			must(t, restored.Close())
			must(t, hb.Close())
			reopened := open(t, cfg)
			if got := pebbleContents(t, reopened); !maps.Equal(got, want) {
				t.Fatalf("reopened %d entries, serialized %d, or other bytes", len(got), len(want))
			}
		})
	}
}

// heapResizing is heapStrings with HeapResizer: Resize counts its calls
// and returns Size(v) plus extra (a test that the cache counts what
// Resize returns), Size counts its calls.
type heapResizing struct {
	heapStrings
	resizes, sizes *atomic.Int64
	extra          int
}

func (h heapResizing) Size(v []string) int {
	h.sizes.Add(1)
	return h.heapStrings.Size(v)
}

func (h heapResizing) Resize(old []string, oldSize int, v []string) int {
	h.resizes.Add(1)
	return h.heapStrings.Size(v) + h.extra
}

// TestHeapResizerSizesWrites: a write of a key whose decoded value the
// write cache holds is sized with the serializer's Resize (HeapResizer),
// not Size; a key written first, or held serialized, with Size; the
// cache's byte count is the sum of its entries' sizes as so given.
func TestHeapResizerSizesWrites(t *testing.T) {
	ser := heapResizing{heapStrings: newHeapStrings(), resizes: new(atomic.Int64), sizes: new(atomic.Int64), extra: 1000}
	b := open(t, testConfig(t, KindPebble))
	s := must1(GetValueState(b, ValueStateDescriptor[[]string]{Name: "values", Serializer: ser}))(t)
	c := b.(*pebbleBackend).st.cache
	b.SetCurrentKey([]byte("k"))
	must(t, s.Update([]string{"a"}))
	if r, z := ser.resizes.Load(), ser.sizes.Load(); r != 0 || z != 1 {
		t.Fatalf("first write: %d resizes, %d sizes; want 0, 1", r, z)
	}
	v, _, err := s.Value()
	must(t, err)
	must(t, s.Update(append(v, "b")))
	must(t, s.Update([]string{"c"}))
	if r, z := ser.resizes.Load(), ser.sizes.Load(); r != 2 || z != 1 {
		t.Fatalf("two writes over the cached value: %d resizes, %d sizes; want 2, 1", r, z)
	}
	must(t, s.Clear())
	must(t, s.Update([]string{"d"}))
	if r, z := ser.resizes.Load(), ser.sizes.Load(); r != 2 || z != 2 {
		t.Fatalf("a write after a clear: %d resizes, %d sizes; want 2, 2", r, z)
	}
	b.SetCurrentKey([]byte("j"))
	must(t, s.Update([]string{"e", "f"}))
	must(t, s.Update([]string{"g"}))
	c.mu.Lock()
	defer c.mu.Unlock()
	want := 0
	for _, e := range c.entries {
		want += e.size()
	}
	if c.bytes != want {
		t.Fatalf("cache bytes %d, entries' sizes %d", c.bytes, want)
	}
	ej := c.entries[string(appendStateKey(nil, must1(s.(*valueState[[]string]).c.stateKey(nil))(t)))]
	if ej == nil || ej.osize != ser.heapStrings.Size([]string{"g"})+1000 {
		t.Fatalf("entry of j: %+v, want the size Resize gave", ej)
	}
}
