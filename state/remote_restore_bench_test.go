package state

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// BenchmarkRemoteRestoreTables times the restore of a base checkpoint of
// a disaggregated backend whose LSM has many tables (open, then read one
// key, as the state-scaling bench's restore_ms; the close is not timed):
// 100,000 keys compacted, then 40 flushes of 1,000 changed keys each
// left in L0 (threshold 1000), so the restore references about 40
// objects and runs an ingestion per L0 table, as a 10M-key state's
// restore does (120 tables, 48 ingestions in the state-scaling bench).
// No delta: the base's part of a restore (markers, ingestion) alone.
// cpu-ms/op is the process CPU per restore, its untimed Close included.
//
//	go test ./state -run XXX -bench BenchmarkRemoteRestoreTables -count 6 -cpu 1
func BenchmarkRemoteRestoreTables(b *testing.B) {
	const n, flushes, per = 100_000, 40, 1_000
	cfg := testConfig(b, kindPebbleRemote)
	cfg.Remote.CacheBytes = 64 << 20
	cfg.Remote.MaxDeltaCheckpoints = -1
	cfg.WriteCacheBytes = -1
	cfg.L0CompactionThreshold = 1000
	src := open(b, cfg)
	fillCounts(b, src, n, func(i int) int64 { return int64(i) })
	db := src.(*pebbleBackend).st.db
	must(b, db.Flush())
	must(b, db.Compact(b.Context(), keyGroupsStart, []byte{0xff, 0xff}, false))
	s := must1(GetValueState(src, ValueStateDescriptor[int64]{Name: "count", Serializer: Int64Serializer{}}))(b)
	for f := range flushes {
		for i := range per {
			src.SetCurrentKey([]byte(fmt.Sprintf("k%06d", (f*per+i*97)%n)))
			must(b, s.Update(int64(f)))
		}
		must(b, db.Flush())
	}
	rh, _ := remoteCheckpoint(b, src, cfg, 1)
	must(b, src.Close())
	key := []byte(fmt.Sprintf("k%06d", n-1))
	var ingestions int64
	cpu0 := testkit.CPUTime(b)
	b.ResetTimer()
	for b.Loop() {
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
		ingestions += rb.(*pebbleBackend).st.remote.ingestions.Load()
		must(b, rb.Close())
		b.StartTimer()
	}
	b.ReportMetric(float64(ingestions)/float64(b.N), "ingestions/op")
	b.ReportMetric(float64((testkit.CPUTime(b)-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
}
