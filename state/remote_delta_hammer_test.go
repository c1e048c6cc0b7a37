package state

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"
)

// TestRemoteDeltaCommitLaterConcurrentScans hammers the pending commit
// of delta checkpoints: the owner writes every key in rounds through a
// write cache smaller than a round (evictions during each round and
// while a commit is pending) and takes a checkpoint after each (deltas,
// a base when the chain is full), while another goroutine scans the
// state (flushCache, then an iterator) in a loop. Every scan must see
// each key at least at the round finished before it began, and a key
// never goes back; the last checkpoint restores the last round exactly.
// Run with -race.
func TestRemoteDeltaCommitLaterConcurrentScans(t *testing.T) {
	cfg := testConfig(t, kindPebbleRemote)
	cfg.WriteCacheBytes = 4 << 10
	b := open(t, cfg)
	defer func() { must(t, b.Close()) }()
	count := must1(GetValueState(b, ValueStateDescriptor[int64]{Name: "count", Serializer: Int64Serializer{}}))(t)
	const n, rounds = 300, 12
	var done atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var bad atomic.Value
	wg.Add(1)
	go func() {
		defer wg.Done()
		last := map[string]int64{}
		for {
			select {
			case <-stop:
				return
			default:
			}
			lo := done.Load()
			for k, v := range rawState(t, b, cfg.KeyGroupRange) {
				if k >= string(keyGroupsEnd) {
					continue // the metadata space
				}
				got := int64(binary.BigEndian.Uint64([]byte(v)) ^ 1<<63)
				if got < lo || got < last[k] {
					bad.CompareAndSwap(nil, [3]int64{got, lo, last[k]})
					return
				}
				last[k] = got
			}
		}
	}()
	var rh RestoreHandle
	for r := int64(1); r <= rounds; r++ {
		for i := range n {
			b.SetCurrentKey(testKey(i))
			must(t, count.Update(r))
		}
		done.Store(r)
		rh, _ = remoteCheckpoint(t, b, cfg, int(r))
	}
	close(stop)
	wg.Wait()
	if v := bad.Load(); v != nil {
		g := v.([3]int64)
		t.Fatalf("a scan saw round %d, want at least %d (finished before it) and %d (seen before)", g[0], g[1], g[2])
	}
	rc := cfg
	rc.Dir = t.TempDir()
	rb, err := OpenBackendRestored(rc, []RestoreHandle{rh})
	must(t, err)
	defer func() { must(t, rb.Close()) }()
	rcount := must1(GetValueState(rb, ValueStateDescriptor[int64]{Name: "count", Serializer: Int64Serializer{}}))(t)
	for i := range n {
		rb.SetCurrentKey(testKey(i))
		v, ok, err := rcount.Value()
		must(t, err)
		if !ok || v != rounds {
			t.Fatalf("restored key %d: %d (found %v), want %d", i, v, ok, rounds)
		}
	}
}
