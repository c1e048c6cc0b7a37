package operators

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// stepClock is the state backends' injectable TTL clock (state.Clock),
// moved by hand; safe for the Pebble read workers.
type stepClock struct{ ns atomic.Int64 }

func (c *stepClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *stepClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// newStepClock returns a stepClock at an arbitrary fixed time.
func newStepClock() *stepClock {
	c := &stepClock{}
	c.ns.Store(int64(1_000_000 * time.Second))
	return c
}

// clockOpener is opener with the backend's TTL clock set to clk.
func clockOpener(kind, dir string, clk state.Clock) BackendOpener {
	return func(restore []state.RestoreHandle) (state.KeyedStateBackend, error) {
		cfg := state.BackendConfig{Kind: kind, MaxParallelism: testMaxP, KeyGroupRange: keygroup.Range{Start: 0, End: testMaxP - 1}, Clock: clk}
		if kind == state.KindPebble {
			cfg.Dir = dir
		}
		return state.OpenBackendRestored(cfg, restore)
	}
}

// openStateful builds and opens a harness over fn (sync or async) on a
// backend with clock clk (nil: the wall clock), returning Open's error.
func openStateful(t *testing.T, kind, dir string, clk state.Clock, restore *Restore, fn any) (*harness, error) {
	t.Helper()
	h := &harness{t: t, mb: runtime.NewMailbox(), ch: runtime.NewChannel(256), ctx: context.Background()}
	out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{h.ch}, runtime.ForwardPartitioner{}))
	info := OpenContext{Operator: "op", Subtask: 0, Parallelism: 1}
	if clk == nil {
		clk = newStepClock()
	}
	switch f := fn.(type) {
	case AsyncKeyedProcessFunction:
		h.op = NewAsyncKeyedProcessOperator(info, clockOpener(kind, dir, clk), restore, f, out, h.mb)
	case KeyedProcessFunction:
		h.op = NewKeyedProcessOperator(info, clockOpener(kind, dir, clk), restore, f, out)
	default:
		t.Fatalf("%T is no keyed process function", fn)
	}
	return h, h.op.Open(h.ctx)
}

// recordErrors is a runtime.BadRecordHandler keeping every RecordError.
type recordErrors struct{ errs []*runtime.RecordError }

func (r *recordErrors) HandleBadRecord(_ context.Context, _ runtime.Record, err *runtime.RecordError) error {
	r.errs = append(r.errs, err)
	return nil
}

// feed processes recs as the task does: a *runtime.RecordError returned
// (sync) goes to bad as the async path's handler does; the mailbox is
// yielded after each record, and the async controller drained at the end.
func (h *harness) feed(bad *recordErrors, recs ...runtime.Record) {
	h.t.Helper()
	h.op.SetBadRecordHandlers([]runtime.BadRecordHandler{bad})
	for _, r := range recs {
		var re *runtime.RecordError
		switch err := h.op.ProcessRecord(h.ctx, 0, r); {
		case errors.As(err, &re):
			_ = bad.HandleBadRecord(h.ctx, r, re)
		case err != nil:
			h.t.Fatal(err)
		}
		h.mb.TryYieldAll()
	}
	if err := h.op.EndInput(h.ctx); err != nil { // async: drain, so the clock moves only between settled records
		h.t.Fatal(err)
	}
}

// values returns the output values as strings.
func values(recs []runtime.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Value)
	}
	return out
}

// byKey groups output values by record key, each key's in order.
func byKey(recs []runtime.Record) map[string][]string {
	m := map[string][]string{}
	for _, r := range recs {
		m[string(r.Key)] = append(m[string(r.Key)], string(r.Value))
	}
	return m
}

