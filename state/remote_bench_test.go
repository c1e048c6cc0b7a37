package state

import (
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"
)

// openRemoteLatencyBackend opens a disaggregated backend whose store adds
// latency to every read, preloaded with count[k] = 0 for nkeys keys and
// compacted, with no write cache, a small block cache and no local cache
// of remote blocks: a point read of a key not read recently waits for the
// store.
func openRemoteLatencyBackend(tb testing.TB, latency time.Duration, nkeys int) (KeyedStateBackend, [][]byte) {
	cfg := testConfig(tb, kindPebbleRemote)
	cfg.Remote.CacheBytes = -1
	cfg.WriteCacheBytes = -1
	cfg.Cache = NewBlockCache(256 << 10)
	tb.Cleanup(cfg.Cache.Close)
	be := open(tb, cfg)
	s := must1(GetValueState(be, ValueStateDescriptor[int]{Name: "sum", Serializer: JSONSerializer[int]{}}))(tb)
	keys := make([][]byte, nkeys)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "key-%07d", i)
		be.SetCurrentKey(keys[i])
		must(tb, s.Update(0))
	}
	ps := be.(*pebbleBackend).st
	must(tb, ps.db.Compact(context.Background(), keyGroupsStart, keyGroupsEnd, true))
	ps.remote.latency.Store(int64(latency)) // after the preload: only the measured reads wait
	return be, keys
}

// BenchmarkRemoteAsyncVsSync is the keyed count (a read-modify-write of a
// per-key ValueState) over 50,000 keys at random on the disaggregated
// backend with 2 ms added to every store read (RemoteConfig.ReadLatency):
// the synchronous API, one record after another, against the async API
// with 16 (the default), 64 and 256 read workers (reads in flight per
// subtask). Reports records/s and store reads per record.
func BenchmarkRemoteAsyncVsSync(b *testing.B) {
	const nkeys = 50000
	const latency = 2 * time.Millisecond
	desc := ValueStateDescriptor[int]{Name: "sum", Serializer: JSONSerializer[int]{}}
	report := func(b *testing.B, be KeyedStateBackend, reads0 int64) {
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
		b.ReportMetric(float64(be.(*pebbleBackend).st.remote.readCount()-reads0)/float64(b.N), "reads/record")
	}
	b.Run("sync", func(b *testing.B) {
		be, keys := openRemoteLatencyBackend(b, latency, nkeys)
		s := must1(GetValueState(be, desc))(b)
		rng := rand.New(rand.NewPCG(1, 2))
		reads0 := be.(*pebbleBackend).st.remote.readCount()
		b.ResetTimer()
		for range b.N {
			be.SetCurrentKey(keys[rng.IntN(nkeys)])
			v, _, err := s.Value()
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Update(v + 1); err != nil {
				b.Fatal(err)
			}
		}
		report(b, be, reads0)
	})
	for _, workers := range []int{DefaultReadWorkers, 64, 256} {
		b.Run(fmt.Sprintf("async/workers=%d", workers), func(b *testing.B) {
			be, keys := openRemoteLatencyBackend(b, latency, nkeys)
			c, err := NewAsyncExecutionController(be, newTestMailbox(), WithReadWorkers(workers))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			s := must1(GetAsyncValueState(c, desc))(b)
			fn := func() error {
				s.AsyncValue().ThenAccept(func(v Optional[int]) error {
					s.AsyncUpdate(v.Value + 1)
					return nil
				})
				return nil
			}
			rng := rand.New(rand.NewPCG(1, 2))
			ctx := context.Background()
			reads0 := be.(*pebbleBackend).st.remote.readCount()
			b.ResetTimer()
			for range b.N {
				if err := c.Process(ctx, keys[rng.IntN(nkeys)], fn); err != nil {
					b.Fatal(err)
				}
			}
			if err := c.Drain(ctx); err != nil {
				b.Fatal(err)
			}
			report(b, be, reads0)
		})
	}
}

// TestRemoteAsyncCountExact: the async keyed count on the disaggregated
// backend with added read latency and 64 read workers counts exactly:
// 3,000 records over 300 keys (each key 10 times, interleaved) leave
// every count at 10, and the reads did reach the store.
func TestRemoteAsyncCountExact(t *testing.T) {
	be, keys := openRemoteLatencyBackend(t, 200*time.Microsecond, 300)
	c, err := NewAsyncExecutionController(be, newTestMailbox(), WithReadWorkers(64))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	desc := ValueStateDescriptor[int]{Name: "sum", Serializer: JSONSerializer[int]{}}
	s := must1(GetAsyncValueState(c, desc))(t)
	fn := func() error {
		s.AsyncValue().ThenAccept(func(v Optional[int]) error {
			s.AsyncUpdate(v.Value + 1)
			return nil
		})
		return nil
	}
	ctx := context.Background()
	reads0 := be.(*pebbleBackend).st.remote.readCount()
	for i := range 3000 {
		must(t, c.Process(ctx, keys[(i*7)%len(keys)], fn))
	}
	must(t, c.Drain(ctx))
	if be.(*pebbleBackend).st.remote.readCount() == reads0 {
		t.Fatal("no read reached the store")
	}
	ss := must1(GetValueState(be, desc))(t)
	for _, k := range keys {
		be.SetCurrentKey(k)
		if v, _, err := ss.Value(); err != nil || v != 10 {
			t.Fatalf("count[%s] = %d, %v; want 10", k, v, err)
		}
	}
}

// BenchmarkRemoteLocalDisk writes 100,000 keys (count[k] as in the keyed
// count, ~40 bytes per entry) into a disaggregated backend with a 64 MiB
// local cache, checkpoints it by reference and reads 100,000 keys at
// random, then reports the local directory's bytes (WAL, MANIFEST,
// catalog, cache), the store's bytes and the checkpoint's sync part
// (flush and table listing) in ms.
func BenchmarkRemoteLocalDisk(b *testing.B) {
	const nkeys = 100_000
	for range b.N {
		cfg := testConfig(b, kindPebbleRemote)
		cfg.Remote.CacheBytes = 64 << 20
		be := open(b, cfg)
		fillCounts(b, be, nkeys, func(i int) int64 { return int64(i) })
		start := time.Now()
		write, err := SnapshotKeyed(be, SnapshotTarget{Dir: b.TempDir(), TaskPath: "op/0", SharedDir: filepath.Join(filepath.Dir(cfg.Remote.Dir), "shared")})
		if err != nil {
			b.Fatal(err)
		}
		syncMs := float64(time.Since(start).Microseconds()) / 1000
		snap, err := write(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(3, 4))
		s := must1(GetValueState(be, ValueStateDescriptor[int64]{Name: "count", Serializer: Int64Serializer{}}))(b)
		for range 100_000 {
			be.SetCurrentKey([]byte(fmt.Sprintf("k%06d", rng.IntN(nkeys))))
			if _, ok, err := s.Value(); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
		b.ReportMetric(float64(dirBytes(b, cfg.Dir))/(1<<20), "local-MiB")
		b.ReportMetric(float64(dirBytes(b, cfg.Remote.Dir))/(1<<20), "store-MiB")
		b.ReportMetric(syncMs, "sync-part-ms")
		b.ReportMetric(float64(len(snap.SharedFiles)), "shared-files")
	}
}

// dirBytes sums the sizes of the files under dir.
func dirBytes(tb testing.TB, dir string) int64 {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			n += info.Size()
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return n
}
