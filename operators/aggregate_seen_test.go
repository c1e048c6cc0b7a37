package operators

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// TestSeenFilterNoFalseAbsent adds 200,000 entries (past the first
// layer) and checks that every one is found, and that of 100,000 others
// at most 3% are said "maybe" (about 1% per layer, two layers).
func TestSeenFilterNoFalseAbsent(t *testing.T) {
	var s seenFilter
	s.reset()
	gen := s.gen
	r := rand.New(rand.NewPCG(1, 2))
	added := make([]uint64, 200_000)
	for i := range added {
		added[i] = r.Uint64()
		s.add(added[i])
	}
	if len(s.layers) != 2 || s.gen != gen {
		t.Fatalf("layers %d, generation %d (was %d): want 2 layers in the same generation", len(s.layers), s.gen, gen)
	}
	for i, x := range added {
		if !s.has(x) {
			t.Fatalf("entry %d added but not found", i)
		}
	}
	maybe := 0
	for range 100_000 {
		if s.has(r.Uint64()) {
			maybe++
		}
	}
	if maybe > 3_000 {
		t.Fatalf("%d of 100000 entries never added said maybe", maybe)
	}
	s.reset()
	if s.gen == gen || len(s.layers) != 0 || s.has(added[0]) {
		t.Fatalf("reset: generation %d (was %d), %d layers, first entry found %v", s.gen, gen, len(s.layers), s.has(added[0]))
	}
}

// TestSeenFilterStartsOverAtBound: the layer that would pass seenMaxWords
// starts the filter over in a new generation, holding the entry added.
func TestSeenFilterStartsOverAtBound(t *testing.T) {
	var s seenFilter
	s.reset()
	gen := s.gen
	s.add(1)
	s.words = seenMaxWords // as if the layers had grown to the bound
	s.added = len(s.layers[0]) * 64 / seenBitsPerEntry
	s.add(2)
	if s.gen == gen || len(s.layers) != 1 || s.words != seenFirstWords || !s.has(2) || s.added != 1 {
		t.Fatalf("generation %d (was %d), %d layers, %d words, entry found %v, added %d", s.gen, gen, len(s.layers), s.words, s.has(2), s.added)
	}
}

// countingMap counts the Gets of a MapState.
type countingMap struct {
	state.MapState[string, []byte]
	gets *int
}

func (m countingMap) Get(uk string) ([]byte, bool, error) {
	*m.gets++
	return m.MapState.Get(uk)
}

// TestAggregateSeenFilterReads checks which count_distinct values the
// aggregate reads from its MapState on Pebble: none of a key whose first
// record it processed, except values the key has seen (100 new users,
// then 10 repeated: 10 reads); every value after the filter starts over
// (a new generation) and after a restore (the marks are never stored).
// The outputs count right throughout, on both backends (the hashmap
// backend keeps values serialized, so the marks do not last there and
// every read happens: a map lookup).
func TestAggregateSeenFilterReads(t *testing.T) {
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			p := AggregateParams{Aggregates: []AggregateSpec{
				{Name: "users", Fn: AggCountDistinct, Of: compiled(t, "user")},
			}}
			dir := t.TempDir()
			var recs []runtime.Record
			for i := range 100 {
				recs = append(recs, payment("a", 1, fmt.Sprint("u", i)))
			}
			for i := range 10 {
				recs = append(recs, payment("a", 1, fmt.Sprint("u", i)))
			}
			agg := NewAggregate(p, false)
			h, err := openStateful(t, kind, dir, nil, nil, agg)
			if err != nil {
				t.Fatal(err)
			}
			gets := 0
			agg.sets[0] = countingMap{agg.sets[0], &gets}
			bad := &recordErrors{}
			h.feed(bad, recs...)
			pebble := kind == state.KindPebble
			if pebble && gets != 10 {
				t.Fatalf("born key: %d reads, want 10 (the repeated users)", gets)
			}
			agg.seen.reset() // as at the filter's bound: key a is no longer vouched for
			h.feed(bad, payment("a", 1, "new1"), payment("a", 1, "u1"))
			if pebble && gets != 12 {
				t.Fatalf("after the filter started over: %d reads, want 12", gets)
			}
			got := upserts(t, h.emitted())
			restore := snapshotRestore(t, h)
			agg = NewAggregate(p, false)
			h, err = openStateful(t, kind, t.TempDir(), nil, restore, agg)
			if err != nil {
				t.Fatal(err)
			}
			gets = 0
			agg.sets[0] = countingMap{agg.sets[0], &gets}
			h.feed(bad, payment("a", 1, "new2"), payment("a", 1, "u2"), payment("b", 1, "u2"), payment("b", 1, "u3"))
			if pebble && gets != 2 {
				t.Fatalf("after the restore: %d reads, want 2 (key a's values; b is new)", gets)
			}
			got = append(got[len(got)-2:], upserts(t, h.finish())...)
			if len(bad.errs) > 0 {
				t.Fatalf("bad records %v", bad.errs)
			}
			want := []string{
				`{"key":"a","users":101}`, `{"key":"a","users":101}`,
				`{"key":"a","users":102}`, `{"key":"a","users":102}`,
				`{"key":"b","users":1}`, `{"key":"b","users":2}`,
			}
			if g := values(got); !reflect.DeepEqual(g, want) {
				t.Fatalf("outputs\n%q\nwant\n%q", g, want)
			}
		})
	}
}

