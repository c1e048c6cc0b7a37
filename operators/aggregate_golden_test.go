package operators

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// updateAggregateGolden rewrites testdata/aggregate_golden from the code
// under test. The files were written by main's aggregate operator at
// a62e0e9, before a key's accumulators became a slice in the order of the
// aggregates (they were a map by name), so that the test below compares
// today's operator with that one and restores the checkpoint it wrote:
//
//	git worktree add /tmp/main-src a62e0e9
//	cp operators/aggregate_golden_test.go /tmp/main-src/operators/
//	cd /tmp/main-src && go test ./operators -run TestAggregateGolden -update-aggregate-golden \
//	    -aggregate-golden-dir /path/to/this/operators/testdata/aggregate_golden
var (
	updateAggregateGolden = flag.Bool("update-aggregate-golden", false, "rewrite testdata/aggregate_golden (see aggregate_golden_test.go)")
	aggregateGoldenDir    = flag.String("aggregate-golden-dir", "testdata/aggregate_golden", "where -update-aggregate-golden writes")
)

// aggregateGoldenInput returns 600 seeded records over 7 keys (values
// integers, some doubles, one past int64's range for a sum to overflow
// into math/big); changelog adds retractions (-U of an earlier value of
// the key followed by its +U, and -D) among them.
func aggregateGoldenInput(changelog bool) []runtime.Record {
	rng := rand.New(rand.NewPCG(38, 17))
	var recs []runtime.Record
	var seen [7][]string
	for range 600 {
		k := rng.IntN(7)
		key := "k" + strconv.Itoa(k)
		v := fmt.Sprintf(`{"v":%d,"tag":"t%d"}`, rng.Int64N(2000)-700, rng.IntN(9))
		switch rng.IntN(20) {
		case 0:
			v = fmt.Sprintf(`{"v":%d.25,"tag":"t%d"}`, rng.Int64N(2000)-700, rng.IntN(9))
		case 1:
			v = `{"v":9223372036854775000,"tag":"big<&>"}`
		}
		if changelog && len(seen[k]) > 0 && rng.IntN(4) == 0 {
			i := rng.IntN(len(seen[k]))
			old := seen[k][i]
			seen[k] = append(seen[k][:i], seen[k][i+1:]...)
			if rng.IntN(3) == 0 {
				recs = append(recs, runtime.Record{Key: []byte(key), Value: []byte(old), Change: runtime.ChangeDelete})
				continue
			}
			recs = append(recs, runtime.Record{Key: []byte(key), Value: []byte(old), Change: runtime.ChangeUpdateBefore})
			recs = append(recs, runtime.Record{Key: []byte(key), Value: []byte(v), Change: runtime.ChangeUpdateAfter})
			seen[k] = append(seen[k], v)
			continue
		}
		recs = append(recs, runtime.Record{Key: []byte(key), Value: []byte(v)})
		seen[k] = append(seen[k], v)
	}
	return recs
}

// aggregateGoldenShapes are the parameter sets of TestAggregateGolden:
// every function over an append-only input (emit every_update and
// on_change), and the retracting ones over a changelog.
func aggregateGoldenShapes(t *testing.T) []struct {
	name      string
	p         AggregateParams
	changelog bool
} {
	all := []AggregateSpec{{Name: "n", Fn: AggCount}, {Name: "s", Fn: AggSum, Of: compiled(t, "v")},
		{Name: "lo", Fn: AggMin, Of: compiled(t, "v")}, {Name: "hi", Fn: AggMax, Of: compiled(t, "v")},
		{Name: "a", Fn: AggAvg, Of: compiled(t, "v")}, {Name: "f", Fn: AggFirst, Of: compiled(t, "tag")},
		{Name: "l<&>", Fn: AggLast, Of: compiled(t, "{'v': v}")}, {Name: "d", Fn: AggCountDistinct, Of: compiled(t, "tag")}}
	retracting := []AggregateSpec{all[0], all[1], all[2], all[3], all[4], all[7]}
	return []struct {
		name      string
		p         AggregateParams
		changelog bool
	}{
		{"append", AggregateParams{Aggregates: all, Emit: EmitEveryUpdate}, false},
		{"append-on-change", AggregateParams{Aggregates: []AggregateSpec{all[2], all[3], all[5]}, Emit: EmitOnChange}, false},
		{"changelog", AggregateParams{Aggregates: retracting, Emit: EmitEveryUpdate}, true},
	}
}

