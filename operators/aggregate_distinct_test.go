package operators

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// distinctFilterSpecs are the aggregates of the count_distinct filter
// tests: four count_distinct over user (one unfiltered, three filtered, two
// of them with the same filter text) sharing one map, one filtered
// count_distinct over amount alone (a map of its own, its filter skipping
// records), a count and, over a changelog, a min (a multiset map between
// the shared one and the other).
func distinctFilterSpecs(t *testing.T, changelog bool) []AggregateSpec {
	specs := []AggregateSpec{
		{Name: "n", Fn: AggCount},
		{Name: "users", Fn: AggCountDistinct, Of: compiled(t, "user")},
		{Name: "low_users", Fn: AggCountDistinct, Of: compiled(t, "user"), Filter: boolCompiled(t, "amount < 7")},
	}
	if changelog {
		specs = append(specs, AggregateSpec{Name: "least", Fn: AggMin, Of: compiled(t, "amount")})
	}
	return append(specs,
		AggregateSpec{Name: "high_users", Fn: AggCountDistinct, Of: compiled(t, "user"), Filter: boolCompiled(t, "amount >= 12")},
		AggregateSpec{Name: "mid_amounts", Fn: AggCountDistinct, Of: compiled(t, "amount"), Filter: boolCompiled(t, "amount >= 5 && amount < 15")},
		AggregateSpec{Name: "low_users2", Fn: AggCountDistinct, Of: compiled(t, "user"), Filter: boolCompiled(t, "amount < 7")},
	)
}

// boolCompiled compiles src as a filter (a BoolExpression).
func boolCompiled(t *testing.T, src string) BoolExpression {
	t.Helper()
	var e BoolExpression
	if err := e.UnmarshalText([]byte(src)); err != nil {
		t.Fatal(err)
	}
	return e
}

// distinctModelRow is the row an independent model gives for a key's
// records still in (amount, user index): the distinct users in all, of
// amounts below 7 (twice) and from 12, and the distinct amounts in
// [5, 15).
func distinctModelRow(k string, rows [][2]int, changelog bool) string {
	users, low, high, mid := map[int]bool{}, map[int]bool{}, map[int]bool{}, map[int]bool{}
	least := rows[0][0]
	for _, r := range rows {
		users[r[1]] = true
		if r[0] < 7 {
			low[r[1]] = true
		}
		if r[0] >= 12 {
			high[r[1]] = true
		}
		if r[0] >= 5 && r[0] < 15 {
			mid[r[0]] = true
		}
		least = min(least, r[0])
	}
	lo := ""
	if changelog {
		lo = fmt.Sprintf(`,"least":%d`, least)
	}
	return fmt.Sprintf(`{"key":%q,"n":%d,"users":%d,"low_users":%d%s,"high_users":%d,"mid_amounts":%d,"low_users2":%d}`,
		k, len(rows), len(users), len(low), lo, len(high), len(mid), len(low))
}

// TestAggregateDistinctFilterModel folds random records of 6 keys (amounts
// 0-19, 8 users) through count_distinct aggregates with filters, on both
// backends, sync, async and with mini_batch, over an append-only input and
// over a changelog (random -D of rows in, so keys empty and fill again),
// restoring the state from a checkpoint between rounds, and checks every
// key's last row against an independent model of the distinct values of
// its records still in: the count_distinct over user share one map (a
// value's entry a mask, or per-aggregate counts over a changelog), and a
// retraction takes a value from exactly the aggregates whose filter the
// retracted record passes.
func TestAggregateDistinctFilterModel(t *testing.T) {
	for _, kind := range backends {
		for _, mode := range []string{"sync", "async", "mini_batch"} {
			for _, changelog := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/changelog=%t", kind, mode, changelog), func(t *testing.T) {
					p := AggregateParams{Aggregates: distinctFilterSpecs(t, changelog)}
					newFn := func() any {
						if mode == "mini_batch" {
							q := p
							q.MiniBatch = &MiniBatchParams{Size: 10}
							return NewAggregate(q, changelog)
						}
						return aggFn(mode, p, changelog)
					}
					r := rand.New(rand.NewPCG(44, uint64(len(kind+mode))))
					in := map[string][][2]int{}
					last := map[string]string{}
					dir := t.TempDir()
					var restore *Restore
					for range 4 {
						h, err := openStateful(t, kind, dir, nil, restore, newFn())
						if err != nil {
							t.Fatal(err)
						}
						var recs []runtime.Record
						for range 150 {
							k := fmt.Sprint("k", r.IntN(6))
							rows := in[k]
							if changelog && len(rows) > 0 && r.IntN(3) == 0 {
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
						for c := 0; c < len(recs); c += 25 {
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
						if len(rows) > 0 {
							want[k] = distinctModelRow(k, rows, changelog)
						}
					}
					if !reflect.DeepEqual(last, want) {
						t.Fatalf("last rows\n%v\nwant\n%v", last, want)
					}
				})
			}
		}
	}
}

