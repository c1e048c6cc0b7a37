package state

import (
	"fmt"
	"maps"
	"slices"
	"testing"
)

// sidesBytes is benchSidesSerializer's encoding of v.
func sidesBytes(v benchSides) string {
	b, _ := benchSidesSerializer{}.Append(nil, v)
	return string(b)
}

func sidesEqual(a, b benchSides) bool {
	return slices.Equal(a[0], b[0]) && slices.Equal(a[1], b[1])
}

// TestHeapValueWritesInPlace: a decoded value in the write cache is
// overwritten in place by the next Update of its key (no allocation per
// read-modify-write of a cached key), and that never shows: a value Value
// returned keeps what it held, each key and each state keeps its own
// value, a bound handle (the async and snapshot readers) and Pebble after
// a flush see the last write, also after the checkpoint's flush made the
// entry clean, after a Clear, and with a cache that evicts all the time.
func TestHeapValueWritesInPlace(t *testing.T) {
	for _, cacheBytes := range []int{0, 2 << 10} {
		t.Run(fmt.Sprintf("cache=%d", cacheBytes), func(t *testing.T) {
			cfg := testConfig(t, KindPebble)
			cfg.WriteCacheBytes = cacheBytes
			b := open(t, cfg)
			s := must1(GetValueState(b, ValueStateDescriptor[benchSides]{Name: "sides", Serializer: benchSidesSerializer{}}))(t)
			o := must1(GetValueState(b, ValueStateDescriptor[benchSides]{Name: "other", Serializer: benchSidesSerializer{}}))(t)
			value := func(st ValueState[benchSides], key string) (benchSides, bool) {
				t.Helper()
				b.SetCurrentKey([]byte(key))
				v, ok, err := st.Value()
				must(t, err)
				return v, ok
			}
			update := func(st ValueState[benchSides], key string, v benchSides) {
				t.Helper()
				b.SetCurrentKey([]byte(key))
				must(t, st.Update(v))
			}
			update(s, "a", benchSides{{1}, {2}})
			update(s, "b", benchSides{{3}, {4}})
			update(o, "a", benchSides{{7}, nil})
			held, ok := value(s, "a")
			if !ok || !sidesEqual(held, benchSides{{1}, {2}}) {
				t.Fatalf("Value(a) = %v %v, want [[1] [2]]", held, ok)
			}
			update(s, "a", benchSides{{5}, {6, 6}})
			if !sidesEqual(held, benchSides{{1}, {2}}) {
				t.Fatalf("a value Value returned changed to %v after an Update of its key", held)
			}
			want := map[string]benchSides{"a": {{5}, {6, 6}}, "b": {{3}, {4}}}
			check := func(when string) {
				t.Helper()
				for _, key := range []string{"a", "b", "c"} {
					v, ok := value(s, key)
					w, wok := want[key]
					if ok != wok || !sidesEqual(v, w) {
						t.Fatalf("%s: Value(%s) = %v %v, want %v %v", when, key, v, ok, w, wok)
					}
				}
				if v, ok := value(o, "a"); !ok || !sidesEqual(v, benchSides{{7}, nil}) {
					t.Fatalf("%s: the other state's Value(a) = %v %v, want [[7] []]", when, v, ok)
				}
				bound := map[string]string{}
				must(t, ApplyToAllValueKeys(b, ValueStateDescriptor[benchSides]{Name: "sides", Serializer: benchSidesSerializer{}}, func(key []byte, st ValueState[benchSides]) error {
					v, ok, err := st.Value()
					if err != nil || !ok {
						return fmt.Errorf("bound Value(%s) = %v %v", key, ok, err)
					}
					bound[string(key)] = sidesBytes(v)
					return nil
				}))
				wantBytes := map[string]string{}
				for k, v := range want {
					wantBytes[k] = sidesBytes(v)
				}
				if !maps.Equal(bound, wantBytes) {
					t.Fatalf("%s: bound handles read %q, want %q", when, bound, wantBytes)
				}
				got := map[string]string{}
				for k, v := range pebbleContents(t, b) {
					sk, _, err := parseStateKey([]byte(k))
					must(t, err)
					if sk.id == b.core().states["sides"].core.id {
						got[string(sk.key)] = v
					}
				}
				if !maps.Equal(got, wantBytes) {
					t.Fatalf("%s: Pebble holds %q, want %q", when, got, wantBytes)
				}
			}
			check("after the writes")
			// The flush left the entries clean: an in-place write must
			// make its entry dirty again and reach Pebble.
			held, _ = value(s, "b")
			update(s, "b", benchSides{{8}, {9}})
			want["b"] = benchSides{{8}, {9}}
			if !sidesEqual(held, benchSides{{3}, {4}}) {
				t.Fatalf("a value Value returned changed to %v", held)
			}
			check("after a write over a flushed entry")
			b.SetCurrentKey([]byte("a"))
			must(t, s.Clear())
			delete(want, "a")
			check("after a Clear")
			update(s, "a", benchSides{nil, {10}})
			want["a"] = benchSides{nil, {10}}
			for i := range 100 { // an eviction (the small cache) between the read and the write
				held, _ = value(s, "a")
				update(o, fmt.Sprintf("filler-%03d", i), benchSides{{int64(i)}, {int64(i)}})
				update(s, "a", benchSides{held[1], held[0]})
				want["a"] = benchSides{held[1], held[0]}
			}
			check("after writes with evictions")
		})
	}
}

