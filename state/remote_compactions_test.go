package state

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/kstreamd/kstreamd/state/keygroup"
)

// manyL0Checkpoint writes n keys (count k = i), compacts them, then
// flushes l0 times 500 changed keys (count = n + flush), so a base
// checkpoint of it names l0 L0 tables, and returns that checkpoint and
// the expected counts; the source runs with an L0 threshold that never
// compacts them.
func manyL0Checkpoint(t *testing.T, cfg BackendConfig, n, l0 int) (RestoreHandle, map[int]int64) {
	t.Helper()
	src := open(t, cfg)
	fillCounts(t, src, n, func(i int) int64 { return int64(i) })
	want := map[int]int64{}
	for i := range n {
		want[i] = int64(i)
	}
	db := src.(*pebbleBackend).st.db
	must(t, db.Flush())
	must(t, db.Compact(t.Context(), keyGroupsStart, []byte{0xff, 0xff}, false))
	s := must1(GetValueState(src, ValueStateDescriptor[int64]{Name: "count", Serializer: Int64Serializer{}}))(t)
	for f := range l0 {
		for i := range 500 {
			k := (f*500 + i*97) % n
			src.SetCurrentKey([]byte(fmt.Sprintf("k%06d", k)))
			must(t, s.Update(int64(n+f)))
			want[k] = int64(n + f)
		}
		must(t, db.Flush())
	}
	if got := src.(*pebbleBackend).st.db.Metrics().Levels[0].TablesCount; got != int64(l0) {
		t.Fatalf("source holds %d L0 tables, want %d", got, l0)
	}
	rh, _ := remoteCheckpoint(t, src, cfg, 1)
	must(t, src.Close())
	return rh, want
}

// TestRemoteRestoreHoldsCompactions: a restore whose tables put more L0
// sublevels into the fresh LSM than its compaction threshold starts no
// compaction until the tables are ingested (restoreScheduler), and the
// compaction Pebble then wants runs after the restore. Without the
// scheduler Pebble starts it in the middle of the ingestions.
func TestRemoteRestoreHoldsCompactions(t *testing.T) {
	cfg := testConfig(t, kindPebbleRemote)
	cfg.Remote.MaxDeltaCheckpoints = -1
	cfg.WriteCacheBytes = -1
	cfg.L0CompactionThreshold = 1000
	const n, l0 = 20_000, 8
	rh, want := manyL0Checkpoint(t, cfg, n, l0)

	type seen struct {
		held                      bool
		sublevels, compacted, run int64
	}
	var at []seen
	restoreHeldHook = func(db *pebble.DB, held bool) {
		m := db.Metrics()
		at = append(at, seen{held, int64(m.Levels[0].Sublevels), m.Compact.Count, m.Compact.NumInProgress})
	}
	t.Cleanup(func() { restoreHeldHook = nil })
	rc := cfg
	rc.Dir = filepath.Join(t.TempDir(), "r")
	rc.L0CompactionThreshold = 2
	rb, err := OpenBackendRestored(rc, []RestoreHandle{rh})
	must(t, err)
	t.Cleanup(func() { _ = rb.Close() })
	if len(at) != 1 {
		t.Fatalf("hook ran %d times, want 1", len(at))
	}
	if s := at[0]; !s.held || s.sublevels != l0 || s.compacted != 0 || s.run != 0 {
		t.Fatalf("after the ingestions: held %t, L0 sublevels %d (want %d), compactions done %d and running %d (want 0 and 0)",
			s.held, s.sublevels, l0, s.compacted, s.run)
	}
	checkCounts(t, rb, n, func(i int) (int64, bool) { return want[i], true })
	// Released: the L0 compaction Pebble picked runs (no time is
	// asserted, only that it happens).
	db := rb.(*pebbleBackend).st.db
	for db.Metrics().Compact.Count == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	checkCounts(t, rb, n, func(i int) (int64, bool) { return want[i], true })
}