// TestAggregateDistinctFilterSharesReads checks the state work of a group:
// the four count_distinct over user make one map (aggregate.users, with
// the shared serializer) and one read per record, not four; the filtered
// count_distinct over amount has a map of its own, read only for records
// its filter passes; the entries hold the mask of the aggregates that
// counted each value.
func TestAggregateDistinctFilterSharesReads(t *testing.T) {
	p := AggregateParams{Aggregates: distinctFilterSpecs(t, false)}
	agg := NewAggregate(p, false)
	if want := []int{1, 4}; !reflect.DeepEqual(agg.maps, want) {
		t.Fatalf("maps of specs %v, want %v", agg.maps, want)
	}
	if got := agg.groups[0].members; !reflect.DeepEqual(got, []int{1, 2, 3, 5}) {
		t.Fatalf("shared map's members %v, want [1 2 3 5]", got)
	}
	if len(agg.filters) != 3 {
		t.Fatalf("%d filter programs, want 3 (amount < 7 once)", len(agg.filters))
	}
	if d := agg.setDescriptor(0); d.Name != "aggregate.users" || d.ValueSerializer.Name() != distinctMembersSerializerName {
		t.Fatalf("shared map %q serializer %q", d.Name, d.ValueSerializer.Name())
	}
	if d := agg.setDescriptor(1); d.Name != "aggregate.mid_amounts" || d.ValueSerializer.Name() != "bytes" {
		t.Fatalf("own map %q serializer %q", d.Name, d.ValueSerializer.Name())
	}
	h, err := openStateful(t, state.KindPebble, t.TempDir(), nil, nil, agg)
	if err != nil {
		t.Fatal(err)
	}
	var userGets, amountGets int
	agg.sets[0] = countingMap{agg.sets[0], &userGets}
	agg.sets[1] = countingMap{agg.sets[1], &amountGets}
	agg.seen.gen = 0 // no key is vouched for by the seen filter: every record of a known key reads
	bad := &recordErrors{}
	// k's first record reads nothing (a new key); of the five after it,
	// amounts 13, 9 and 5 pass mid_amounts' filter, 1 and 3 do not.
	h.feed(bad, payment("k", 3, "u1"), payment("k", 13, "u1"), payment("k", 9, "u2"), payment("k", 1, "u2"), payment("k", 5, "u1"), payment("k", 3, "u1"))
	if len(bad.errs) > 0 {
		t.Fatalf("bad records %v", bad.errs)
	}
	if userGets != 5 || amountGets != 3 {
		t.Fatalf("reads: users' map %d, want 5 (one per record after the first); mid_amounts' %d, want 3", userGets, amountGets)
	}
	got := values(upserts(t, h.emitted()))
	want := []string{
		`{"key":"k","n":1,"users":1,"low_users":1,"high_users":0,"mid_amounts":0,"low_users2":1}`,
		`{"key":"k","n":2,"users":1,"low_users":1,"high_users":1,"mid_amounts":1,"low_users2":1}`,
		`{"key":"k","n":3,"users":2,"low_users":1,"high_users":1,"mid_amounts":2,"low_users2":1}`,
		`{"key":"k","n":4,"users":2,"low_users":2,"high_users":1,"mid_amounts":2,"low_users2":2}`,
		`{"key":"k","n":5,"users":2,"low_users":2,"high_users":1,"mid_amounts":3,"low_users2":2}`,
		`{"key":"k","n":6,"users":2,"low_users":2,"high_users":1,"mid_amounts":3,"low_users2":2}`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("outputs\n%q\nwant\n%q", got, want)
	}
	agg.backend.SetCurrentKey([]byte("k"))
	for user, mask := range map[string]string{`"u1"`: "m\x0f", `"u2"`: "m\x0b"} { // u1: all four (13 is high); u2: users, both lows, low_users2
		v, ok, err := agg.sets[0].Get(user)
		if err != nil || !ok || string(v) != mask {
			t.Fatalf("entry of %s: %q %t %v, want %q", user, v, ok, err, mask)
		}
	}
	h.finish()
}

