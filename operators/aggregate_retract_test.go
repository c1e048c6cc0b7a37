package operators

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/kstreamd/kstreamd/runtime"
)

// changed returns a payment record of change kind c.
func changed(c runtime.ChangeKind, key string, amount any, user string) runtime.Record {
	r := payment(key, amount, user)
	r.Change = c
	return r
}

// changelogText renders records as "<kind> <value>", in order.
func changelogText(recs []runtime.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.Change.String() + " " + string(r.Value)
	}
	return out
}

// TestAggregateRetract feeds a changelog through every retractable
// function (sum, count, min, max, avg, count_distinct) on both backends,
// sync and async, with a checkpoint and restore in the middle (the min and
// max multisets and the distinct counts are state), and checks the exact
// changelog emitted: a duplicate value retracted once keeps the extreme, a
// retracted extreme is replaced by the next one in the multiset, a user
// seen twice stays counted until both are retracted, the last retraction
// emits -D of the last row and clears the key (a later insert starts from
// zero), and a retraction of a key never seen emits nothing.
func TestAggregateRetract(t *testing.T) {
	row := func(total, n, lo, hi int, mean string, users int) string {
		return fmt.Sprintf(`{"key":"k","total":%d,"n":%d,"lo":%d,"hi":%d,"mean":%s,"users":%d}`, total, n, lo, hi, mean, users)
	}
	first := []runtime.Record{
		changed(runtime.ChangeInsert, "k", 5, "u1"),
		changed(runtime.ChangeInsert, "k", 3, "u2"),
		changed(runtime.ChangeInsert, "k", 5, "u1"),
		changed(runtime.ChangeUpdateBefore, "k", 5, "u1"), // one 5 of two: max stays 5, u1 stays
		changed(runtime.ChangeUpdateAfter, "k", 9, "u3"),
	}
	then := []runtime.Record{
		changed(runtime.ChangeDelete, "z", 1, "u9"), // a key never seen: nothing
		changed(runtime.ChangeDelete, "k", 9, "u3"), // the max: rescan gives 5
		changed(runtime.ChangeDelete, "k", 3, "u2"), // the min: rescan gives 5
		changed(runtime.ChangeDelete, "k", 5, "u1"), // the last row: -D
		changed(runtime.ChangeInsert, "k", 2, "u4"), // starts again from zero
	}
	r1, r2, r3 := row(5, 1, 5, 5, "5", 1), row(8, 2, 3, 5, "4", 2), row(13, 3, 3, 5, "4.333333333333333", 2)
	r4, r5 := row(8, 2, 3, 5, "4", 2), row(17, 3, 3, 9, "5.666666666666667", 3)
	r6, r7 := row(8, 2, 3, 5, "4", 2), row(5, 1, 5, 5, "5", 1)
	wantFirst := []string{"+I " + r1, "-U " + r1, "+U " + r2, "-U " + r2, "+U " + r3, "-U " + r3, "+U " + r4, "-U " + r4, "+U " + r5}
	wantThen := []string{"-U " + r5, "+U " + r6, "-U " + r6, "+U " + r7, "-D " + r7, "+I " + row(2, 1, 2, 2, "2", 1)}
	for _, kind := range backends {
		for _, mode := range modes {
			t.Run(kind+"/"+mode, func(t *testing.T) {
				p := AggregateParams{Emit: EmitEveryUpdate, Aggregates: []AggregateSpec{
					{Name: "total", Fn: AggSum, Of: compiled(t, "amount")},
					{Name: "n", Fn: AggCount},
					{Name: "lo", Fn: AggMin, Of: compiled(t, "amount")},
					{Name: "hi", Fn: AggMax, Of: compiled(t, "amount")},
					{Name: "mean", Fn: AggAvg, Of: compiled(t, "amount")},
					{Name: "users", Fn: AggCountDistinct, Of: compiled(t, "user")},
				}}
				h, err := openStateful(t, kind, t.TempDir(), nil, nil, aggFn(mode, p, true))
				if err != nil {
					t.Fatal(err)
				}
				bad := &recordErrors{}
				h.feed(bad, first...)
				if got := changelogText(h.emitted()); !reflect.DeepEqual(got, wantFirst) {
					t.Fatalf("changelog\n%q\nwant\n%q", got, wantFirst)
				}
				h2, err := openStateful(t, kind, t.TempDir(), nil, snapshotRestore(t, h), aggFn(mode, p, true))
				if err != nil {
					t.Fatal(err)
				}
				h2.feed(bad, then...)
				got := h2.finish()
				if len(bad.errs) > 0 {
					t.Fatalf("bad records %v", bad.errs)
				}
				if g := changelogText(got); !reflect.DeepEqual(g, wantThen) {
					t.Fatalf("changelog after restore\n%q\nwant\n%q", g, wantThen)
				}
				upserts(t, got)
			})
		}
	}
}