// TestRemoteRestoreReplayAtL0StopWrites: when the replay of a delta could
// rotate the memtable while L0 holds as many sublevels as stop writes,
// the restore releases compactions before the replay, so the replay's
// wait for a compaction ends and the restore is exact. Held through the
// replay, it would wait for ever.
func TestRemoteRestoreReplayAtL0StopWrites(t *testing.T) {
	cfg := testConfig(t, kindPebbleRemote)
	cfg.WriteCacheBytes = -1
	cfg.L0CompactionThreshold = 1000
	src := open(t, cfg)
	const n, l0 = 20_000, 13
	fillCounts(t, src, n, func(i int) int64 { return int64(i) })
	db := src.(*pebbleBackend).st.db
	must(t, db.Flush())
	must(t, db.Compact(t.Context(), keyGroupsStart, []byte{0xff, 0xff}, false))
	s := must1(GetValueState(src, ValueStateDescriptor[int64]{Name: "count", Serializer: Int64Serializer{}}))(t)
	for f := range l0 {
		for i := range 200 {
			src.SetCurrentKey([]byte(fmt.Sprintf("k%06d", (f*200+i*97)%n)))
			must(t, s.Update(-1))
		}
		must(t, db.Flush())
	}
	remoteCheckpoint(t, src, cfg, 1) // the base
	// The delta: every key once more, about 0.6 MB of batches.
	fillCounts(t, src, n, func(i int) int64 { return int64(3 * i) })
	rh, _ := remoteCheckpoint(t, src, cfg, 2)
	must(t, src.Close())
	var h keyedHandle
	must(t, h.UnmarshalJSON(rh.Handle))
	var deltaBytes int64
	for _, f := range h.Deltas {
		deltaBytes += f.Size
	}
	if len(h.Deltas) != 1 || deltaBytes < 512<<10 {
		t.Fatalf("checkpoint 2 has %d deltas of %d bytes, want 1 of at least 512 KiB", len(h.Deltas), deltaBytes)
	}
	var held []bool
	restoreHeldHook = func(_ *pebble.DB, h bool) { held = append(held, h) }
	t.Cleanup(func() { restoreHeldHook = nil })
	rc := cfg
	rc.Dir = filepath.Join(t.TempDir(), "r")
	rc.L0CompactionThreshold = 4 // stop writes at 12 sublevels: the 13 L0 tables pass it
	rb, err := OpenBackendRestored(rc, []RestoreHandle{rh})
	must(t, err)
	t.Cleanup(func() { _ = rb.Close() })
	if len(held) != 1 || held[0] {
		t.Fatalf("compactions held through the replay: %v", held)
	}
	checkCounts(t, rb, n, func(i int) (int64, bool) { return int64(3 * i), true })
}

func TestReplayMayStall(t *testing.T) {
	for _, c := range []struct {
		ingestions int
		bytes      int64
		l0         int
		want       bool
	}{
		{25, 0, 0, false},              // nothing to replay
		{25, 776_317, 0, false},        // 10M keys, 10,000 changes a round: 25 + 4 < 48
		{25, 7_700_000, 0, true},       // 10M keys, 100,000 changes a round: 25 + 31 >= 48
		{10, 1, 4, true},               // 10 + 2 >= 12
		{9, 1, 4, false},               // 9 + 2 < 12
		{9, 256 << 10, 4, true},        // 9 + 3 >= 12
		{100, 1 << 30, 1 << 62, false}, // a stop threshold past MaxInt/3
	} {
		if got := replayMayStall(c.ingestions, c.bytes, c.l0); got != c.want {
			t.Errorf("replayMayStall(%d, %d, %d) = %t, want %t", c.ingestions, c.bytes, c.l0, got, c.want)
		}
	}
}