func compiled(t *testing.T, src string) Expression {
	t.Helper()
	e, err := CompileExpression(src)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// aggFn returns the sync or async aggregate of p.
func aggFn(mode string, p AggregateParams, changelog bool) any {
	if mode == "async" {
		return NewAsyncAggregate(p, changelog)
	}
	return NewAggregate(p, changelog)
}

var modes = []string{"sync", "async"}

func payment(key string, amount any, user string) runtime.Record {
	a, _ := json.Marshal(amount)
	return runtime.Record{Key: []byte(key), Value: fmt.Appendf(nil, `{"amount":%s,"user":%q}`, a, user)}
}

// TestAggregateFunctions folds ten payments of two keys through every
// function and checks the exact output after every record: integer sums
// stay integers, a fraction turns the sum into a double, avg is a double,
// first and last keep the JSON value, count_distinct counts distinct users.
// Headers, timestamp and origin of the input travel to the output.
func TestAggregateFunctions(t *testing.T) {
	in := []runtime.Record{
		payment("a", 10, "u1"), payment("b", 5, "u2"), payment("a", 2.5, "u2"), payment("a", -3, "u1"),
		payment("b", 5, "u2"), payment("b", 7, "u3"), payment("a", 4, "u3"), payment("b", 1, "u2"),
		payment("a", 10, "u1"), payment("b", 0, "u4"),
	}
	for i := range in {
		in[i].Timestamp = time.UnixMilli(int64(1000 + i))
		in[i].Headers = []runtime.Header{{Key: "trace", Value: fmt.Appendf(nil, "t%d", i)}}
		in[i].Origin = runtime.Origin{Topic: "payments", Partition: 1, Offset: int64(i)}
	}
	want := map[string][]string{
		"a": {
			`{"key":"a","total":10,"n":1,"lo":10,"hi":10,"mean":10,"first":"u1","last":"u1","users":1}`,
			`{"key":"a","total":12.5,"n":2,"lo":2.5,"hi":10,"mean":6.25,"first":"u1","last":"u2","users":2}`,
			`{"key":"a","total":9.5,"n":3,"lo":-3,"hi":10,"mean":3.1666666666666665,"first":"u1","last":"u1","users":2}`,
			`{"key":"a","total":13.5,"n":4,"lo":-3,"hi":10,"mean":3.375,"first":"u1","last":"u3","users":3}`,
			`{"key":"a","total":23.5,"n":5,"lo":-3,"hi":10,"mean":4.7,"first":"u1","last":"u1","users":3}`,
		},
		"b": {
			`{"key":"b","total":5,"n":1,"lo":5,"hi":5,"mean":5,"first":"u2","last":"u2","users":1}`,
			`{"key":"b","total":10,"n":2,"lo":5,"hi":5,"mean":5,"first":"u2","last":"u2","users":1}`,
			`{"key":"b","total":17,"n":3,"lo":5,"hi":7,"mean":5.666666666666667,"first":"u2","last":"u3","users":2}`,
			`{"key":"b","total":18,"n":4,"lo":1,"hi":7,"mean":4.5,"first":"u2","last":"u2","users":2}`,
			`{"key":"b","total":18,"n":5,"lo":0,"hi":7,"mean":3.6,"first":"u2","last":"u4","users":3}`,
		},
	}
	for _, kind := range backends {
		for _, mode := range modes {
			t.Run(kind+"/"+mode, func(t *testing.T) {
				p := AggregateParams{Emit: EmitEveryUpdate, Aggregates: []AggregateSpec{
					{Name: "total", Fn: AggSum, Of: compiled(t, "amount")},
					{Name: "n", Fn: AggCount},
					{Name: "lo", Fn: AggMin, Of: compiled(t, "amount")},
					{Name: "hi", Fn: AggMax, Of: compiled(t, "amount")},
					{Name: "mean", Fn: AggAvg, Of: compiled(t, "amount")},
					{Name: "first", Fn: AggFirst, Of: compiled(t, "user")},
					{Name: "last", Fn: AggLast, Of: compiled(t, "user")},
					{Name: "users", Fn: AggCountDistinct, Of: compiled(t, "user")},
				}}
				h, err := openStateful(t, kind, t.TempDir(), nil, nil, aggFn(mode, p, false))
				if err != nil {
					t.Fatal(err)
				}
				bad := &recordErrors{}
				h.feed(bad, in...)
				got := upserts(t, h.finish())
				if len(bad.errs) > 0 {
					t.Fatalf("bad records %v", bad.errs)
				}
				if g := byKey(got); !reflect.DeepEqual(g, want) {
					t.Fatalf("outputs\n%v\nwant\n%v", g, want)
				}
				for _, r := range got { // each output carries its input's metadata
					var src runtime.Record
					for _, s := range in {
						if s.Origin == r.Origin {
							src = s
						}
					}
					if !bytesEq(r.Key, src.Key) || !r.Timestamp.Equal(src.Timestamp) || !reflect.DeepEqual(r.Headers, src.Headers) || src.Origin.Topic == "" {
						t.Fatalf("output %s: key %q ts %v headers %v origin %v, want its input's %q %v %v", r.Value, r.Key, r.Timestamp, r.Headers, r.Origin, src.Key, src.Timestamp, src.Headers)
					}
				}
			})
		}
	}
}

func bytesEq(a, b []byte) bool { return string(a) == string(b) }

// TestAggregateSumOverflow: an integer sum past int64 stays an exact
// integer (math/big), written as a JSON integer with every digit, and
// returns to int64 when it fits again.
func TestAggregateSumOverflow(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			p := AggregateParams{Emit: EmitEveryUpdate, Aggregates: []AggregateSpec{{Name: "s", Fn: AggSum, Of: compiled(t, "amount")}}}
			h, err := openStateful(t, state.KindHashmap, "", nil, nil, aggFn(mode, p, false))
			if err != nil {
				t.Fatal(err)
			}
			h.feed(&recordErrors{}, payment("a", int64(1<<62), "u"), payment("a", int64(1<<62), "u"), payment("a", int64(-1<<62), "u"))
			want := []string{`{"key":"a","s":4611686018427387904}`, `{"key":"a","s":9223372036854775808}`, `{"key":"a","s":4611686018427387904}`}
			if got := values(upserts(t, h.finish())); !reflect.DeepEqual(got, want) {
				t.Fatalf("outputs %v, want %v", got, want)
			}
		})
	}
}

