package state

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// TestRemoteSnapshotSyncPartReadsNoStoreObject: the synchronous part of a
// remote checkpoint (flush, list tables, hold them) reads nothing from the
// store, so its duration does not grow with the store's read latency
// (a sync keyed count's long checkpoints with 2 ms per read come from the
// barrier waiting behind queued records, not from the snapshot).
func TestRemoteSnapshotSyncPartReadsNoStoreObject(t *testing.T) {
	be, keys := openRemoteLatencyBackend(t, 0, 5000)
	s := must1(GetValueState(be, ValueStateDescriptor[int]{Name: "sum", Serializer: JSONSerializer[int]{}}))(t)
	ps := be.(*pebbleBackend).st
	ps.remote.latency.Store(int64(time.Millisecond))
	dir := t.TempDir()
	for round := range 3 {
		for i, k := range keys {
			if i%7 == round {
				be.SetCurrentKey(k)
				v, _, err := s.Value()
				must(t, err)
				must(t, s.Update(v+1))
			}
		}
		reads0 := ps.remote.readCount()
		finish, err := SnapshotKeyed(be, SnapshotTarget{Dir: filepath.Join(dir, "chk"), TaskPath: "count/0", SharedDir: filepath.Join(dir, "shared")})
		must(t, err)
		if n := ps.remote.readCount() - reads0; n != 0 {
			t.Errorf("round %d: the synchronous part read the store %d times, want 0", round, n)
		}
		_, err = finish(context.Background())
		must(t, err)
	}
}
