package state

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// benchKeySpace is the number of distinct keys the benchmarks address.
const benchKeySpace = 1 << 20

// BenchmarkKeyedState measures single operations on each backend, with and
// without TTL, over a space of 1M keys accessed at random. The value and map
// states are preloaded with one entry per key so that gets hit. Report ops/s
// as 1e9 / (ns/op).
func BenchmarkKeyedState(b *testing.B) {
	for _, kind := range backendKinds {
		for _, withTTL := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/ttl=%t", kind, withTTL), func(b *testing.B) {
				benchBackend(b, kind, withTTL)
			})
		}
	}
}

func benchBackend(b *testing.B, kind string, withTTL bool) {
	cfg := testConfig(b, kind)
	cfg.TTLCleanup.Disabled = true
	if kind == KindPebble {
		cfg.Cache = NewBlockCache(64 << 20)
		defer cfg.Cache.Close()
	}
	be := open(b, cfg)
	var ttl *StateTtlConfig
	if withTTL {
		ttl = &StateTtlConfig{TTL: time.Hour, UpdateType: OnCreateAndWrite}
	}
	v := must1(GetValueState(be, ValueStateDescriptor[int64]{Name: "v", Serializer: Int64Serializer{}, TTL: ttl}))(b)
	l := must1(GetListState(be, ListStateDescriptor[int64]{Name: "l", Serializer: Int64Serializer{}, TTL: ttl}))(b)
	m := must1(GetMapState(be, MapStateDescriptor[int64, int64]{Name: "m", KeySerializer: Int64Serializer{}, ValueSerializer: Int64Serializer{}, TTL: ttl}))(b)
	keys := make([][]byte, benchKeySpace)
	for i := range keys {
		keys[i] = u64key(uint64(i))
		be.SetCurrentKey(keys[i])
		must(b, v.Update(int64(i)))
		must(b, m.Put(int64(i%16), int64(i)))
	}
	if ps, ok := be.core().st.(*pebbleStore); ok {
		// Measure the steady state, not the compaction debt of the preload.
		must(b, ps.db.Compact(context.Background(), keyGroupsStart, keyGroupsEnd, true))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	next := func() []byte { return keys[rng.IntN(benchKeySpace)] }
	b.Run("ValueGet", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			be.SetCurrentKey(next())
			if _, ok, err := v.Value(); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("MapGet", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			k := rng.IntN(benchKeySpace)
			be.SetCurrentKey(keys[k])
			if _, ok, err := m.Get(int64(k % 16)); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("ValueUpdate", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			be.SetCurrentKey(next())
			must(b, v.Update(int64(i)))
		}
	})
	b.Run("ListAdd", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			be.SetCurrentKey(next())
			must(b, l.Add(int64(i)))
		}
	})
	b.Run("MapPut", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			be.SetCurrentKey(next())
			must(b, m.Put(int64(i%16), int64(i)))
		}
	})
}

// BenchmarkMapScanPerRecord measures the rules operator's state pattern
// per record on Pebble: over 10,000 keys at random, a map Get and Put of
// the record's bucket and a scan of the key's entries (at most 8 buckets,
// the oldest removed), with the write cache off and on.
func BenchmarkMapScanPerRecord(b *testing.B) {
	for _, cache := range []struct {
		name  string
		bytes int
	}{{"cache=off", -1}, {"cache=on", 0}} {
		b.Run(cache.name, func(b *testing.B) {
			cfg := testConfig(b, KindPebble)
			cfg.WriteCacheBytes = cache.bytes
			be := open(b, cfg)
			m := must1(GetMapState(be, MapStateDescriptor[int64, int64]{Name: "w", KeySerializer: Int64Serializer{}, ValueSerializer: Int64Serializer{}}))(b)
			const nkeys = 10_000
			keys := make([][]byte, nkeys)
			for i := range keys {
				keys[i] = u64key(uint64(i))
			}
			rng := rand.New(rand.NewPCG(1, 2))
			b.ReportAllocs()
			for i := int64(0); b.Loop(); i++ {
				be.SetCurrentKey(keys[rng.IntN(nkeys)])
				ts := i / 4
				n, _, err := m.Get(ts)
				must(b, err)
				must(b, m.Put(ts, n+1))
				oldest, entries := int64(-1), 0
				for e, err := range m.Entries() {
					must(b, err)
					if entries++; oldest < 0 || e.Key < oldest {
						oldest = e.Key
					}
				}
				if entries > 8 {
					must(b, m.Remove(oldest))
				}
			}
		})
	}
}