// TestAggregateSumExactPastInt64 is issue 22's acceptance: the sum of
// 9223372036854775000 and 9000 is exactly 9223372036854784000 (a JSON
// integer, never 9.223372036854784e18), on both backends, sync and async;
// the big sum survives a checkpoint and restore, sums on exactly from
// there (also below int64's minimum, and back), and avg is the double of
// the exact sum.
func TestAggregateSumExactPastInt64(t *testing.T) {
	for _, kind := range backends {
		for _, mode := range modes {
			t.Run(kind+"/"+mode, func(t *testing.T) {
				p := AggregateParams{Emit: EmitEveryUpdate, Aggregates: []AggregateSpec{
					{Name: "s", Fn: AggSum, Of: compiled(t, "amount")},
					{Name: "lo", Fn: AggMin, Of: compiled(t, "amount")},
					{Name: "hi", Fn: AggMax, Of: compiled(t, "amount")},
					{Name: "mean", Fn: AggAvg, Of: compiled(t, "amount")},
				}}
				dir := t.TempDir()
				h, err := openStateful(t, kind, dir, nil, nil, aggFn(mode, p, false))
				if err != nil {
					t.Fatal(err)
				}
				bad := &recordErrors{}
				h.feed(bad, payment("a", int64(9223372036854775000), "u"), payment("a", 9000, "u"))
				want := []string{
					`{"key":"a","s":9223372036854775000,"lo":9223372036854775000,"hi":9223372036854775000,"mean":9223372036854775000}`,
					`{"key":"a","s":9223372036854784000,"lo":9000,"hi":9223372036854775000,"mean":4611686018427392000}`,
				}
				if got := values(upserts(t, h.emitted())); !reflect.DeepEqual(got, want) {
					t.Fatalf("outputs %v, want %v", got, want)
				}
				h2, err := openStateful(t, kind, t.TempDir(), nil, snapshotRestore(t, h), aggFn(mode, p, false))
				if err != nil {
					t.Fatal(err)
				}
				// Three of int64's minimum take the sum below it, int64's
				// maximum brings it back.
				h2.feed(bad, payment("a", int64(math.MinInt64), "u"), payment("a", int64(math.MinInt64), "u"),
					payment("a", int64(math.MinInt64), "u"), payment("a", int64(math.MaxInt64), "u"))
				want = []string{
					`{"key":"a","s":8192,"lo":-9223372036854775808,"hi":9223372036854775000,"mean":2730.6666666666665}`,
					`{"key":"a","s":-9223372036854767616,"lo":-9223372036854775808,"hi":9223372036854775000,"mean":-2305843009213692000}`,
					`{"key":"a","s":-18446744073709543424,"lo":-9223372036854775808,"hi":9223372036854775000,"mean":-3689348814741908500}`,
					`{"key":"a","s":-9223372036854767617,"lo":-9223372036854775808,"hi":9223372036854775807,"mean":-1537228672809128000}`,
				}
				got := values(upserts(t, h2.finish()))
				if len(bad.errs) > 0 {
					t.Fatalf("bad records %v", bad.errs)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("outputs after restore\n%v\nwant\n%v", got, want)
				}
			})
		}
	}
}

