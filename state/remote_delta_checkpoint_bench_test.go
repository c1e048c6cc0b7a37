package state

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// BenchmarkRemoteDeltaCheckpoint times a delta checkpoint of a
// disaggregated backend after 100,000 changed keys of 200,000 (what the
// state-scaling bench's round changes at 10M keys): ns/op is the whole
// checkpoint (synchronous and asynchronous parts), sync-ms/op the
// synchronous part, cpu-ms/op the process CPU per round including the
// untimed updates (the same on every side of an A/B pair), so it counts
// a commit the checkpoint leaves to another goroutine too.
//
//	go test ./state -run XXX -bench BenchmarkRemoteDeltaCheckpoint -count 6 -cpu 1
func BenchmarkRemoteDeltaCheckpoint(b *testing.B) {
	const n, changed = 200_000, 100_000
	cfg := testConfig(b, kindPebbleRemote)
	cfg.Remote.CacheBytes = 64 << 20
	cfg.Remote.MaxDeltaCheckpoints = 1 << 20
	cfg.Remote.MaxDeltaBytes = 1 << 40
	src := open(b, cfg)
	defer func() { must(b, src.Close()) }()
	fillCounts(b, src, n, func(i int) int64 { return int64(i) })
	remoteCheckpoint(b, src, cfg, 1)
	s := must1(GetValueState(src, ValueStateDescriptor[int64]{Name: "count", Serializer: Int64Serializer{}}))(b)
	rng := rand.New(rand.NewPCG(1, 2))
	root := filepath.Dir(cfg.Remote.Dir)
	var sync time.Duration
	cpu0 := testkit.CPUTime(b)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		for range changed {
			src.SetCurrentKey([]byte(fmt.Sprintf("k%06d", rng.IntN(n))))
			must(b, s.Update(int64(i)))
		}
		b.StartTimer()
		tgt := SnapshotTarget{Dir: filepath.Join(root, fmt.Sprintf("chk-%d", i+2)), TaskPath: "op/0", SharedDir: filepath.Join(root, "shared")}
		start := time.Now()
		write, err := SnapshotKeyed(src, tgt)
		must(b, err)
		sync += time.Since(start)
		if _, err := write(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(sync.Microseconds())/1000/float64(b.N), "sync-ms/op")
	b.ReportMetric(float64((testkit.CPUTime(b)-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
}
