package state

import (
	"context"
	"slices"
	"testing"
)

// TestMapAppendValueDuringAsyncSnapshot: entries appended to (on hashmap
// the bytes appended in place, past the length the snapshot's copy of
// the entry shares) after a snapshot's synchronous part, before and while
// its asynchronous part writes, are not in the snapshot, on every
// backend: the restored entries are those of the synchronous part's
// instant.
func TestMapAppendValueDuringAsyncSnapshot(t *testing.T) {
	for _, kind := range []string{KindHashmap, KindPebble} {
		t.Run(kind, func(t *testing.T) {
			cfg := testConfig(t, kind)
			b := open(t, cfg)
			d := MapStateDescriptor[int64, []byte]{Name: "rows", KeySerializer: Int64Serializer{}, ValueSerializer: concatBytes{}}
			s := must1(GetMapState(b, d))(t)
			app := s.(MapAppender[int64, []byte])
			want := map[string][]byte{}
			for i := range 37 { // 37 appends: the entry's slice has spare capacity
				for _, k := range keys3 {
					b.SetCurrentKey([]byte(k))
					must(t, app.AppendValue(1, []byte{byte(i)}))
					want[k] = append(want[k], byte(i))
				}
			}
			dir, shared := t.TempDir(), t.TempDir()
			write, err := SnapshotKeyed(b, SnapshotTarget{Dir: dir, TaskPath: "op/0", SharedDir: shared})
			must(t, err)
			more := func(round int) {
				for _, k := range keys3 {
					b.SetCurrentKey([]byte(k))
					must(t, app.AppendValue(1, []byte{200, byte(round)}))
				}
			}
			more(0)
			done := make(chan error, 1)
			var snap KeyedSnapshot
			go func() {
				var err error
				snap, err = write(context.Background())
				done <- err
			}()
			for i := 1; i <= 30; i++ {
				more(i)
			}
			must(t, <-done)
			rcfg := testConfig(t, kind)
			rb, err := OpenBackendRestored(rcfg, []RestoreHandle{{Handle: snap.Handle, Dir: dir, SharedDir: shared}})
			must(t, err)
			t.Cleanup(func() { _ = rb.Close() })
			rs := must1(GetMapState(rb, d))(t)
			for _, k := range keys3 {
				rb.SetCurrentKey([]byte(k))
				got, ok, err := rs.Get(1)
				must(t, err)
				if !ok || !slices.Equal(got, want[k]) {
					t.Fatalf("restored %s = %v, want the snapshot's %v", k, got, want[k])
				}
			}
		})
	}
}
