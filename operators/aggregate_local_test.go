package operators

import (
	"fmt"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// writeCountingMap counts the Gets, Puts and Removes of a MapState, per
// user key.
type writeCountingMap struct {
	state.MapState[string, []byte]
	gets, puts, removes map[string]int
}

func newWriteCountingMap(m state.MapState[string, []byte]) *writeCountingMap {
	return &writeCountingMap{MapState: m, gets: map[string]int{}, puts: map[string]int{}, removes: map[string]int{}}
}

func (m *writeCountingMap) Get(uk string) ([]byte, bool, error) {
	m.gets[uk]++
	return m.MapState.Get(uk)
}

func (m *writeCountingMap) Put(uk string, v []byte) error {
	m.puts[uk]++
	return m.MapState.Put(uk, v)
}

func (m *writeCountingMap) Remove(uk string) error {
	m.removes[uk]++
	return m.MapState.Remove(uk)
}

// total returns the sum of counts.
func total(counts map[string]int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

// localHarness opens the aggregate of distinctFilterSpecs with mini_batch
// (one batch per feed; ttl: with a state_ttl of an hour, which nothing
// reaches) on kind, the seen filter vouching for no key (every value of a
// known key not in the batch's table is read), and returns it with its
// count_distinct maps counting.
func localHarness(t *testing.T, kind string, changelog, ttl bool) (*harness, *Aggregate, map[string]*writeCountingMap) {
	t.Helper()
	p := AggregateParams{Aggregates: distinctFilterSpecs(t, changelog), MiniBatch: &MiniBatchParams{Size: 1000}}
	if ttl {
		p.StateTTL = StateTTLParams{TTL: time.Hour}
	}
	agg := NewAggregate(p, changelog)
	h, err := openStateful(t, kind, t.TempDir(), nil, nil, agg)
	if err != nil {
		t.Fatal(err)
	}
	agg.seen.gen = 0
	maps := map[string]*writeCountingMap{}
	for j, i := range agg.maps {
		if agg.specs[i].Fn == AggCountDistinct {
			m := newWriteCountingMap(agg.sets[j])
			agg.sets[j] = m
			maps[agg.specs[i].Name] = m
		}
	}
	return h, agg, maps
}

// lastRows returns each key's last +I or +U row of recs (a -D drops it).
func lastRows(recs []runtime.Record) map[string]string {
	last := map[string]string{}
	for _, r := range recs {
		switch r.Change {
		case runtime.ChangeDelete:
			delete(last, string(r.Key))
		case runtime.ChangeInsert, runtime.ChangeUpdateAfter:
			last[string(r.Key)] = string(r.Value)
		}
	}
	return last
}

// entry returns key k's entry of user key uk in m ("" and false: none).
func entry(t *testing.T, agg *Aggregate, m state.MapState[string, []byte], k, uk string) (string, bool) {
	t.Helper()
	agg.backend.SetCurrentKey([]byte(k))
	v, ok, err := m.Get(uk)
	if err != nil {
		t.Fatal(err)
	}
	return string(v), ok
}

// TestAggregateMiniBatchReadsEntryOnce: within a mini-batch a key's
// count_distinct entry is read from the state once and written back once,
// however many of the batch's records hold its value: a second batch of
// six bids of two users (and four passing mid_amounts' filter, two of one
// amount) on a key with a stored row reads users' map twice (not six
// times) and writes each changed entry once, mid_amounts' three times;
// rows and stored masks are exact.
func TestAggregateMiniBatchReadsEntryOnce(t *testing.T) {
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			h, agg, maps := localHarness(t, kind, false, false)
			bad := &recordErrors{}
			h.feed(bad, payment("k", 3, "u1"))
			users, mid := maps["users"], maps["mid_amounts"]
			clear(users.gets)
			clear(users.puts)
			h.feed(bad, payment("k", 13, "u1"), payment("k", 9, "u2"), payment("k", 1, "u2"),
				payment("k", 5, "u1"), payment("k", 3, "u1"), payment("k", 9, "u2"))
			if len(bad.errs) > 0 {
				t.Fatalf("bad records %v", bad.errs)
			}
			if total(users.gets) != 2 || users.gets[`"u1"`] != 1 || users.gets[`"u2"`] != 1 {
				t.Fatalf("users' map reads %v, want one of each user", users.gets)
			}
			if total(users.puts) != 2 || total(users.removes) != 0 {
				t.Fatalf("users' map puts %v removes %v, want one put of each user", users.puts, users.removes)
			}
			if total(mid.gets) != 3 || total(mid.puts) != 3 {
				t.Fatalf("mid_amounts' map reads %v puts %v, want one of 13, 9 and 5 each", mid.gets, mid.puts)
			}
			want := `{"key":"k","n":7,"users":2,"low_users":2,"high_users":1,"mid_amounts":3,"low_users2":2}`
			if got := lastRows(h.emitted())["k"]; got != want {
				t.Fatalf("row %s, want %s", got, want)
			}
			for user, mask := range map[string]string{`"u1"`: "m\x0f", `"u2"`: "m\x0b"} {
				if v, ok := entry(t, agg, users.MapState, "k", user); !ok || v != mask {
					t.Fatalf("entry of %s: %q %t, want %q", user, v, ok, mask)
				}
			}
			for _, a := range []string{"13", "9", "5"} {
				if _, ok := entry(t, agg, mid.MapState, "k", a); !ok {
					t.Fatalf("mid_amounts' entry of %s absent", a)
				}
			}
			h.finish()
		})
	}
}

