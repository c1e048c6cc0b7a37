package operators

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// gbreakAmounts are the JSON forms of amount and bid.price the grouped
// aggregate inputs are checked on: integers at and past the int64 limits
// and 2^53, the forms of an integral double (1e3, 1.0, -0, 1E2), fractions,
// out-of-range doubles, and non-numbers (a string, null, an object,
// absence), each an int read without boxing, a number read through Eval,
// or an eval_error.
var gbreakAmounts = []string{
	`0`, `-0`, `1`, `-1`, `7`, `9999`, `10000`, `999999`, `1000000`, `1e3`, `1.0`, `1E2`, `-0.0`, `2.5`, `-2.5`,
	`9007199254740993`, `9223372036854775807`, `-9223372036854775808`, `9223372036854775808`, `-9223372036854775809`,
	`18446744073709551615`, `1e19`, `1e400`, `4.9e-324`, `"5"`, `null`, `{"a":1}`, ``,
}

// TestAggregateGroupedInputsAsBase runs q17's kind of aggregate (sum, min,
// max and avg of one field read by several of's and a count_distinct
// filter, so that its inputs are one group and its numbers are read as
// ints without boxing) over random records whose amount and bid.price
// take every JSON number form, with and without retractions (-U, +U, -D
// on a changelog input) and mini_batch (and async_state: the same as
// the synchronous), and checks every row and every
// record's error against the golden file testdata/aggregate_grouped_break,
// written by the base f2a2eb3 (the boxed, ungrouped evaluation):
// GBREAK_UPDATE=1 rewrites it.
func TestAggregateGroupedInputsAsBase(t *testing.T) {
	specs := []AggregateSpec{
		{Name: "n", Fn: AggCount},
		{Name: "total", Fn: AggSum, Of: compiled(t, "amount")},
		{Name: "lo", Fn: AggMin, Of: compiled(t, "amount")},
		{Name: "hi", Fn: AggMax, Of: compiled(t, "amount")},
		{Name: "mean", Fn: AggAvg, Of: compiled(t, "amount")},
		{Name: "first", Fn: AggFirst, Of: compiled(t, "amount")},
		{Name: "r1", Fn: AggSum, Of: compiled(t, "amount < 10000 ? 1 : 0")},
		{Name: "r2", Fn: AggSum, Of: compiled(t, "amount >= 10000 && amount < 1000000 ? 1 : 0")},
		{Name: "users_lo", Fn: AggCountDistinct, Of: compiled(t, "user"), Filter: boolCompiled(t, "amount < 10000")},
		{Name: "users", Fn: AggCountDistinct, Of: compiled(t, "user")},
		{Name: "p", Fn: AggMax, Of: compiled(t, "bid.price")},
		{Name: "p2", Fn: AggSum, Of: compiled(t, "bid.price * 2 - bid.price")},
		{Name: "pmean", Fn: AggAvg, Of: compiled(t, "bid.price")},
		{Name: "last", Fn: AggLast, Of: compiled(t, "amount")},
	}
	recs := gbreakRecords()
	run := func(recs []runtime.Record, changelog bool, mb *MiniBatchParams, async bool) []string {
		ctx := context.Background()
		ch := runtime.NewChannel(4096)
		out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{}))
		info := OpenContext{Operator: "op", Parallelism: 1}
		mailbox := runtime.NewMailbox()
		op := NewKeyedProcessOperator(info, opener(state.KindHashmap, t.TempDir()), nil, NewAggregate(AggregateParams{Emit: EmitEveryUpdate, Aggregates: specs, MiniBatch: mb}, changelog), out)
		if async {
			op = NewAsyncKeyedProcessOperator(info, opener(state.KindHashmap, t.TempDir()), nil, NewAsyncAggregate(AggregateParams{Emit: EmitEveryUpdate, Aggregates: specs}, changelog), out, mailbox)
		}
		if err := op.Open(ctx); err != nil {
			t.Fatal(err)
		}
		defer op.Close()
		var got []string
		for i, r := range recs {
			if !changelog {
				r.Change = runtime.ChangeInsert
			}
			// The value in a buffer of its own, overwritten after the
			// record (a source's decode reuse): nothing of it may be read
			// later.
			buf := append([]byte(nil), r.Value...)
			r.Value = buf
			if err := op.ProcessRecord(ctx, 0, r); err != nil {
				got = append(got, fmt.Sprintf("record %d: %v", i, err))
			}
			mailbox.TryYieldAll()
			for j := range buf {
				buf[j] = ' '
			}
			got = append(got, elementsText(ch)...)
		}
		if err := op.EndInput(ctx); err != nil {
			t.Fatal(err)
		}
		return append(got, elementsText(ch)...)
	}
	var got []string
	for _, changelog := range []bool{false, true} {
		for _, mb := range []*MiniBatchParams{nil, {Size: 7}} {
			got = append(got, fmt.Sprintf("== changelog %t, mini_batch %v", changelog, mb != nil))
			got = append(got, run(recs, changelog, mb, false)...)
		}
	}
	text := strings.Join(got, "\n") + "\n"
	golden := filepath.Join("testdata", "aggregate_grouped_break")
	if os.Getenv("GBREAK_UPDATE") != "" {
		if err := os.WriteFile(golden, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if text != string(want) {
		g, w := strings.Split(text, "\n"), strings.Split(string(want), "\n")
		for i := range min(len(g), len(w)) {
			if g[i] != w[i] {
				t.Fatalf("line %d:\n got %s\nwant %s", i+1, g[i], w[i])
			}
		}
		t.Fatalf("%d lines, want %d", len(g), len(w))
	}
	// The async aggregate (async_state) evaluates its inputs as the
	// synchronous one does: the same rows, on the records that do not
	// fail (an async record's error fails the job: state.ErrAsync...).
	var good []runtime.Record
	for i, r := range recs {
		if !strings.Contains(text, fmt.Sprintf("\nrecord %d: ", i)) {
			good = append(good, r)
		}
	}
	if len(good) < 80 {
		t.Fatalf("%d records without an error", len(good))
	}
	for _, changelog := range []bool{false, true} {
		sync, async := run(good, changelog, nil, false), run(good, changelog, nil, true)
		if strings.Join(async, "\n") != strings.Join(sync, "\n") {
			t.Errorf("changelog %t: async_state\n%s\nwant (sync)\n%s", changelog, strings.Join(async, "\n"), strings.Join(sync, "\n"))
		}
	}
	errs, rows := 0, 0
	for _, s := range got {
		switch {
		case strings.HasPrefix(s, "record "):
			errs++
		case strings.HasPrefix(s, "+") || strings.HasPrefix(s, "-"):
			rows++
		}
	}
	if errs < 40 || rows < 200 {
		t.Fatalf("%d errors and %d rows: want both kinds in number", errs, rows)
	}
}

// gbreakRecords are TestAggregateGroupedInputsAsBase's 160 records: keys
// k0-k2, amount and bid.price mostly ints, a third of them (a quarter of
// the prices) in one of gbreakAmounts' forms, every fifth a -U, +U or -D,
// 100 ms apart from 0.
func gbreakRecords() []runtime.Record {
	rng := rand.New(rand.NewPCG(46, 46))
	var recs []runtime.Record
	for i := range 160 {
		f := []string{fmt.Sprintf(`"user":"u%d"`, rng.IntN(4))}
		// Mostly ints (each form's row stays comparable for a while),
		// every form now and then.
		amount := fmt.Sprint(rng.IntN(2000000) - 1000)
		if rng.IntN(3) == 0 {
			amount = gbreakAmounts[rng.IntN(len(gbreakAmounts))]
		}
		if amount != "" {
			f = append(f, `"amount":`+amount)
		}
		price := fmt.Sprint(rng.IntN(100000))
		if rng.IntN(4) == 0 {
			price = gbreakAmounts[rng.IntN(len(gbreakAmounts))]
		}
		if price != "" {
			f = append(f, `"bid":{"price":`+price+`}`)
		}
		r := runtime.Record{Key: []byte(fmt.Sprintf("k%d", rng.IntN(3))), Value: []byte("{" + strings.Join(f, ",") + "}")}
		if i%5 == 4 {
			r.Change = []runtime.ChangeKind{runtime.ChangeUpdateBefore, runtime.ChangeUpdateAfter, runtime.ChangeDelete}[rng.IntN(3)]
		}
		r.Timestamp = time.UnixMilli(int64(i) * 100)
		recs = append(recs, r)
	}
	return recs
}

// TestWindowGroupedInputsAsBase is TestAggregateGroupedInputsAsBase for a
// tumbling window's aggregates (grouped and read as ints too, with no
// filter: a window refuses count_distinct's), on the records as inserts:
// every record's error and every window's row, as f2a2eb3 wrote them
// (testdata/window_grouped_break; GBREAK_UPDATE=1 rewrites it).
func TestWindowGroupedInputsAsBase(t *testing.T) {
	p := WindowParams{Kind: Tumbling, Size: 2 * time.Second, Time: WindowEventTime, Aggregates: []AggregateSpec{
		{Name: "n", Fn: AggCount},
		{Name: "total", Fn: AggSum, Of: compiled(t, "amount")},
		{Name: "first", Fn: AggFirst, Of: compiled(t, "amount")},
		{Name: "lo", Fn: AggMin, Of: compiled(t, "amount")},
		{Name: "hi", Fn: AggMax, Of: compiled(t, "amount")},
		{Name: "mean", Fn: AggAvg, Of: compiled(t, "amount")},
		{Name: "r1", Fn: AggSum, Of: compiled(t, "amount < 10000 ? 1 : 0")},
		{Name: "r2", Fn: AggSum, Of: compiled(t, "amount >= 10000 && amount < 1000000 ? 1 : 0")},
		{Name: "p2", Fn: AggSum, Of: compiled(t, "bid.price * 2 - bid.price")},
		{Name: "last", Fn: AggLast, Of: compiled(t, "bid.price")},
	}}
	h := newWindowHarness(t, state.KindHashmap, t.TempDir(), nil, p)
	var got []string
	for i, r := range gbreakRecords() {
		r.Change = runtime.ChangeInsert
		if err := h.op.ProcessRecord(h.ctx, 0, r); err != nil {
			got = append(got, fmt.Sprintf("record %d: %v", i, err))
		}
		if i%20 == 19 {
			out := h.wm(int64(i) * 100)
			slices.Sort(out)
			got = append(got, fmt.Sprintf("wm %d", i*100))
			got = append(got, out...)
		}
	}
	out := h.wm(1 << 40)
	slices.Sort(out)
	got = append(got, out...)
	h.finish()
	text := strings.Join(got, "\n") + "\n"
	golden := filepath.Join("testdata", "window_grouped_break")
	if os.Getenv("GBREAK_UPDATE") != "" {
		if err := os.WriteFile(golden, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if text != string(want) {
		t.Fatalf("got\n%s\nwant\n%s", text, want)
	}
	if n := strings.Count(text, "window_start"); n < 12 {
		t.Fatalf("%d windows emitted", n)
	}
}
