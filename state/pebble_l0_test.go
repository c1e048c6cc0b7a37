package state

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// TestL0Thresholds: a Pebble backend compacts L0 at
// BackendConfig.L0CompactionThreshold sublevels (16 by default, not
// Pebble's 4) and stops writes at 3 times it.
func TestL0Thresholds(t *testing.T) {
	for _, tc := range []struct{ n, compact, stop int }{
		{0, 16, 48}, {-1, 16, 48}, {4, 4, 12}, {10, 10, 30},
	} {
		var o pebble.Options
		setL0Thresholds(&o, tc.n)
		if o.L0CompactionThreshold != tc.compact || o.L0StopWritesThreshold != tc.stop {
			t.Fatalf("n=%d: thresholds %d/%d, want %d/%d", tc.n, o.L0CompactionThreshold, o.L0StopWritesThreshold, tc.compact, tc.stop)
		}
	}
}

// TestL0ThresholdHuge: a threshold whose 3 times overflows an int (the
// config only refuses negatives) opens a backend, with writes stopping
// at the largest int, not at a wrapped negative that Pebble replaces by
// its 12 and then refuses as below the compaction threshold.
func TestL0ThresholdHuge(t *testing.T) {
	n := math.MaxInt/L0StopWritesFactor + 1
	var o pebble.Options
	setL0Thresholds(&o, n)
	if o.L0CompactionThreshold != n || o.L0StopWritesThreshold != math.MaxInt {
		t.Fatalf("n=%d: thresholds %d/%d, want %d/%d", n, o.L0CompactionThreshold, o.L0StopWritesThreshold, n, math.MaxInt)
	}
	cfg := testConfig(t, KindPebble)
	cfg.L0CompactionThreshold = n
	b, err := OpenBackend(cfg)
	if err != nil {
		t.Fatalf("l0 compaction threshold %d: %v", n, err)
	}
	must(t, b.Close())
}

// TestRemoteRestoreIngestionsPerL0Table counts what a restore of remote
// state costs per L0 table: 12 overlapping flushes (each spans every key
// group) left in L0 (threshold 1000) are 12 L0 tables in the checkpoint
// and 12 ingestions at its restore, one each (overlapping tables cannot
// share one), plus one per deeper level; a table holding metadata adds
// none (one snapshot restored up to its last key group: the table's key
// groups and metadata are one piece); with Pebble's threshold of 4 the settled LSM has fewer than 4
// L0 tables and the restore as many fewer ingestions. Values read back
// exact both ways.
func TestRemoteRestoreIngestionsPerL0Table(t *testing.T) {
	const keys, flushes = 300, 12
	for _, threshold := range []int{1000, 4} {
		t.Run(fmt.Sprintf("threshold=%d", threshold), func(t *testing.T) {
			root := t.TempDir()
			cfg := BackendConfig{Kind: KindPebble, Dir: filepath.Join(root, "a"), MaxParallelism: testMaxP,
				KeyGroupRange: keygroup.Range{Start: 0, End: testMaxP - 1}, WriteCacheBytes: -1, L0CompactionThreshold: threshold,
				Remote: &RemoteConfig{Dir: filepath.Join(root, RemoteDirName), CacheBytes: 1 << 20}}
			b := open(t, cfg)
			db := b.(*pebbleBackend).st.db
			s := must1(GetValueState(b, ValueStateDescriptor[int64]{Name: "count", Serializer: Int64Serializer{}}))(t)
			for f := range flushes {
				for i := range keys {
					b.SetCurrentKey([]byte(fmt.Sprintf("k%06d", i)))
					must(t, s.Update(int64(f*keys+i)))
				}
				must(t, db.Flush())
			}
			// Pebble starts an L0 compaction after a flush that reaches
			// the threshold: wait until none runs and L0 is below it.
			for {
				m := db.Metrics()
				if m.Compact.NumInProgress == 0 && int(m.Levels[0].Sublevels) < threshold {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			rh, _ := remoteCheckpoint(t, b, cfg, 1)
			var h keyedHandle
			must(t, json.Unmarshal(rh.Handle, &h))
			l0, deeper, meta := 0, map[int]bool{}, 0
			for _, f := range h.Files {
				if _, ok := clipExternal(f, keyGroupsEnd, nil); ok {
					meta++
				}
				if f.Level == 0 {
					l0++
				} else {
					deeper[f.Level] = true
				}
			}
			switch {
			case meta == 0:
				t.Errorf("checkpoint names no table holding metadata")
			case threshold == 1000 && l0 != flushes:
				t.Errorf("checkpoint names %d L0 tables, want the %d flushes", l0, flushes)
			case threshold == 4 && l0 >= threshold:
				t.Errorf("checkpoint names %d L0 tables after the compactions settled, want fewer than %d", l0, threshold)
			}
			must(t, b.Close())

			rcfg := cfg
			rcfg.Dir = filepath.Join(root, "b")
			nb := must1(OpenBackendRestored(rcfg, []RestoreHandle{rh}))(t)
			t.Cleanup(func() { _ = nb.Close() })
			if n, want := nb.(*pebbleBackend).st.remote.ingestions.Load(), int64(len(deeper)+l0); n != want {
				t.Errorf("restore of %d L0 tables and %d deeper levels (%d with metadata, in the same pieces) ran %d ingestions, want %d", l0, len(deeper), meta, n, want)
			}
			checkCounts(t, nb, keys, func(i int) (int64, bool) { return int64((flushes-1)*keys + i), true })
		})
	}
}
