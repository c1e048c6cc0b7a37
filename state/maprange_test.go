package state

import (
	"slices"
	"strconv"
	"testing"
)

// countingSerializer is StringSerializer counting its Decode calls.
type countingSerializer struct {
	StringSerializer
	decodes *int
}

func (c countingSerializer) Decode(b []byte) (string, error) {
	*c.decodes++
	return c.StringSerializer.Decode(b)
}

// TestMapRange: MapRange over int64 keys (negative and positive) yields
// exactly the current key's entries in [from, to], both bounds inclusive,
// in ascending order, on both backends, decoding only those values; other
// keys' entries never leak in; from > to and a range between entries yield
// nothing; an entry the consumer removes or a value it rewrites while
// iterating does not disturb the walk.
func TestMapRange(t *testing.T) {
	decodes := 0
	d := MapStateDescriptor[int64, string]{Name: "buckets", KeySerializer: Int64Serializer{}, ValueSerializer: countingSerializer{decodes: &decodes}}
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			b := open(t, testConfig(t, kind))
			m := must1(GetMapState(b, d))(t)
			b.SetCurrentKey([]byte("other"))
			for ts := int64(-100); ts <= 100; ts++ {
				must(t, m.Put(ts, "other"))
			}
			b.SetCurrentKey([]byte("hot"))
			for _, ts := range []int64{40, -7, 3, 0, -1, 12, 5, 1 << 40, -1 << 40, 7, 8, -3} {
				must(t, m.Put(ts, "v"+strconv.FormatInt(ts, 10)))
			}
			type kv struct {
				k int64
				v string
			}
			rng := func(from, to int64) []kv {
				t.Helper()
				var out []kv
				for e, err := range MapRange(m, from, to) {
					if err != nil {
						t.Fatalf("MapRange: %v", err)
					}
					out = append(out, kv{e.Key, e.Value})
				}
				return out
			}
			decodes = 0
			got := rng(-3, 7)
			want := []kv{{-3, "v-3"}, {-1, "v-1"}, {0, "v0"}, {3, "v3"}, {5, "v5"}, {7, "v7"}}
			if !slices.Equal(got, want) {
				t.Fatalf("MapRange(-3, 7) = %v, want %v", got, want)
			}
			if decodes != len(want) {
				t.Fatalf("MapRange(-3, 7) decoded %d values, want %d (only those in range)", decodes, len(want))
			}
			if got := rng(-1<<41, 1<<41); len(got) != 12 || got[0].k != -1<<40 || got[11].k != 1<<40 {
				t.Fatalf("MapRange over everything = %v, want the 12 entries from -2^40 to 2^40", got)
			}
			if got := rng(7, -3); len(got) != 0 {
				t.Fatalf("MapRange(7, -3) = %v, want nothing", got)
			}
			if got := rng(13, 39); len(got) != 0 {
				t.Fatalf("MapRange(13, 39) = %v, want nothing", got)
			}
			// Remove the current entry and rewrite the next one while walking.
			var seen []int64
			for e, err := range MapRange(m, 0, 8) {
				must(t, err)
				seen = append(seen, e.Key)
				must(t, m.Remove(e.Key))
				must(t, m.Put(e.Key+1000, "moved"))
			}
			if want := []int64{0, 3, 5, 7, 8}; !slices.Equal(seen, want) {
				t.Fatalf("walk while removing visited %v, want %v", seen, want)
			}
			if got := rng(0, 8); len(got) != 0 {
				t.Fatalf("after removing, MapRange(0, 8) = %v, want nothing", got)
			}
			if got := rng(1000, 1008); len(got) != 5 || got[0] != (kv{1000, "moved"}) {
				t.Fatalf("MapRange(1000, 1008) = %v, want the 5 moved entries", got)
			}
			b.SetCurrentKey([]byte("other"))
			if got := rng(-2, 2); len(got) != 5 || got[0] != (kv{-2, "other"}) || got[4].k != 2 {
				t.Fatalf("other key: MapRange(-2, 2) = %v, want -2..2", got)
			}
		})
	}
}

// TestMapRangeMergesWriteCache: on Pebble, MapRange merges the write
// cache's dirty versions (new entries, overwrites and deletes of entries
// Pebble already holds) over its iterator without flushing, and with more
// than rangeDirtyLimit dirty entries flushes first; either way it yields
// exactly the model map's entries in range, in order.
func TestMapRangeMergesWriteCache(t *testing.T) {
	d := MapStateDescriptor[int64, string]{Name: "buckets", KeySerializer: Int64Serializer{}, ValueSerializer: StringSerializer{}}
	b := open(t, testConfig(t, KindPebble))
	ps, ok := b.core().st.(*pebbleStore)
	if !ok || ps.cache == nil {
		t.Fatalf("store %T without a write cache", b.core().st)
	}
	m := must1(GetMapState(b, d))(t)
	b.SetCurrentKey([]byte("k"))
	model := map[int64]string{}
	put := func(k int64, v string) { must(t, m.Put(k, v)); model[k] = v }
	del := func(k int64) { must(t, m.Remove(k)); delete(model, k) }
	check := func(from, to int64) {
		t.Helper()
		var want, got []string
		for k := from; k <= to; k++ {
			if v, ok := model[k]; ok {
				want = append(want, strconv.FormatInt(k, 10)+"="+v)
			}
		}
		for e, err := range MapRange(m, from, to) {
			must(t, err)
			got = append(got, strconv.FormatInt(e.Key, 10)+"="+e.Value)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("MapRange(%d, %d) = %v, want %v", from, to, got, want)
		}
	}
	for k := range int64(100) {
		put(k*2, "pebble")
	}
	must(t, ps.flushCache())
	put(10, "overwritten")
	del(12)
	put(13, "new")
	del(14)
	put(14, "back")
	put(-5, "below")
	put(199, "above-odd")
	del(0)
	if ps.cache.ndirty == 0 || ps.cache.ndirty > rangeDirtyLimit {
		t.Fatalf("%d dirty entries, want some and at most %d", ps.cache.ndirty, rangeDirtyLimit)
	}
	check(-10, 30)
	check(11, 13)
	check(0, 0)
	check(190, 250)
	if ps.cache.ndirty == 0 {
		t.Fatalf("MapRange flushed the cache with few dirty entries")
	}
	for k := range int64(rangeDirtyLimit + 10) {
		put(1000+k, "many")
	}
	del(1003)
	check(995, 1020)
	if ps.cache.ndirty != 0 {
		t.Fatalf("%d dirty entries after MapRange with more than %d dirty, want a flush", ps.cache.ndirty, rangeDirtyLimit)
	}
	check(-1000, 5000)
}