// TestAggregateRetractFloatsAndBig: a sum past int64 stays exact (math/big)
// until a fraction makes it a double, then retracts as doubles do (at
// 2^63 a double's step is 2048: +9000 then -9000 lands back exactly); min
// over doubles and integers rescans to the right one; on_change emits
// nothing for a retraction that changes no result.
func TestAggregateRetractFloatsAndBig(t *testing.T) {
	p := AggregateParams{Emit: EmitOnChange, Aggregates: []AggregateSpec{
		{Name: "s", Fn: AggSum, Of: compiled(t, "amount")},
		{Name: "lo", Fn: AggMin, Of: compiled(t, "amount")},
	}}
	in := []runtime.Record{
		changed(runtime.ChangeInsert, "k", int64(9223372036854775000), "u"),
		changed(runtime.ChangeInsert, "k", 9000, "u"), // sum past int64
		changed(runtime.ChangeInsert, "k", 0.5, "u"),  // a double: min 0.5
		changed(runtime.ChangeInsert, "k", 9000, "u"), // a second 9000
		changed(runtime.ChangeDelete, "k", 0.5, "u"),  // min back to 9000
		changed(runtime.ChangeDelete, "k", 9000, "u"), // one 9000 of two: min stays, sum changes
		changed(runtime.ChangeInsert, "k", 0, "u"),    // min 0
		changed(runtime.ChangeInsert, "k", 0, "u"),    // a second 0: no result changes, on_change emits nothing
		changed(runtime.ChangeDelete, "k", 0, "u"),    // one 0 of two: nothing changes either
		changed(runtime.ChangeDelete, "k", 0, "u"),    // the last 0: min back to 9000
	}
	want := []string{
		`+I {"key":"k","s":9223372036854775000,"lo":9223372036854775000}`,
		`-U {"key":"k","s":9223372036854775000,"lo":9223372036854775000}`,
		`+U {"key":"k","s":9223372036854784000,"lo":9000}`,
		`-U {"key":"k","s":9223372036854784000,"lo":9000}`,
		`+U {"key":"k","s":9223372036854784000,"lo":0.5}`,
		`-U {"key":"k","s":9223372036854784000,"lo":0.5}`,
		`+U {"key":"k","s":9223372036854792000,"lo":0.5}`,
		`-U {"key":"k","s":9223372036854792000,"lo":0.5}`,
		`+U {"key":"k","s":9223372036854792000,"lo":9000}`,
		`-U {"key":"k","s":9223372036854792000,"lo":9000}`,
		`+U {"key":"k","s":9223372036854784000,"lo":9000}`,
		`-U {"key":"k","s":9223372036854784000,"lo":9000}`,
		`+U {"key":"k","s":9223372036854784000,"lo":0}`,
		`-U {"key":"k","s":9223372036854784000,"lo":0}`,
		`+U {"key":"k","s":9223372036854784000,"lo":9000}`,
	}
	for _, kind := range backends {
		for _, mode := range modes {
			t.Run(kind+"/"+mode, func(t *testing.T) {
				h, err := openStateful(t, kind, t.TempDir(), nil, nil, aggFn(mode, p, true))
				if err != nil {
					t.Fatal(err)
				}
				h.feed(&recordErrors{}, in...)
				if got := changelogText(h.finish()); !reflect.DeepEqual(got, want) {
					t.Fatalf("changelog\n%q\nwant\n%q", got, want)
				}
			})
		}
	}
}

// TestAggregateCheckChangelogInput: first and last are refused over a
// changelog input, naming the field; the retractable functions pass.
func TestAggregateCheckChangelogInput(t *testing.T) {
	p := AggregateParams{Aggregates: []AggregateSpec{
		{Name: "n", Fn: AggCount}, {Name: "f", Fn: AggFirst}, {Name: "s", Fn: AggSum}, {Name: "l", Fn: AggLast},
	}}
	var got []string
	p.CheckChangelogInput(func(field, msg string) { got = append(got, field+": "+msg) })
	want := []string{
		"aggregates[1].fn: first cannot retract, and this aggregate's input is a changelog (updates retract the values they replace); use count, sum, min, max, avg or count_distinct",
		"aggregates[3].fn: last cannot retract, and this aggregate's input is a changelog (updates retract the values they replace); use count, sum, min, max, avg or count_distinct",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("reports\n%q\nwant\n%q", got, want)
	}
}
