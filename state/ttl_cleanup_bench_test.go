package state

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkTTLCleanup measures one background TTL cleanup step
// (CleanupStep, DefaultTTLCleanupEntriesPerStep entries) on the Pebble
// backend over 128 key groups and two states with TTL (a value and a map
// of 4 entries per key), nothing expired: the steady-state cost of the
// scan. keys=100 leaves most (key group, state) prefixes empty, so a step
// is mostly seeks (Nexmark q8's dedup state between bursts); keys=10000
// fills every prefix. One op is one step.
func BenchmarkTTLCleanup(b *testing.B) {
	for _, nkeys := range []int{100, 10000} {
		b.Run(fmt.Sprintf("keys=%d", nkeys), func(b *testing.B) {
			cfg := testConfig(b, KindPebble)
			cfg.TTLCleanup = TTLCleanupConfig{EntriesPerStep: DefaultTTLCleanupEntriesPerStep}
			be := open(b, cfg)
			ttl := &StateTtlConfig{TTL: time.Hour}
			v := must1(GetValueState(be, ValueStateDescriptor[int64]{Name: "v", Serializer: Int64Serializer{}, TTL: ttl}))(b)
			m := must1(GetMapState(be, MapStateDescriptor[int64, int64]{Name: "m", KeySerializer: Int64Serializer{}, ValueSerializer: Int64Serializer{}, TTL: ttl}))(b)
			for i := range int64(nkeys) {
				be.SetCurrentKey(u64key(uint64(i)))
				must(b, v.Update(i))
				for j := range int64(4) {
					must(b, m.Put(j, i))
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				if n, err := be.CleanupStep(); err != nil || n != 0 {
					b.Fatalf("cleanup step removed %d, %v", n, err)
				}
			}
		})
	}
}
