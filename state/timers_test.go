package state

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kstreamd/kstreamd/state/keygroup"
)

// TestTimerQueue registers 1,000 event-time timers (each twice) and a few
// processing-time ones on both backends, deletes some, snapshots, restores
// at parallelism 2 (each half reads only its key groups' timers), and fires
// everything: every timer exactly once, in time order, and no entry left.
func TestTimerQueue(t *testing.T) {
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			b := open(t, testConfig(t, kind))
			q := must1(NewTimerQueue(b))(t)
			want := map[string]bool{}
			for i := range 1000 {
				key := []byte(fmt.Sprintf("k%04d", i))
				ts := int64(10_000 + i%10)
				for rep := range 2 {
					added := must1(q.Register(EventTime, key, ts))(t)
					if added != (rep == 0) {
						t.Fatalf("Register %s@%d #%d: added %v", key, ts, rep, added)
					}
				}
				want[fmt.Sprintf("e %s %d", key, ts)] = true
			}
			for i := range 5 {
				key := []byte(fmt.Sprintf("k%04d", i))
				must1(q.Register(ProcessingTime, key, 500))(t)
				want[fmt.Sprintf("p %s 500", key)] = true
			}
			must(t, q.Delete(EventTime, []byte("k0000"), 10_000))
			must(t, q.Delete(ProcessingTime, []byte("k0001"), 500))
			must(t, q.Delete(EventTime, []byte("absent"), 1)) // absent is fine
			delete(want, "e k0000 10000")
			delete(want, "p k0001 500")
			if got := q.Len(EventTime) + q.Len(ProcessingTime); got != len(want) || storedEntries(t, b) != len(want) {
				t.Fatalf("%d timers, %d entries, want %d", got, storedEntries(t, b), len(want))
			}
			dir := filepath.Join(t.TempDir(), "chk")
			ks := snapshotOf(t, b, dir, "")
			got := map[string]bool{}
			for sub := range 2 {
				cfg := testConfig(t, kind)
				cfg.KeyGroupRange = keygroup.RangeFor(testMaxP, 2, sub)
				r, err := OpenBackendRestored(cfg, []RestoreHandle{{Handle: ks.Handle, Dir: dir}})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = r.Close() })
				rq := must1(NewTimerQueue(r))(t)
				for _, d := range []TimeDomain{EventTime, ProcessingTime} {
					var last int64
					if _, ok, _ := rq.PopDue(d, 499); ok && d == ProcessingTime {
						t.Fatal("a processing timer at 500 fired at 499")
					}
					for {
						tm, ok, err := rq.PopDue(d, 1<<40)
						must(t, err)
						if !ok {
							break
						}
						if !cfg.KeyGroupRange.Contains(keygroup.Assign(tm.Key, testMaxP)) || tm.Timestamp < last {
							t.Fatalf("subtask %d fired %s@%d (after %d)", sub, tm.Key, tm.Timestamp, last)
						}
						last = tm.Timestamp
						id := fmt.Sprintf("%c %s %d", "ep"[d], tm.Key, tm.Timestamp)
						if got[id] {
							t.Fatalf("%s fired twice", id)
						}
						got[id] = true
					}
				}
				if n := storedEntries(t, r); n != 0 {
					t.Fatalf("subtask %d: %d entries left after firing every timer", sub, n)
				}
			}
			if len(got) != len(want) {
				missing := []string{}
				for id := range want {
					if !got[id] {
						missing = append(missing, id)
					}
				}
				slices.Sort(missing)
				t.Fatalf("fired %d timers, want %d; missing %v", len(got), len(want), missing[:min(5, len(missing))])
			}
		})
	}
}