// TestAggregateAccumulatorStateCompat: accumulators written before big
// integers (no "big" field) decode as before and sum on past int64; a big
// sum's state holds it as a JSON integer and decodes to the same value; a
// uint64 input past int64 is an exact integer too.
func TestAggregateAccumulatorStateCompat(t *testing.T) {
	ser := state.JSONSerializer[aggregateAccumulators]{}
	old, err := ser.Decode([]byte(`{"s":{"fn":"sum","records":1,"num":{"int":9223372036854775000}},"f":{"fn":"sum","records":1,"num":{"float":2.5,"is_float":true}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if n := old["s"].Num; n.Int != 9223372036854775000 || n.Big != nil || n.IsFloat || old["f"].Num.Float != 2.5 || !old["f"].Num.IsFloat {
		t.Fatalf("old state decoded to %+v", old)
	}
	sum := old["s"]
	sum.Num = sum.Num.add(number{Int: 9000})
	b, err := ser.Append(nil, aggregateAccumulators{"s": sum})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"s":{"fn":"sum","records":1,"num":{"big":9223372036854784000}}}`; string(b) != want {
		t.Fatalf("state %s, want %s", b, want)
	}
	if n, _ := toNumber(uint64(math.MaxUint64)); string(n.add(number{Int: 1}).appendJSON(nil)) != "18446744073709551616" {
		t.Fatalf("uint64 max + 1 = %s, want 18446744073709551616", n.add(number{Int: 1}).appendJSON(nil))
	}
	back, err := ser.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(back["s"].Num.appendJSON(nil)); got != "9223372036854784000" {
		t.Fatalf("decoded sum %s, want 9223372036854784000", got)
	}
}

// TestAggregateOnChange: with emit on_change a record that changes no
// result emits nothing.
func TestAggregateOnChange(t *testing.T) {
	rec := func(key string, amount int, status string) runtime.Record {
		return runtime.Record{Key: []byte(key), Value: fmt.Appendf(nil, `{"amount":%d,"status":%q}`, amount, status)}
	}
	in := []runtime.Record{rec("a", 3, "x"), rec("a", 1, "x"), rec("a", 5, "x"), rec("a", 5, "y"), rec("a", 5, "y"), rec("b", 1, "x"), rec("b", 1, "x"), rec("a", 2, "y")}
	want := map[string][]string{
		"a": {`{"key":"a","hi":3,"status":"x"}`, `{"key":"a","hi":5,"status":"x"}`, `{"key":"a","hi":5,"status":"y"}`},
		"b": {`{"key":"b","hi":1,"status":"x"}`},
	}
	for _, kind := range backends {
		for _, mode := range modes {
			t.Run(kind+"/"+mode, func(t *testing.T) {
				p := AggregateParams{Emit: EmitOnChange, Aggregates: []AggregateSpec{
					{Name: "hi", Fn: AggMax, Of: compiled(t, "amount")},
					{Name: "status", Fn: AggLast, Of: compiled(t, "status")},
				}}
				h, err := openStateful(t, kind, t.TempDir(), nil, nil, aggFn(mode, p, false))
				if err != nil {
					t.Fatal(err)
				}
				h.feed(&recordErrors{}, in...)
				if got := byKey(upserts(t, h.finish())); !reflect.DeepEqual(got, want) {
					t.Fatalf("outputs %v, want %v", got, want)
				}
			})
		}
	}
}

// TestAggregateEvalError: an amount that is no number, or missing, is a
// RecordError with reason eval_error naming the expression and the
// aggregate, and the state is untouched: the next good record continues
// from the record before.
func TestAggregateEvalError(t *testing.T) {
	in := []runtime.Record{
		payment("a", 10, "u1"),
		payment("a", "x", "u2"),
		{Key: []byte("a"), Value: []byte(`{"user":"u3"}`)},
		payment("a", 5, "u1"),
	}
	want := []string{`{"key":"a","total":10,"n":1,"users":1}`, `{"key":"a","total":15,"n":2,"users":1}`}
	wantErrs := []string{
		`bad record: eval_error: expression "amount": aggregate total (sum) needs a finite number, got string`,
		`bad record: eval_error: expression "amount": `, // CEL's no-such-key reason follows
	}
	for _, kind := range backends {
		for _, mode := range modes {
			t.Run(kind+"/"+mode, func(t *testing.T) {
				p := AggregateParams{Emit: EmitEveryUpdate, Aggregates: []AggregateSpec{
					{Name: "total", Fn: AggSum, Of: compiled(t, "amount")},
					{Name: "n", Fn: AggCount},
					{Name: "users", Fn: AggCountDistinct, Of: compiled(t, "user")},
				}}
				h, err := openStateful(t, kind, t.TempDir(), nil, nil, aggFn(mode, p, false))
				if err != nil {
					t.Fatal(err)
				}
				bad := &recordErrors{}
				h.feed(bad, in...)
				if got := values(upserts(t, h.finish())); !reflect.DeepEqual(got, want) {
					t.Fatalf("outputs %v, want %v", got, want)
				}
				if len(bad.errs) != len(wantErrs) {
					t.Fatalf("bad records %v, want %d", bad.errs, len(wantErrs))
				}
				for i, e := range bad.errs {
					if e.Reason != runtime.ReasonEvalError || !strings.HasPrefix(e.Error(), wantErrs[i]) {
						t.Fatalf("bad record %d: %q, want reason eval_error and prefix %q", i, e.Error(), wantErrs[i])
					}
				}
			})
		}
	}
}

// TestAggregateStateTTL: with state_ttl 2s a key unseen for 3s starts
// again from zero (its distinct users too), while a key seen within the TTL
// goes on; a distinct value is remembered for 2s after its last occurrence
// (u1 of key a, last seen 2.5s before, counts again). The clock is the
// backends' injected TTL clock.
func TestAggregateStateTTL(t *testing.T) {
	for _, kind := range backends {
		for _, mode := range modes {
			t.Run(kind+"/"+mode, func(t *testing.T) {
				p := AggregateParams{Emit: EmitEveryUpdate, StateTTL: StateTTLParams{TTL: 2 * time.Second}, Aggregates: []AggregateSpec{
					{Name: "total", Fn: AggSum, Of: compiled(t, "amount")},
					{Name: "users", Fn: AggCountDistinct, Of: compiled(t, "user")},
				}}
				clk := newStepClock()
				h, err := openStateful(t, kind, t.TempDir(), clk, nil, aggFn(mode, p, false))
				if err != nil {
					t.Fatal(err)
				}
				bad := &recordErrors{}
				h.feed(bad, payment("a", 1, "u1"), payment("b", 10, "u1"))
				clk.advance(time.Second)
				h.feed(bad, payment("a", 2, "u2"))
				clk.advance(1500 * time.Millisecond) // a last written 1.5s ago, b 2.5s ago
				h.feed(bad, payment("a", 4, "u1"), payment("b", 20, "u1"))
				clk.advance(3 * time.Second) // both unseen for 3s
				h.feed(bad, payment("a", 8, "u1"), payment("b", 40, "u2"))
				want := map[string][]string{
					"a": {`{"key":"a","total":1,"users":1}`, `{"key":"a","total":3,"users":2}`, `{"key":"a","total":7,"users":3}`, `{"key":"a","total":8,"users":1}`},
					"b": {`{"key":"b","total":10,"users":1}`, `{"key":"b","total":20,"users":1}`, `{"key":"b","total":40,"users":1}`},
				}
				if got := byKey(upserts(t, h.finish())); !reflect.DeepEqual(got, want) {
					t.Fatalf("outputs %v, want %v", got, want)
				}
			})
		}
	}
}

// snapshotRestore snapshots h's keyed state, closes h and returns the
// restore of that snapshot.
func snapshotRestore(t *testing.T, h *harness) *Restore {
	t.Helper()
	dir := t.TempDir()
	finish, err := h.op.SnapshotState(h.ctx, &runtime.Barrier{CheckpointID: 1, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := finish(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	upserts(t, h.finish())
	var ts checkpoint.TaskState
	if err := json.Unmarshal(snap.State, &ts); err != nil {
		t.Fatal(err)
	}
	return &Restore{Keyed: []state.RestoreHandle{{Handle: ts.Keyed, Dir: dir}}}
}

// TestAggregateTTLSwitchRefused: state written without state_ttl cannot be
// restored by an aggregate with it, nor the other way round: Open fails
// with a state migration error naming the state.
func TestAggregateTTLSwitchRefused(t *testing.T) {
	noTTL := StateTTLParams{}
	withTTL := StateTTLParams{TTL: time.Minute}
	for _, kind := range backends {
		for _, mode := range modes {
			for _, c := range []struct {
				name         string
				before, then StateTTLParams
				want         string
			}{
				{"enable", noTTL, withTTL, `state "aggregate": ttl was disabled when written but the descriptor has enabled`},
				{"disable", withTTL, noTTL, `state "aggregate": ttl was enabled when written but the descriptor has disabled`},
			} {
				t.Run(kind+"/"+mode+"/"+c.name, func(t *testing.T) {
					params := func(ttl StateTTLParams) AggregateParams {
						return AggregateParams{Emit: EmitEveryUpdate, StateTTL: ttl, Aggregates: []AggregateSpec{{Name: "n", Fn: AggCount}}}
					}
					h, err := openStateful(t, kind, t.TempDir(), nil, nil, aggFn(mode, params(c.before), false))
					if err != nil {
						t.Fatal(err)
					}
					h.feed(&recordErrors{}, payment("a", 1, "u"))
					restore := snapshotRestore(t, h)
					_, err = openStateful(t, kind, t.TempDir(), nil, restore, aggFn(mode, params(c.then), false))
					if !errors.Is(err, state.ErrStateMigration) || !strings.Contains(err.Error(), c.want) {
						t.Fatalf("Open after restore = %v, want a state migration error containing %q", err, c.want)
					}
					var me *state.StateMigrationError
					if !errors.As(err, &me) || me.State != AggregateStateName {
						t.Fatalf("error %v names state %v, want %q", err, me, AggregateStateName)
					}
				})
			}
		}
	}
}

// TestAggregateCheckParams lists every problem CheckParams reports.
func TestAggregateCheckParams(t *testing.T) {
	amount := Expression{}
	_ = amount.UnmarshalText([]byte("amount"))
	for _, c := range []struct {
		name string
		p    AggregateParams
		want []string
	}{
		{"ok", AggregateParams{Aggregates: []AggregateSpec{{Name: "n", Fn: AggCount}, {Name: "s", Fn: AggSum, Of: amount}}}, nil},
		{"none", AggregateParams{}, []string{"aggregates: at least one aggregate is required"}},
		{"names and of", AggregateParams{Aggregates: []AggregateSpec{
			{Name: "s", Fn: AggSum, Of: amount}, {Name: "s", Fn: AggMin, Of: amount}, {Name: "key", Fn: AggCount},
			{Fn: AggMax}, {Name: "c", Fn: AggCount, Of: amount}, {Name: "f"},
		}}, []string{
			`aggregates[1].name: duplicate name "s" (also aggregates[0])`,
			`aggregates[2].name: "key" is the output's key field; choose another name`,
			`aggregates[3].name: required`,
			`aggregates[3].of: required for fn max (an expression such as amount)`,
			`aggregates[4].of: count counts records and takes no of`,
			`aggregates[5].fn: required: one of count, sum, min, max, avg, first, last, count_distinct`,
		}},
		{"ttl missing", AggregateParams{Aggregates: []AggregateSpec{{Name: "n", Fn: AggCount}}, StateTTL: StateTTLParams{UpdateType: TTLOnReadAndWrite}},
			[]string{"state_ttl.ttl: required when state_ttl is set (a duration such as 30m)"}},
		{"ttl too small", AggregateParams{Aggregates: []AggregateSpec{{Name: "n", Fn: AggCount}}, StateTTL: StateTTLParams{TTL: time.Microsecond}},
			[]string{"state_ttl.ttl: must be at least 1ms, got 1µs"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			c.p.CheckParams(func(field, msg string) { got = append(got, field+": "+msg) })
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("problems\n%q\nwant\n%q", got, c.want)
			}
		})
	}
}

// TestStateTTLParamsConfig maps every state_ttl field to Flink's
// StateTtlConfig.
func TestStateTTLParamsConfig(t *testing.T) {
	for _, c := range []struct {
		name string
		p    StateTTLParams
		want *state.StateTtlConfig
	}{
		{"unset", StateTTLParams{}, nil},
		{"defaults", StateTTLParams{TTL: time.Minute}, &state.StateTtlConfig{TTL: time.Minute}},
		{"explicit defaults", StateTTLParams{TTL: time.Minute, UpdateType: TTLOnCreateAndWrite, Visibility: TTLNeverReturnExpired, Cleanup: TTLCleanupBackground},
			&state.StateTtlConfig{TTL: time.Minute}},
		{"all others", StateTTLParams{TTL: 30 * time.Minute, UpdateType: TTLOnReadAndWrite, Visibility: TTLReturnExpiredIfNotCleanedUp, Cleanup: TTLCleanupOnRead},
			&state.StateTtlConfig{TTL: 30 * time.Minute, UpdateType: state.OnReadAndWrite, Visibility: state.ReturnExpiredIfNotCleanedUp, DisableCleanupInBackground: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.p.Config(); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("Config() = %+v, want %+v", got, c.want)
			}
		})
	}
	var u TTLUpdateType
	if err := u.UnmarshalText([]byte("on_write")); err == nil || err.Error() != `must be one of on_create_and_write, on_read_and_write, got "on_write"` {
		t.Fatalf("UnmarshalText(on_write) = %v", err)
	}
}

// TestAggregateEventTimeTTL: with state_ttl {ttl: 10s, time: event} a
// key's aggregates expire 10s of event time after their last update,
// whatever the wall clock does: the same input gives the same output
// however fast it is replayed.
func TestAggregateEventTimeTTL(t *testing.T) {
	p := AggregateParams{Aggregates: []AggregateSpec{{Name: "n", Fn: AggCount}}, Emit: EmitEveryUpdate,
		StateTTL: StateTTLParams{TTL: 10 * time.Second, Time: TTLEventTime}}
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			h, err := openStateful(t, kind, t.TempDir(), nil, nil, NewAggregate(p, false))
			if err != nil {
				t.Fatal(err)
			}
			rec := func(ms int64) runtime.Record {
				return runtime.Record{Key: []byte("a"), Value: []byte(`{}`), Timestamp: time.UnixMilli(ms)}
			}
			h.process(rec(0), rec(5_000), rec(14_000)) // 5 + 10 > 14: alive
			if err := h.op.ProcessWatermark(h.ctx, time.UnixMilli(20_000)); err != nil {
				t.Fatal(err)
			}
			h.process(rec(25_000)) // last update at 14: 14 + 10 <= 25, expired
			want := []string{`{"key":"a","n":1}`, `{"key":"a","n":2}`, `{"key":"a","n":3}`, `{"key":"a","n":1}`}
			if got := values(upserts(t, h.finish())); !reflect.DeepEqual(got, want) {
				t.Fatalf("got %q, want %q", got, want)
			}
		})
	}
}