// TestRemoteRestoreHeldReplayLargerThanMemtable: a restore stays held
// through the replay of a delta larger than Pebble's memtable (4 MiB: the
// replay commits it as a flushable batch, so the memtable rotates while
// held) when the bound says the replay cannot meet L0's stop-writes
// threshold; the replay does not wait, the values are exact, and once
// released the instance compacts its L0 when later flushes pass the
// compaction threshold (the scheduler grants compactions after the
// restore, not only the one Pebble wanted at its end).
func TestRemoteRestoreHeldReplayLargerThanMemtable(t *testing.T) {
	cfg := testConfig(t, kindPebbleRemote)
	cfg.WriteCacheBytes = -1
	cfg.L0CompactionThreshold = 1000
	const n, l0, blobs, blobLen = 5_000, 12, 2_500, 2_500
	src := open(t, cfg)
	db := src.(*pebbleBackend).st.db
	fillCounts(t, src, n, func(i int) int64 { return int64(i) })
	must(t, db.Flush())
	must(t, db.Compact(t.Context(), keyGroupsStart, []byte{0xff, 0xff}, false))
	s := must1(GetValueState(src, ValueStateDescriptor[int64]{Name: "count", Serializer: Int64Serializer{}}))(t)
	for f := range l0 {
		for i := range 100 {
			src.SetCurrentKey([]byte(fmt.Sprintf("k%06d", (f*100+i*97)%n)))
			must(t, s.Update(-1))
		}
		must(t, db.Flush())
	}
	remoteCheckpoint(t, src, cfg, 1) // the base
	// The delta: every count again and 2,500 values of 2,500 bytes
	// (about 6.3 MB).
	fillCounts(t, src, n, func(i int) int64 { return int64(5 * i) })
	blob := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, blobLen) }
	bs := must1(GetValueState(src, ValueStateDescriptor[[]byte]{Name: "blob", Serializer: BytesSerializer{}}))(t)
	for i := range blobs {
		src.SetCurrentKey([]byte(fmt.Sprintf("k%06d", i)))
		must(t, bs.Update(blob(i)))
	}
	rh, _ := remoteCheckpoint(t, src, cfg, 2)
	must(t, src.Close())
	var h keyedHandle
	must(t, h.UnmarshalJSON(rh.Handle))
	var deltaBytes int64
	for _, f := range h.Deltas {
		deltaBytes += f.Size
	}
	if len(h.Deltas) != 1 || deltaBytes < 6<<20 {
		t.Fatalf("checkpoint 2 has %d deltas of %d bytes, want 1 of at least 6 MiB", len(h.Deltas), deltaBytes)
	}
	type seen struct {
		held      bool
		sublevels int
		compacted int64
	}
	var at []seen
	restoreHeldHook = func(db *pebble.DB, held bool) {
		m := db.Metrics()
		at = append(at, seen{held, int(m.Levels[0].Sublevels), m.Compact.Count})
	}
	t.Cleanup(func() { restoreHeldHook = nil })
	rc := cfg
	rc.Dir = filepath.Join(t.TempDir(), "r")
	rc.L0CompactionThreshold = 16 // stop writes at 48: 12 L0 runs + the levels + 26 rotations stay below
	rb, err := OpenBackendRestored(rc, []RestoreHandle{rh})
	must(t, err)
	t.Cleanup(func() { _ = rb.Close() })
	if len(at) != 1 || !at[0].held || at[0].compacted != 0 {
		t.Fatalf("after the replay: %+v, want one call, held, no compaction", at)
	}
	if at[0].sublevels < l0 || at[0].sublevels >= 16 {
		t.Fatalf("L0 sublevels after the replay %d, want %d..15", at[0].sublevels, l0)
	}
	checkCounts(t, rb, n, func(i int) (int64, bool) { return int64(5 * i), true })
	checkBlobs := func() {
		t.Helper()
		bs := must1(GetValueState(rb, ValueStateDescriptor[[]byte]{Name: "blob", Serializer: BytesSerializer{}}))(t)
		r := rb.KeyGroupRange()
		got := 0
		for i := range blobs {
			k := []byte(fmt.Sprintf("k%06d", i))
			if !r.Contains(keygroup.Assign(k, testMaxP)) {
				continue
			}
			rb.SetCurrentKey(k)
			v, ok, err := bs.Value()
			if err != nil || !ok || !bytes.Equal(v, blob(i)) {
				t.Fatalf("blob k%06d: %d bytes, %t, %v; want %d bytes of %q", i, len(v), ok, err, blobLen, rune('a'+i%26))
			}
			got++
		}
		if got != blobs {
			t.Fatalf("checked %d blobs, want %d", got, blobs)
		}
	}
	checkBlobs()
	// Released: flushes that pass the compaction threshold are compacted
	// (a bounded wait on the outcome, no time asserted).
	rdb := rb.(*pebbleBackend).st.db
	rs := must1(GetValueState(rb, ValueStateDescriptor[int64]{Name: "count", Serializer: Int64Serializer{}}))(t)
	for f := range 8 {
		for i := range 100 {
			k := (f*100 + i*89) % n
			rb.SetCurrentKey([]byte(fmt.Sprintf("k%06d", k)))
			must(t, rs.Update(int64(5*k)))
		}
		must(t, rdb.Flush())
	}
	for rdb.Metrics().Compact.Count == 0 || rdb.Metrics().Levels[0].Sublevels >= 16 {
		time.Sleep(10 * time.Millisecond)
	}
	checkCounts(t, rb, n, func(i int) (int64, bool) { return int64(5 * i), true })
	checkBlobs()
}