// TestAggregateDistinctLayoutVersioned: a checkpoint of an aggregate
// without filters (each count_distinct its own map, presence entries: the
// layout of every checkpoint written before filters existed) restores into
// the same config with its counts going on; restored into a config where
// the first aggregate heads a group, the shared map's serializer differs
// from the stored one and Open fails with a *state.StateMigrationError
// naming aggregate.users, instead of misreading presence entries as masks.
func TestAggregateDistinctLayoutVersioned(t *testing.T) {
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			old := AggregateParams{Aggregates: []AggregateSpec{
				{Name: "users", Fn: AggCountDistinct, Of: compiled(t, "user")},
				{Name: "low_users", Fn: AggCountDistinct, Of: compiled(t, "amount < 7 ? user : ''")},
			}}
			h, err := openStateful(t, kind, t.TempDir(), nil, nil, NewAggregate(old, false))
			if err != nil {
				t.Fatal(err)
			}
			bad := &recordErrors{}
			h.feed(bad, payment("k", 3, "u1"), payment("k", 9, "u2"))
			restore := snapshotRestore(t, h)
			h2, err := openStateful(t, kind, t.TempDir(), nil, restore, NewAggregate(old, false))
			if err != nil {
				t.Fatal(err)
			}
			h2.feed(bad, payment("k", 1, "u2"), payment("k", 1, "u1"))
			if got, want := values(upserts(t, h2.finish())), []string{
				`{"key":"k","users":2,"low_users":3}`, `{"key":"k","users":2,"low_users":3}`,
			}; !reflect.DeepEqual(got, want) {
				t.Fatalf("after restore %q, want %q", got, want)
			}
			grouped := AggregateParams{Aggregates: []AggregateSpec{
				{Name: "users", Fn: AggCountDistinct, Of: compiled(t, "user")},
				{Name: "low_users", Fn: AggCountDistinct, Of: compiled(t, "user"), Filter: boolCompiled(t, "amount < 7")},
			}}
			_, err = openStateful(t, kind, t.TempDir(), nil, restore, NewAggregate(grouped, false))
			var me *state.StateMigrationError
			if !errors.As(err, &me) || me.State != "aggregate.users" || me.Property != "serializer" || !strings.Contains(err.Error(), distinctMembersSerializerName) {
				t.Fatalf("open of the grouped config: %v, want a serializer migration error for aggregate.users", err)
			}
		})
	}
}

// TestAggregateDistinctFilterChecks: a filter on another function, or in a
// window, is refused; a filter that is not a bool on a record is an
// eval_error leaving the state untouched.
func TestAggregateDistinctFilterChecks(t *testing.T) {
	var msgs []string
	report := func(field, msg string) { msgs = append(msgs, field+": "+msg) }
	p := AggregateParams{Aggregates: []AggregateSpec{{Name: "s", Fn: AggSum, Of: compiled(t, "amount"), Filter: boolCompiled(t, "amount > 1")}}}
	p.CheckParams(report)
	w := WindowParams{Aggregates: []AggregateSpec{{Name: "d", Fn: AggCountDistinct, Of: compiled(t, "user"), Filter: boolCompiled(t, "amount > 1")}}}
	w.CheckParams(report)
	if len(msgs) < 2 || !strings.HasPrefix(msgs[0], "aggregates[0].filter: only count_distinct takes a filter") ||
		!slicesContainsPrefix(msgs[1:], "aggregates[0].filter: a window's aggregates take no filter") {
		t.Fatalf("reports %q", msgs)
	}
	agg := NewAggregate(AggregateParams{Aggregates: []AggregateSpec{
		{Name: "d", Fn: AggCountDistinct, Of: compiled(t, "user"), Filter: boolCompiled(t, "amount")},
		{Name: "e", Fn: AggCountDistinct, Of: compiled(t, "user")},
	}}, false)
	h, err := openStateful(t, state.KindHashmap, t.TempDir(), nil, nil, agg)
	if err != nil {
		t.Fatal(err)
	}
	bad := &recordErrors{}
	h.feed(bad, payment("k", 3, "u1"), payment("k", true, "u1"), payment("k", false, "u2"))
	if len(bad.errs) != 1 || bad.errs[0].Reason != runtime.ReasonEvalError || !strings.Contains(bad.errs[0].Error(), "needs a bool, got int") {
		t.Fatalf("bad records %v", bad.errs)
	}
	if got, want := values(upserts(t, h.finish())), []string{`{"key":"k","d":1,"e":1}`, `{"key":"k","d":1,"e":2}`}; !reflect.DeepEqual(got, want) {
		t.Fatalf("outputs %q, want %q", got, want)
	}
}

// slicesContainsPrefix reports whether some s has prefix p.
func slicesContainsPrefix(ss []string, p string) bool {
	for _, s := range ss {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
