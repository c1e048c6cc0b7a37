package state

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/kstreamd/kstreamd/state/keygroup"
)

// TestRemoteRetentionAcrossRestores: retention that keeps only the newest
// checkpoint (here: garbage collection with exactly the newest handles'
// objects referenced, or none) never deletes an object a live restored
// instance or the newest checkpoint needs, through a rescale into two
// halves (each half's virtual tables over the first instance's objects,
// then compacted into its own), a collection with nothing referenced
// while the halves live, and a merge back into one: every instance reads
// exactly what was written, and so does the restore of each newest
// checkpoint after the instances that wrote it closed.
func TestRemoteRetentionAcrossRestores(t *testing.T) {
	forRemoteKinds(t, func(t *testing.T, kind string) {
		cfg := testConfig(t, kind)
		cfg.WriteCacheBytes = -1
		const n = 3000
		collect := func(step string, handles ...KeyedSnapshot) {
			t.Helper()
			refs := map[string]bool{}
			for _, h := range handles {
				for _, f := range h.SharedFiles {
					refs[strings.TrimPrefix(f, "../"+RemoteDirName+"/")] = true
				}
			}
			deleted, err := CollectRemoteGarbage(testStore(t, cfg), refs)
			t.Logf("%s: deleted %d objects", step, len(deleted))
			if err != nil {
				t.Fatalf("%s: %v", step, err)
			}
			for name := range refs {
				if _, err := testStore(t, cfg).Size(name); err != nil {
					t.Fatalf("%s: referenced object %s: %v", step, name, err)
				}
			}
		}
		compact := func(b KeyedStateBackend) {
			t.Helper()
			must(t, b.(*pebbleBackend).st.db.Flush())
			must(t, b.(*pebbleBackend).st.db.Compact(context.Background(), keyGroupsStart, keyGroupsEnd, true))
		}
		a := open(t, cfg)
		fillCounts(t, a, n, func(i int) int64 { return int64(i) })
		compact(a)
		rhA, snapA := remoteCheckpoint(t, a, cfg, 1)
		must(t, a.Close())
		collect("after the first instance closed", snapA)

		// Two halves restored from A: nothing referenced while they live; the
		// markers of their restores keep A's objects.
		ranges := []keygroup.Range{{Start: 0, End: testMaxP/2 - 1}, {Start: testMaxP / 2, End: testMaxP - 1}}
		halves := make([]KeyedStateBackend, 2)
		hcfgs := make([]BackendConfig, 2)
		for i, r := range ranges {
			hc := cfg
			hc.Dir, hc.KeyGroupRange = t.TempDir(), r
			hb, err := OpenBackendRestored(hc, []RestoreHandle{rhA})
			must(t, err)
			t.Cleanup(func() { _ = hb.Close() })
			halves[i], hcfgs[i] = hb, hc
		}
		collect("while the halves live, nothing referenced")
		for _, hb := range halves {
			checkCounts(t, hb, n, func(k int) (int64, bool) { return int64(k), true })
			// Half the keys change, then a compaction rewrites the virtual
			// tables into the half's own objects.
			fillOwned(t, hb, n/2, func(k int) int64 { return int64(k * 2) })
			compact(hb)
			checkCounts(t, hb, n, func(k int) (int64, bool) {
				if k < n/2 {
					return int64(k * 2), true
				}
				return int64(k), true
			})
		}
		var rhs []RestoreHandle
		var snaps []KeyedSnapshot
		for round := 2; round <= 3; round++ {
			rhs, snaps = nil, nil
			for i, hb := range halves {
				fillOwned(t, hb, n, func(k int) int64 { return int64(k * round * 10) })
				if round == 3 {
					compact(hb)
				}
				rh, snap := remoteCheckpoint(t, hb, hcfgs[i], 10*round+i)
				rhs, snaps = append(rhs, rh), append(snaps, snap)
			}
			collect("after the halves' checkpoint", snaps...)
			for _, hb := range halves {
				checkCounts(t, hb, n, func(k int) (int64, bool) { return int64(k * round * 10), true })
			}
		}
		for _, hb := range halves {
			must(t, hb.Close())
		}
		collect("after the halves closed", snaps...)

		// Back into one, compacted, checkpointed; retention keeps only its
		// checkpoint; a restore of it after close reads everything.
		wc := cfg
		wc.Dir = t.TempDir()
		w, err := OpenBackendRestored(wc, rhs)
		must(t, err)
		t.Cleanup(func() { _ = w.Close() })
		want := func(k int) (int64, bool) { return int64(k * 30), true }
		checkCounts(t, w, n, want)
		collect("while the merged instance lives, nothing referenced")
		checkCounts(t, w, n, want)
		compact(w)
		rhW, snapW := remoteCheckpoint(t, w, wc, 40)
		collect("after the merged instance's checkpoint", snapW)
		must(t, w.Close())
		collect("after the merged instance closed", snapW)
		lc := cfg
		lc.Dir = t.TempDir()
		last, err := OpenBackendRestored(lc, []RestoreHandle{rhW})
		must(t, err)
		defer last.Close()
		checkCounts(t, last, n, want)
	})
}

// fillOwned is fillCounts over the keys of b's key groups only.
func fillOwned(t testing.TB, b KeyedStateBackend, n int, v func(i int) int64) {
	t.Helper()
	s := must1(GetValueState(b, ValueStateDescriptor[int64]{Name: "count", Serializer: Int64Serializer{}}))(t)
	r := b.KeyGroupRange()
	for i := range n {
		k := []byte(fmt.Sprintf("k%06d", i))
		if !r.Contains(keygroup.Assign(k, testMaxP)) {
			continue
		}
		b.SetCurrentKey(k)
		must(t, s.Update(v(i)))
	}
}