// TestAggregateSeenFilterModel folds random inserts and retractions (a
// changelog input: count_distinct and min keep counted maps) of 6 keys
// over 8 values through the aggregate, sync and async on both backends,
// with the filter started over and the state restored in between, and
// checks each key's last row against a model (the distinct values and the
// least one of the key's records still in).
func TestAggregateSeenFilterModel(t *testing.T) {
	for _, kind := range backends {
		for _, mode := range modes {
			t.Run(kind+"/"+mode, func(t *testing.T) {
				p := AggregateParams{Aggregates: []AggregateSpec{
					{Name: "users", Fn: AggCountDistinct, Of: compiled(t, "user")},
					{Name: "least", Fn: AggMin, Of: compiled(t, "amount")},
				}}
				r := rand.New(rand.NewPCG(7, uint64(len(kind+mode))))
				in := map[string][][2]int{} // key -> records in: (amount, user)
				last := map[string]string{}
				dir := t.TempDir()
				var restore *Restore
				for round := range 4 {
					fn := aggFn(mode, p, true)
					h, err := openStateful(t, kind, dir, nil, restore, fn)
					if err != nil {
						t.Fatal(err)
					}
					var recs []runtime.Record
					for range 150 {
						k := fmt.Sprint("k", r.IntN(6))
						rows := in[k]
						if len(rows) > 0 && r.IntN(3) == 0 {
							i := r.IntN(len(rows))
							recs = append(recs, changed(runtime.ChangeDelete, k, rows[i][0], fmt.Sprint("u", rows[i][1])))
							in[k] = append(rows[:i], rows[i+1:]...)
							continue
						}
						row := [2]int{r.IntN(20), r.IntN(8)}
						recs = append(recs, changed(runtime.ChangeInsert, k, row[0], fmt.Sprint("u", row[1])))
						in[k] = append(in[k], row)
					}
					bad := &recordErrors{}
					for c := 0; c < len(recs); c += 25 { // at most 50 rows: the harness's channel holds 256
						if c == 75 && round%2 == 1 {
							switch f := fn.(type) {
							case *Aggregate:
								f.seen.reset()
							case *AsyncAggregate:
								f.seen.reset()
							}
						}
						h.feed(bad, recs[c:c+25]...)
						for _, rec := range h.emitted() {
							if rec.Change == runtime.ChangeDelete {
								delete(last, string(rec.Key))
							} else if rec.Change != runtime.ChangeUpdateBefore {
								last[string(rec.Key)] = string(rec.Value)
							}
						}
					}
					if len(bad.errs) > 0 {
						t.Fatalf("bad records %v", bad.errs)
					}
					restore = snapshotRestore(t, h)
					dir = t.TempDir()
				}
				want := map[string]string{}
				for k, rows := range in {
					if len(rows) == 0 {
						continue
					}
					users, least := map[int]bool{}, rows[0][0]
					for _, row := range rows {
						users[row[1]] = true
						least = min(least, row[0])
					}
					want[k] = fmt.Sprintf(`{"key":%q,"users":%d,"least":%d}`, k, len(users), least)
				}
				if !reflect.DeepEqual(last, want) {
					t.Fatalf("last rows\n%v\nwant\n%v", last, want)
				}
			})
		}
	}
}