// upserts checks that recs, an aggregate's output, is a well-formed
// changelog (per key: pairs of -U holding exactly the row emitted last and
// +U, or a -D of the row emitted last; a +I starts a key, or starts it
// again after its state expired) and returns it without its -U records:
// the rows an upsert sink writes, one per input record as before
// changelogs. A -U of a key with no row in recs (a harness restored from
// another's state) is taken as that row.
func upserts(t *testing.T, recs []runtime.Record) []runtime.Record {
	t.Helper()
	last := map[string]string{}    // key -> the row emitted last; absent: none
	pending := map[string]string{} // key -> the -U waiting for its +U
	var out []runtime.Record
	for _, r := range recs {
		k, v := string(r.Key), string(r.Value)
		prev, has := last[k]
		_, waiting := pending[k]
		switch r.Change {
		case runtime.ChangeInsert:
			if waiting {
				t.Fatalf("key %q: +I %s while a -U waits for its +U", k, v)
			}
		case runtime.ChangeUpdateBefore:
			if !has && !waiting {
				prev, has = v, true
			}
			if !has || waiting || v != prev {
				t.Fatalf("key %q: -U %s, want the row emitted last %q (exists %v, a -U pending %v)", k, v, prev, has, waiting)
			}
			pending[k] = v
			continue
		case runtime.ChangeUpdateAfter:
			if !waiting {
				t.Fatalf("key %q: +U %s without its -U", k, v)
			}
			delete(pending, k)
		case runtime.ChangeDelete:
			if !has || waiting || v != prev {
				t.Fatalf("key %q: -D %s, want the row emitted last %q", k, v, prev)
			}
			delete(last, k)
			out = append(out, r)
			continue
		}
		last[k] = v
		out = append(out, r)
	}
	for k, v := range pending {
		t.Fatalf("key %q: -U %s without its +U", k, v)
	}
	return out
}

