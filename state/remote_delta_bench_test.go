package state

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
)

// BenchmarkRemoteDeltaRestore times a restore of a delta checkpoint of a
// disaggregated backend (open, then read one key, as the state-scaling
// bench's restore_ms; the close is not timed): a base of 200,000 keys,
// then two delta checkpoints of 100,000 changed keys each (what the
// state-scaling bench's deltas hold at 10M keys), and the same state
// restored from a base (deltas=0) for comparison.
//
//	go test ./state -run XXX -bench BenchmarkRemoteDeltaRestore -count 6 -cpu 1
func BenchmarkRemoteDeltaRestore(b *testing.B) {
	for _, deltas := range []int{0, 2} {
		b.Run(fmt.Sprintf("deltas=%d", deltas), func(b *testing.B) {
			const n, changed = 200_000, 100_000
			cfg := testConfig(b, kindPebbleRemote)
			cfg.Remote.CacheBytes = 64 << 20
			if deltas == 0 {
				cfg.Remote.MaxDeltaCheckpoints = -1
			}
			src := open(b, cfg)
			fillCounts(b, src, n, func(i int) int64 { return int64(i) })
			rh, _ := remoteCheckpoint(b, src, cfg, 1)
			s := must1(GetValueState(src, ValueStateDescriptor[int64]{Name: "count", Serializer: Int64Serializer{}}))(b)
			rng := rand.New(rand.NewPCG(1, 2))
			for r := range 2 {
				for range changed {
					src.SetCurrentKey([]byte(fmt.Sprintf("k%06d", rng.IntN(n))))
					must(b, s.Update(int64(r+2)))
				}
				rh, _ = remoteCheckpoint(b, src, cfg, r+2)
			}
			must(b, src.Close())
			key := []byte(fmt.Sprintf("k%06d", n-1))
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				rc := cfg
				rc.Dir = filepath.Join(b.TempDir(), "r")
				rb, err := OpenBackendRestored(rc, []RestoreHandle{rh})
				must(b, err)
				rs := must1(GetValueState(rb, ValueStateDescriptor[int64]{Name: "count", Serializer: Int64Serializer{}}))(b)
				rb.SetCurrentKey(key)
				if _, ok, err := rs.Value(); err != nil || !ok {
					b.Fatalf("key %s: %t %v", key, ok, err)
				}
				b.StopTimer()
				must(b, rb.Close())
				b.StartTimer()
			}
		})
	}
}