// TestCachedValueStateHint: a ValueState with a plain serializer on
// Pebble with the write cache keeps its current key's Pebble key and the
// entry Value found for the Update after it; neither is ever used for
// another key, another state, or an entry evicted or dropped meanwhile.
func TestCachedValueStateHint(t *testing.T) {
	cfg := testConfig(t, KindPebble)
	cfg.WriteCacheBytes = 2 << 10
	b := open(t, cfg)
	s := must1(GetValueState(b, ValueStateDescriptor[int64]{Name: "n", Serializer: Int64Serializer{}}))(t)
	o := must1(GetValueState(b, ValueStateDescriptor[int64]{Name: "o", Serializer: Int64Serializer{}}))(t)
	want := map[string]int64{}
	wantO := map[string]int64{}
	set := func(st ValueState[int64], m map[string]int64, key string, v int64) {
		t.Helper()
		b.SetCurrentKey([]byte(key))
		must(t, st.Update(v))
		m[key] = v
	}
	get := func(st ValueState[int64], key string) int64 {
		t.Helper()
		b.SetCurrentKey([]byte(key))
		v, _, err := st.Value()
		must(t, err)
		return v
	}
	check := func(when string) {
		t.Helper()
		for _, st := range []struct {
			s ValueState[int64]
			m map[string]int64
		}{{s, want}, {o, wantO}} {
			for _, key := range []string{"a", "b", "c"} {
				b.SetCurrentKey([]byte(key))
				v, ok, err := st.s.Value()
				must(t, err)
				w, wok := st.m[key]
				if v != w || ok != wok {
					t.Fatalf("%s: Value(%s) = %d %v, want %d %v", when, key, v, ok, w, wok)
				}
			}
		}
		got := map[string]int64{}
		ids := map[uint32]string{b.core().states["n"].core.id: "n", b.core().states["o"].core.id: "o"}
		for k, v := range pebbleContents(t, b) {
			sk, _, err := parseStateKey([]byte(k))
			must(t, err)
			if name := ids[sk.id]; name != "" {
				n, err := Int64Serializer{}.Decode([]byte(v))
				must(t, err)
				got[name+"/"+string(sk.key)] = n
			}
		}
		all := map[string]int64{}
		for k, v := range want {
			all["n/"+k] = v
		}
		for k, v := range wantO {
			all["o/"+k] = v
		}
		if !maps.Equal(got, all) {
			t.Fatalf("%s: Pebble holds %v, want %v", when, got, all)
		}
	}
	set(s, want, "a", 1)
	set(s, want, "b", 2)
	get(s, "a")           // the hint is a's entry
	set(s, want, "b", 3)  // another key
	set(o, wantO, "a", 4) // another state, same key
	set(s, want, "a", get(s, "a")+10)
	check("after the writes")
	get(s, "a")
	must(t, b.(*pebbleBackend).st.dropCache()) // a drop between the read and the write
	set(s, want, "a", 20)
	check("after a drop")
	get(s, "b")
	must(t, b.(*pebbleBackend).st.flushCache()) // a checkpoint's flush: the entry stays, clean
	set(s, want, "b", 30)
	check("after a flush")
	for i := range 100 { // evictions between the read and the write (a 2 KiB cache)
		v := get(s, "c")
		set(o, wantO, fmt.Sprintf("filler-%03d", i), int64(i))
		set(s, want, "c", v+1)
	}
	if want["c"] != 100 {
		t.Fatalf("c = %d after 100 increments, want 100", want["c"])
	}
	check("after writes with evictions")
	b.SetCurrentKey([]byte("a"))
	must(t, s.Clear())
	delete(want, "a")
	check("after a Clear")
}

// TestCachedValueStateAllocs counts (testing.AllocsPerRun, no timing)
// what a read-modify-write of a cached key costs: with a HeapSerializer
// nothing (the decoded value overwritten in place); with a plain
// serializer one allocation, the read's copy of the value's bytes (the
// Pebble key and the written bytes are the handle's reused buffers).
func TestCachedValueStateAllocs(t *testing.T) {
	b := openCachedPebble(t, 0)
	h := must1(GetValueState(b, ValueStateDescriptor[benchSides]{Name: "sides", Serializer: benchSidesSerializer{}}))(t)
	n := must1(GetValueState(b, ValueStateDescriptor[int64]{Name: "n", Serializer: Int64Serializer{}}))(t)
	keys := [][]byte{[]byte("a"), []byte("b")}
	for _, k := range keys {
		b.SetCurrentKey(k)
		must(t, h.Update(benchSides{{1}, {2}}))
		must(t, n.Update(1))
	}
	i := 0
	heapAllocs := testing.AllocsPerRun(100, func() {
		i++
		b.SetCurrentKey(keys[i%2])
		v, _, err := h.Value()
		if err == nil {
			err = h.Update(benchSides{v[1], v[0]})
		}
		if err != nil {
			t.Fatal(err)
		}
	})
	plainAllocs := testing.AllocsPerRun(100, func() {
		i++
		b.SetCurrentKey(keys[i%2])
		v, _, err := n.Value()
		if err == nil {
			err = n.Update(v + 1)
		}
		if err != nil {
			t.Fatal(err)
		}
	})
	b.SetCurrentKey(keys[0])
	v, _, err := n.Value()
	must(t, err)
	b.SetCurrentKey(keys[1])
	w, _, err := n.Value()
	must(t, err)
	if v+w != 2+101 { // AllocsPerRun runs the function once more than it counts
		t.Fatalf("the counts add up to %d, want %d", v+w, 2+101)
	}
	if raceEnabled {
		return // the race detector allocates on its own
	}
	if heapAllocs != 0 || plainAllocs != 1 {
		t.Fatalf("read-modify-write of a cached key: %v allocations decoded, %v serialized; want 0 and 1", heapAllocs, plainAllocs)
	}
}