// TestAccumulatorsSerializer: the aggregate state's serializer keeps a
// key's accumulators decoded on Pebble (a state.HeapSerializer), in the
// order of the aggregates, and writes exactly the bytes
// state.JSONSerializer writes for them as an aggregateAccumulators (the
// stored form every earlier binary wrote and reads), under its name, so
// checkpoints of main and of this code read in both: an old state's bytes
// decode and encode back unchanged, an accumulator of a name no longer
// configured is dropped, an aggregate the state lacks is absent (Fn "");
// Copy keeps the row it is handed (the aggregate never changes a row it
// updated), View shares nothing the caller changes, and Copy refuses a
// double JSON cannot hold with the error Append gives.
func TestAccumulatorsSerializer(t *testing.T) {
	a := newAggregator(AggregateParams{Aggregates: []AggregateSpec{
		{Name: "s", Fn: AggSum}, {Name: "n", Fn: AggCount}, {Name: "f<&>", Fn: AggFirst}, {Name: "a", Fn: AggAvg}, {Name: "new", Fn: AggMax},
	}}, false)
	ser := a.accDescriptor().Serializer
	heap, ok := ser.(state.HeapSerializer[[]aggAccumulator])
	if !ok {
		t.Fatal("the aggregate state's serializer is not a state.HeapSerializer")
	}
	plain := state.JSONSerializer[aggregateAccumulators]{}
	if ser.Name() != plain.Name() {
		t.Fatalf("name %q, want %q", ser.Name(), plain.Name())
	}
	old := aggregateAccumulators{
		"s":    {Fn: AggSum, Records: 2, Num: number{Big: new(big.Int).Lsh(big.NewInt(1), 70)}},
		"f<&>": {Fn: AggFirst, Records: 1, Value: json.RawMessage(`{"x":"<y>"}`)},
		"a":    {Fn: AggAvg, Records: 1, Num: number{Float: 2.5, IsFloat: true}},
		"n":    {Fn: AggCount, Records: 7},
	}
	row := []aggAccumulator{old["s"], old["n"], old["f<&>"], old["a"], {}}
	for _, c := range []struct {
		stored aggregateAccumulators
		row    []aggAccumulator
	}{{old, row}, {nil, nil}, {aggregateAccumulators{}, make([]aggAccumulator, 5)}} {
		want, _ := plain.Append(nil, c.stored)
		if direct, _ := ser.Append(nil, c.row); string(direct) != string(want) {
			t.Fatalf("bytes %s, want %s", direct, want)
		}
		back, err := ser.Decode(want)
		if err != nil || (back == nil) != (c.row == nil) || len(back) != len(c.row) {
			t.Fatalf("decoded %v, %v from %s", back, err, want)
		}
		kept, err := heap.Copy(back, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := heap.AppendKept(nil, kept); string(got) != string(want) {
			t.Fatalf("round trip %s, want %s", got, want)
		}
	}
	// A name no longer configured is dropped; the others keep their place.
	gone := aggregateAccumulators{"n": {Fn: AggCount, Records: 3}, "removed": {Fn: AggCount, Records: 9}}
	b, _ := plain.Append(nil, gone)
	back, err := ser.Decode(b)
	if err != nil || len(back) != 5 || back[1].Records != 3 || back[0].Fn != "" {
		t.Fatalf("decoded %+v, %v from %s", back, err, b)
	}
	if got, _ := ser.Append(nil, back); string(got) != `{"n":{"fn":"count","records":3}}` {
		t.Fatalf("re-encoded %s", got)
	}

	want, _ := plain.Append(nil, old)
	kept, _ := heap.Copy(row, nil)
	if &kept[0] != &row[0] {
		t.Error("Copy copied the row it was handed")
	}
	view := heap.View(kept)
	view[0].Num.Big.SetInt64(1)
	view[1] = aggAccumulator{Fn: AggCount, Records: 1}
	if got, _ := heap.AppendKept(nil, kept); string(got) != string(want) {
		t.Fatalf("kept accumulators changed through the view:\n%s\nwant\n%s", got, want)
	}
	// A known value's first/last bytes are shared, not copied again.
	again, _ := heap.Copy(view, [][]aggAccumulator{kept})
	if !sameBytes(again[2].Value, kept[2].Value) {
		t.Error("Copy copied a first value it knows")
	}
	inf := []aggAccumulator{{Fn: AggSum, Records: 2, Num: number{Float: math.Inf(1), IsFloat: true}}}
	_, wantErr := plain.Append(nil, aggregateAccumulators{"s": inf[0]})
	if _, err := heap.Copy(inf, nil); err == nil || wantErr == nil || err.Error() != wantErr.Error() {
		t.Fatalf("Copy of +Inf: %v, want Append's %v", err, wantErr)
	}
}