// TestAggregateMiniBatchRetractWithinBatch: over a changelog, a value
// added and retracted within one batch (u2) is read once and never
// written (it was not stored before the batch and is not after); a value
// retracted and added again (u1 at 3) and a new one (u3) are written once
// each; the row is the model's and the stored counts exact.
func TestAggregateMiniBatchRetractWithinBatch(t *testing.T) {
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			h, agg, maps := localHarness(t, kind, true, false)
			bad := &recordErrors{}
			h.feed(bad, changed(runtime.ChangeInsert, "k", 3, "u1"), changed(runtime.ChangeInsert, "k", 13, "u1"))
			users := maps["users"]
			clear(users.gets)
			clear(users.puts)
			h.feed(bad, changed(runtime.ChangeInsert, "k", 9, "u2"), changed(runtime.ChangeDelete, "k", 9, "u2"),
				changed(runtime.ChangeInsert, "k", 6, "u3"), changed(runtime.ChangeDelete, "k", 3, "u1"),
				changed(runtime.ChangeInsert, "k", 3, "u1"))
			if len(bad.errs) > 0 {
				t.Fatalf("bad records %v", bad.errs)
			}
			if total(users.gets) != 3 || users.gets[`"u2"`] != 1 {
				t.Fatalf("users' map reads %v, want one of each of u1, u2, u3", users.gets)
			}
			if users.puts[`"u2"`] != 0 || users.removes[`"u2"`] != 0 {
				t.Fatalf("u2 added and retracted in the batch: puts %d removes %d, want none", users.puts[`"u2"`], users.removes[`"u2"`])
			}
			if users.puts[`"u3"`] != 1 || users.puts[`"u1"`] > 1 || total(users.removes) != 0 {
				t.Fatalf("users' map puts %v removes %v, want u3 once, u1 at most once, no remove", users.puts, users.removes)
			}
			want := distinctModelRow("k", [][2]int{{13, 1}, {6, 3}, {3, 1}}, true)
			if got := lastRows(h.emitted())["k"]; got != want {
				t.Fatalf("row %s, want %s", got, want)
			}
			if _, ok := entry(t, agg, users.MapState, "k", `"u2"`); ok {
				t.Fatal("u2's entry stored after its retraction")
			}
			// Counts of users, low_users, high_users, low_users2.
			for user, counts := range map[string]string{`"u1"`: "c\x02\x01\x01\x01", `"u3"`: "c\x01\x01\x00\x01"} {
				if v, ok := entry(t, agg, users.MapState, "k", user); !ok || v != counts {
					t.Fatalf("entry of %s: %q %t, want %q", user, v, ok, counts)
				}
			}
			h.finish()
		})
	}
}

// TestAggregateMiniBatchClearDropsBatchEntries: a batch that empties a key
// (its maps cleared) while its table holds a changed entry (u2, added
// earlier in the batch) and then fills it again writes nothing of the
// entries before the clear: u2 is absent after the batch, so a later u2
// counts as a new user. With state_ttl the fold also clears the maps at
// the insertion after the key emptied (its values of an expired run).
func TestAggregateMiniBatchClearDropsBatchEntries(t *testing.T) {
	for _, kind := range backends {
		for _, ttl := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/ttl=%t", kind, ttl), func(t *testing.T) {
				h, agg, maps := localHarness(t, kind, true, ttl)
				bad := &recordErrors{}
				h.feed(bad, changed(runtime.ChangeInsert, "k", 3, "u1"))
				h.feed(bad, changed(runtime.ChangeInsert, "k", 9, "u2"), changed(runtime.ChangeDelete, "k", 3, "u1"),
					changed(runtime.ChangeDelete, "k", 9, "u2"), changed(runtime.ChangeInsert, "k", 9, "u1"))
				users := maps["users"]
				if _, ok := entry(t, agg, users.MapState, "k", `"u2"`); ok {
					t.Fatal("u2's entry stored after the key was emptied")
				}
				if v, ok := entry(t, agg, users.MapState, "k", `"u1"`); !ok || v != "c\x01\x00\x00\x00" {
					t.Fatalf("entry of u1: %q %t, want %q", v, ok, "c\x01\x00\x00\x00")
				}
				h.feed(bad, changed(runtime.ChangeInsert, "k", 9, "u2"))
				if len(bad.errs) > 0 {
					t.Fatalf("bad records %v", bad.errs)
				}
				want := distinctModelRow("k", [][2]int{{9, 1}, {9, 2}}, true)
				if got := lastRows(h.emitted())["k"]; got != want {
					t.Fatalf("row %s, want %s", got, want)
				}
				h.finish()
			})
		}
	}
}