// aggregateGoldenRows renders what h emitted so far as "<change> <value>".
func aggregateGoldenRows(h *harness) []string { return rowsOf(h.emitted()) }

// rowsOf renders recs as "<change> <value>".
func rowsOf(recs []runtime.Record) []string {
	var rows []string
	for _, r := range recs {
		rows = append(rows, r.Change.String()+" "+string(r.Value))
	}
	return rows
}

// rowsByKey groups rows (of aggregateGoldenRows) by their key, in order.
func rowsByKey(rows []string) map[string][]string {
	by := map[string][]string{}
	for _, r := range rows {
		k, _, _ := strings.Cut(r[strings.Index(r, `"key":`)+len(`"key":`):], ",")
		by[k] = append(by[k], r)
	}
	return by
}

// TestAggregateGolden: the aggregate operator gives exactly the rows
// main's gave (testdata/aggregate_golden, written by main's code at
// a62e0e9, see updateAggregateGolden) on 600 seeded records over every
// aggregate function, an append-only and a changelog input, on both
// backends: straight through, and restored in the middle from the
// checkpoint main's operator took there (the accumulators as main wrote
// them, by name) and run on to the end, synchronously and with async
// state (whose rows keep their order per key, not across keys).
func TestAggregateGolden(t *testing.T) {
	const half = 300
	for _, shape := range aggregateGoldenShapes(t) {
		recs := aggregateGoldenInput(shape.changelog)
		for _, kind := range backends {
			t.Run(shape.name+"/"+kind, func(t *testing.T) {
				dir := filepath.Join(*aggregateGoldenDir, shape.name, kind)
				h := newHarness(t, kind, t.TempDir(), nil, NewAggregate(shape.p, shape.changelog), 1<<14)
				h.process(recs[:half]...)
				first := aggregateGoldenRows(h)
				snapDir := t.TempDir()
				if *updateAggregateGolden {
					snapDir = filepath.Join(dir, "checkpoint")
					if err := os.RemoveAll(snapDir); err != nil {
						t.Fatal(err)
					}
				}
				handle := snapshotHarnessTo(t, h, snapDir)
				h.process(recs[half:]...)
				second := append(aggregateGoldenRows(h), rowsOf(h.finish())...)
				if *updateAggregateGolden {
					writeJSON(t, filepath.Join(dir, "first.json"), first)
					writeJSON(t, filepath.Join(dir, "second.json"), second)
					if err := os.WriteFile(filepath.Join(dir, "handle.json"), handle, 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				var wantFirst, wantSecond []string
				readJSON(t, filepath.Join(dir, "first.json"), &wantFirst)
				readJSON(t, filepath.Join(dir, "second.json"), &wantSecond)
				compareRows(t, "straight, first half", first, wantFirst)
				compareRows(t, "straight, second half", second, wantSecond)

				handle, err := os.ReadFile(filepath.Join(dir, "handle.json"))
				if err != nil {
					t.Fatal(err)
				}
				for _, mode := range []string{"sync", "async"} {
					var fn any = NewAggregate(shape.p, shape.changelog)
					if mode == "async" {
						fn = NewAsyncAggregate(shape.p, shape.changelog)
					}
					r := &Restore{Keyed: []state.RestoreHandle{{Handle: handle, Dir: copyTree(t, filepath.Join(dir, "checkpoint"))}}}
					h := newHarness(t, kind, t.TempDir(), r, fn, 1<<14)
					h.process(recs[half:]...)
					rows := append(aggregateGoldenRows(h), rowsOf(h.finish())...)
					what := "restored from main's checkpoint (" + mode + "), second half"
					if mode == "async" {
						got, want := rowsByKey(rows), rowsByKey(wantSecond)
						for k := range want {
							compareRows(t, what+" of key "+k, got[k], want[k])
						}
						if len(got) != len(want) {
							t.Fatalf("%s: rows of %d keys, want %d", what, len(got), len(want))
						}
						continue
					}
					compareRows(t, what, rows, wantSecond)
				}
			})
		}
	}
}

// compareRows fails t at the first row of got that differs from want.
func compareRows(t *testing.T, what string, got, want []string) {
	t.Helper()
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			t.Fatalf("%s: row %d of %d:\ngot  %s\nwant %s", what, i, len(want), got[i], want[i])
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d rows, want %d", what, len(got), len(want))
	}
}