// TestCachedMapStateHint: a MapState with plain serializers on Pebble
// with the write cache builds its entries' Pebble keys and values in the
// handle's buffers and hands the entry a read found to the write of the
// same user key after it; a read-modify-write of a cached entry costs one
// allocation (the read's copy of the value). The entry is never used for
// another user key, current key or state, nor after an eviction.
func TestCachedMapStateHint(t *testing.T) {
	cfg := testConfig(t, KindPebble)
	cfg.WriteCacheBytes = 2 << 10
	b := open(t, cfg)
	desc := MapStateDescriptor[int64, int64]{Name: "m", KeySerializer: Int64Serializer{}, ValueSerializer: Int64Serializer{}}
	m := must1(GetMapState(b, desc))(t)
	o := must1(GetMapState(b, MapStateDescriptor[int64, int64]{Name: "o", KeySerializer: Int64Serializer{}, ValueSerializer: Int64Serializer{}}))(t)
	want := map[string]map[int64]int64{}
	put := func(st MapState[int64, int64], key string, uk, v int64) {
		t.Helper()
		b.SetCurrentKey([]byte(key))
		must(t, st.Put(uk, v))
		if st == m {
			if want[key] == nil {
				want[key] = map[int64]int64{}
			}
			want[key][uk] = v
		}
	}
	get := func(key string, uk int64) int64 {
		t.Helper()
		b.SetCurrentKey([]byte(key))
		v, _, err := m.Get(uk)
		must(t, err)
		return v
	}
	check := func(when string) {
		t.Helper()
		for _, key := range []string{"a", "b", "c"} {
			b.SetCurrentKey([]byte(key))
			got := map[int64]int64{}
			for e, err := range m.Entries() { // a scan: what Pebble holds after the flush
				must(t, err)
				got[e.Key] = e.Value
			}
			if !maps.Equal(got, want[key]) {
				t.Fatalf("%s: entries of %s = %v, want %v", when, key, got, want[key])
			}
			for uk := range int64(3) {
				v, ok, err := m.Get(uk)
				must(t, err)
				w, wok := want[key][uk]
				if v != w || ok != wok {
					t.Fatalf("%s: Get(%s, %d) = %d %v, want %d %v", when, key, uk, v, ok, w, wok)
				}
				if c, err := m.Contains(uk); err != nil || c != wok {
					t.Fatalf("%s: Contains(%s, %d) = %v %v, want %v", when, key, uk, c, err, wok)
				}
			}
		}
	}
	put(m, "a", 1, 10)
	put(m, "a", 2, 20)
	put(m, "b", 1, 30)
	get("a", 1)
	put(m, "a", 2, 21) // another user key
	get("a", 1)
	put(m, "b", 1, 31) // another current key
	get("a", 1)
	put(o, "a", 1, 99) // another state
	put(m, "a", 1, get("a", 1)+1)
	check("after the writes")
	for i := range 100 { // evictions between the read and the write
		v := get("c", 0)
		put(o, "c", int64(i), int64(i))
		put(m, "c", 0, v+1)
	}
	if want["c"][0] != 100 {
		t.Fatalf("c/0 = %d after 100 increments, want 100", want["c"][0])
	}
	check("after writes with evictions")
	b.SetCurrentKey([]byte("a"))
	v, _, err := m.Get(2)
	must(t, err)
	must(t, m.Remove(2))
	if v != 21 {
		t.Fatalf("Get(a, 2) = %d, want 21", v)
	}
	delete(want["a"], 2)
	check("after a Remove")
	b.SetCurrentKey([]byte("b"))
	allocs := testing.AllocsPerRun(100, func() {
		v, _, err := m.Get(1)
		if err == nil {
			err = m.Put(1, v+1)
		}
		if err != nil {
			t.Fatal(err)
		}
	})
	want["b"][1] += 101
	check("after the counted writes")
	if !raceEnabled && allocs != 1 {
		t.Fatalf("read-modify-write of a cached map entry: %v allocations, want 1", allocs)
	}
}