// TestRemoteRestoreHeldFailsThenRestores: a restore that fails in its
// replay (a corrupt delta object) while its compactions are held and
// Pebble wants one returns ErrCorrupt, leaves no goroutine of its
// scheduler behind (goleak in TestMain), and a restore of the repaired
// object is exact and compacts once released.
func TestRemoteRestoreHeldFailsThenRestores(t *testing.T) {
	cfg := testConfig(t, kindPebbleRemote)
	cfg.WriteCacheBytes = -1
	cfg.L0CompactionThreshold = 1000
	const n, l0 = 4_000, 6
	src := open(t, cfg)
	db := src.(*pebbleBackend).st.db
	fillCounts(t, src, n, func(i int) int64 { return int64(i) })
	must(t, db.Flush())
	must(t, db.Compact(t.Context(), keyGroupsStart, []byte{0xff, 0xff}, false))
	s := must1(GetValueState(src, ValueStateDescriptor[int64]{Name: "count", Serializer: Int64Serializer{}}))(t)
	for f := range l0 {
		for i := range 100 {
			src.SetCurrentKey([]byte(fmt.Sprintf("k%06d", (f*100+i*97)%n)))
			must(t, s.Update(-1))
		}
		must(t, db.Flush())
	}
	remoteCheckpoint(t, src, cfg, 1)
	fillCounts(t, src, n, func(i int) int64 { return int64(7 * i) })
	rh, _ := remoteCheckpoint(t, src, cfg, 2)
	must(t, src.Close())
	var h keyedHandle
	must(t, h.UnmarshalJSON(rh.Handle))
	if len(h.Deltas) != 1 {
		t.Fatalf("checkpoint 2 has %d deltas, want 1", len(h.Deltas))
	}
	obj := filepath.Join(cfg.Remote.Dir, h.Deltas[0].Name)
	good := must1(os.ReadFile(obj))(t)
	bad := bytes.Clone(good)
	bad[len(bad)/2] ^= 0xff
	must(t, os.WriteFile(obj, bad, 0o644))

	hooked := 0
	restoreHeldHook = func(*pebble.DB, bool) { hooked++ }
	t.Cleanup(func() { restoreHeldHook = nil })
	rc := cfg
	rc.Dir = filepath.Join(t.TempDir(), "bad")
	rc.L0CompactionThreshold = 2 // Pebble wants an L0 compaction during the restore
	if _, err := OpenBackendRestored(rc, []RestoreHandle{rh}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("restore of a corrupt delta: %v, want ErrCorrupt", err)
	}
	if hooked != 0 {
		t.Fatalf("hook ran %d times for a failed restore, want 0", hooked)
	}

	must(t, os.WriteFile(obj, good, 0o644))
	rc.Dir = filepath.Join(t.TempDir(), "good")
	rb, err := OpenBackendRestored(rc, []RestoreHandle{rh})
	must(t, err)
	t.Cleanup(func() { _ = rb.Close() })
	if hooked != 1 {
		t.Fatalf("hook ran %d times, want 1", hooked)
	}
	checkCounts(t, rb, n, func(i int) (int64, bool) { return int64(7 * i), true })
	rdb := rb.(*pebbleBackend).st.db
	for rdb.Metrics().Compact.Count == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	checkCounts(t, rb, n, func(i int) (int64, bool) { return int64(7 * i), true })
}

// TestRemoteRestoreFailedClosesBeforeRelease: a restore that fails after
// its ingestions closes the new DB while its compactions are still held,
// so no compaction the ingestions made Pebble want can start (and write
// objects into the store) for an instance that is thrown away.
func TestRemoteRestoreFailedClosesBeforeRelease(t *testing.T) {
	cfg := testConfig(t, kindPebbleRemote)
	cfg.WriteCacheBytes = -1
	cfg.L0CompactionThreshold = 1000
	const n = 2_000
	src := open(t, cfg)
	db := src.(*pebbleBackend).st.db
	fillCounts(t, src, n, func(i int) int64 { return int64(i) })
	must(t, db.Flush())
	remoteCheckpoint(t, src, cfg, 1)
	fillCounts(t, src, n, func(i int) int64 { return int64(3 * i) })
	rh, _ := remoteCheckpoint(t, src, cfg, 2)
	must(t, src.Close())
	var h keyedHandle
	must(t, h.UnmarshalJSON(rh.Handle))
	if len(h.Deltas) != 1 {
		t.Fatalf("checkpoint 2 has %d deltas, want 1", len(h.Deltas))
	}
	obj := filepath.Join(cfg.Remote.Dir, h.Deltas[0].Name)
	bad := must1(os.ReadFile(obj))(t)
	bad[len(bad)/2] ^= 0xff
	must(t, os.WriteFile(obj, bad, 0o644))

	var scheds []*restoreScheduler
	restoreSchedulerHook = func(s *restoreScheduler) { scheds = append(scheds, s) }
	t.Cleanup(func() { restoreSchedulerHook = nil })
	rc := cfg
	rc.Dir = filepath.Join(t.TempDir(), "bad")
	if replayMayStall(1, h.Deltas[0].Size, rc.L0CompactionThreshold) {
		t.Fatal("the replay would release the hold early: the test needs it held until the failure")
	}
	if _, err := OpenBackendRestored(rc, []RestoreHandle{rh}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("restore of a corrupt delta: %v, want ErrCorrupt", err)
	}
	if len(scheds) != 1 {
		t.Fatalf("%d restore schedulers, want 1", len(scheds))
	}
	s := scheds[0]
	s.mu.Lock()
	stopped, heldAtStop, held := s.stopped, s.heldAtStop, s.held
	s.mu.Unlock()
	if !stopped || !heldAtStop {
		t.Fatalf("failed restore: scheduler stopped %v, held when the DB closed %v; want the DB closed while held", stopped, heldAtStop)
	}
	if held {
		t.Fatal("failed restore: the hold was never released")
	}
}
