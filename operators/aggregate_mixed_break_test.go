package operators

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/kstreamd/kstreamd/runtime"
)

// mixedSpecs are sum, min, max, avg, count_distinct and two filtered
// count_distinct over the same of (amount), in the order perm gives,
// followed by 66 filtered count_distinct over user (more than
// maxDistinctMembers: a group of 64 and one of 2), so that a shared
// group's first member, a sum after a filtered count_distinct and every
// other order of shared of values and shared maps meet.
func mixedSpecs(t *testing.T, perm []int) []AggregateSpec {
	amount := []AggregateSpec{
		{Name: "s", Fn: AggSum, Of: compiled(t, "amount")},
		{Name: "lo", Fn: AggMin, Of: compiled(t, "amount")},
		{Name: "hi", Fn: AggMax, Of: compiled(t, "amount")},
		{Name: "av", Fn: AggAvg, Of: compiled(t, "amount")},
		{Name: "cd", Fn: AggCountDistinct, Of: compiled(t, "amount")},
		{Name: "cdf", Fn: AggCountDistinct, Of: compiled(t, "amount"), Filter: boolCompiled(t, "amount < 10")},
		{Name: "cdg", Fn: AggCountDistinct, Of: compiled(t, "amount"), Filter: boolCompiled(t, "amount >= 5")},
	}
	specs := []AggregateSpec{{Name: "n", Fn: AggCount}}
	for _, i := range perm {
		specs = append(specs, amount[i])
	}
	for u := range 66 {
		specs = append(specs, AggregateSpec{Name: fmt.Sprint("u", u), Fn: AggCountDistinct, Of: compiled(t, "user"),
			Filter: boolCompiled(t, fmt.Sprintf("amount < %d", u%21))})
	}
	return specs
}

// mixedModelRow is an independent model's row of a key's records still in
// (amount, user index), as parsed JSON.
func mixedModelRow(k string, rows [][2]int) map[string]any {
	row := map[string]any{"key": k, "n": float64(len(rows))}
	sum, lo, hi := 0, rows[0][0], rows[0][0]
	cd, cdf, cdg := map[int]bool{}, map[int]bool{}, map[int]bool{}
	for _, r := range rows {
		sum += r[0]
		lo, hi = min(lo, r[0]), max(hi, r[0])
		cd[r[0]] = true
		if r[0] < 10 {
			cdf[r[0]] = true
		}
		if r[0] >= 5 {
			cdg[r[0]] = true
		}
	}
	row["s"], row["lo"], row["hi"] = float64(sum), float64(lo), float64(hi)
	row["av"] = float64(sum) / float64(len(rows))
	row["cd"], row["cdf"], row["cdg"] = float64(len(cd)), float64(len(cdf)), float64(len(cdg))
	for u := range 66 {
		users := map[int]bool{}
		for _, r := range rows {
			if r[0] < u%21 {
				users[r[1]] = true
			}
		}
		row[fmt.Sprint("u", u)] = float64(len(users))
	}
	return row
}

// TestAggregateMixedSharedOfModel folds random records (and, over a
// changelog, -D retractions that empty keys) through mixedSpecs in several
// orders, sync, async and with mini_batch (the first order on both backends,
// the others on the first), restoring from
// a checkpoint between rounds (the key hint off after it), and checks every
// key's last row against mixedModelRow.
func TestAggregateMixedSharedOfModel(t *testing.T) {
	perms := [][]int{
		{5, 0, 1, 2, 3, 4, 6}, // a filtered count_distinct first, a sum after it
		{4, 5, 6, 0, 1, 2, 3}, // the unfiltered count_distinct first
		{0, 1, 2, 3, 4, 5, 6},
		{3, 6, 2, 5, 1, 4, 0},
	}
	for pi, perm := range perms {
		for _, kind := range backends {
			if pi > 0 && kind != backends[0] {
				continue // the other orders on one backend: the orders are the backends' same code
			}
			for _, mode := range []string{"sync", "async", "mini_batch"} {
				for _, changelog := range []bool{false, true} {
					t.Run(fmt.Sprintf("perm%d/%s/%s/changelog=%t", pi, kind, mode, changelog), func(t *testing.T) {
						p := AggregateParams{Aggregates: mixedSpecs(t, perm)}
						newFn := func() any {
							if mode == "mini_batch" {
								q := p
								q.MiniBatch = &MiniBatchParams{Size: 7}
								return NewAggregate(q, changelog)
							}
							return aggFn(mode, p, changelog)
						}
						r := rand.New(rand.NewPCG(uint64(pi), uint64(len(kind+mode))))
						in := map[string][][2]int{}
						last := map[string]map[string]any{}
						dir := t.TempDir()
						var restore *Restore
						for range 3 {
							h, err := openStateful(t, kind, dir, nil, restore, newFn())
							if err != nil {
								t.Fatal(err)
							}
							var recs []runtime.Record
							for range 80 {
								k := fmt.Sprint("k", r.IntN(5))
								rows := in[k]
								if changelog && len(rows) > 0 && r.IntN(3) == 0 {
									i := r.IntN(len(rows))
									recs = append(recs, changed(runtime.ChangeDelete, k, rows[i][0], fmt.Sprint("u", rows[i][1])))
									in[k] = append(rows[:i], rows[i+1:]...)
									continue
								}
								row := [2]int{r.IntN(20), r.IntN(6)}
								recs = append(recs, changed(runtime.ChangeInsert, k, row[0], fmt.Sprint("u", row[1])))
								in[k] = append(in[k], row)
							}
							bad := &recordErrors{}
							for c := 0; c < len(recs); c += 20 {
								h.feed(bad, recs[c:c+20]...)
								for _, rec := range h.emitted() {
									if rec.Change == runtime.ChangeDelete {
										delete(last, string(rec.Key))
									} else if rec.Change != runtime.ChangeUpdateBefore {
										var row map[string]any
										if err := json.Unmarshal(rec.Value, &row); err != nil {
											t.Fatalf("row %s: %v", rec.Value, err)
										}
										last[string(rec.Key)] = row
									}
								}
							}
							if len(bad.errs) > 0 {
								t.Fatalf("bad records %v", bad.errs)
							}
							restore = snapshotRestore(t, h)
							dir = t.TempDir()
						}
						want := map[string]map[string]any{}
						for k, rows := range in {
							if len(rows) > 0 {
								want[k] = mixedModelRow(k, rows)
							}
						}
						if !reflect.DeepEqual(last, want) {
							for k := range want {
								for f, v := range want[k] {
									if last[k][f] != v {
										t.Errorf("key %s %s = %v, want %v", k, f, last[k][f], v)
									}
								}
							}
							t.Fatalf("last rows differ (%d keys, want %d)", len(last), len(want))
						}
					})
				}
			}
		}
	}
}
