package operators

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// mbStep is one step of a mini-batch model run: a record, a checkpoint
// (snapshot, close, restore into a new operator) or a watermark.
type mbStep struct {
	rec       runtime.Record
	barrier   bool
	watermark bool
}

// mbRun drives one aggregate operator through steps, restoring at every
// barrier, and returns every record it emitted (in order, over all its
// restored incarnations), the upsert table after each barrier and each
// watermark, and the
// outputs grouped by batch: what was emitted between two batch ends (a
// size trigger, a barrier, a watermark, the end of input). size is the
// mini-batch size (0: off).
type mbRun struct {
	t        *testing.T
	kind     string
	newFn    func() *Aggregate
	op       *KeyedOperator
	ch       runtime.Channel
	restore  *Restore
	all      []runtime.Record
	tables   []map[string]string
	batches  [][]runtime.Record
	buffered int
	size     int
}

func (r *mbRun) open() {
	r.t.Helper()
	r.ch = runtime.NewChannel(1 << 14)
	out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{r.ch}, runtime.ForwardPartitioner{}))
	r.op = NewKeyedProcessOperator(OpenContext{Operator: "op", Parallelism: 1}, opener(r.kind, r.t.TempDir()), r.restore, r.newFn(), out)
	if err := r.op.Open(context.Background()); err != nil {
		r.t.Fatal(err)
	}
}

// drain takes what the operator emitted; batchEnd says a batch ended, so
// the records form one batch (outside one, nothing may have been emitted
// with mini_batch on).
func (r *mbRun) drain(batchEnd bool) {
	r.t.Helper()
	var got []runtime.Record
	for {
		select {
		case el := <-r.ch:
			if el.Kind == runtime.KindRecord {
				rec := el.Record
				rec.Value = append([]byte(nil), rec.Value...)
				got = append(got, rec)
			}
			continue
		default:
		}
		break
	}
	r.all = append(r.all, got...)
	if r.size == 0 {
		return
	}
	switch {
	case batchEnd:
		r.batches = append(r.batches, got)
	case len(got) > 0:
		r.t.Fatalf("mini_batch %d: %d records emitted within a batch (%d buffered)", r.size, len(got), r.buffered)
	}
}

func (r *mbRun) run(steps []mbStep) {
	r.t.Helper()
	ctx := context.Background()
	r.open()
	wm := time.UnixMilli(0)
	for _, s := range steps {
		switch {
		case s.barrier:
			dir := r.t.TempDir()
			finish, err := r.op.SnapshotState(ctx, &runtime.Barrier{CheckpointID: 1, Dir: dir})
			if err != nil {
				r.t.Fatal(err)
			}
			snap, err := finish(ctx)
			if err != nil {
				r.t.Fatal(err)
			}
			r.drain(true)
			r.buffered = 0
			if err := r.op.Close(); err != nil {
				r.t.Fatal(err)
			}
			var ts checkpoint.TaskState
			if err := json.Unmarshal(snap.State, &ts); err != nil {
				r.t.Fatal(err)
			}
			r.restore = &Restore{Keyed: []state.RestoreHandle{{Handle: ts.Keyed, Dir: dir}}}
			r.tables = append(r.tables, upsertTable(r.all))
			r.open()
		case s.watermark:
			wm = wm.Add(time.Second)
			if err := r.op.ProcessWatermark(ctx, wm); err != nil {
				r.t.Fatal(err)
			}
			r.drain(true)
			r.buffered = 0
			r.tables = append(r.tables, upsertTable(r.all)) // the rows before wm were emitted before it
		default:
			if err := r.op.ProcessRecord(ctx, 0, s.rec); err != nil {
				r.t.Fatal(err)
			}
			r.buffered++
			end := r.size > 0 && r.buffered == r.size
			if end {
				r.buffered = 0
			}
			r.drain(end || r.size == 0)
		}
	}
	if err := r.op.EndInput(ctx); err != nil {
		r.t.Fatal(err)
	}
	r.drain(true)
	if err := r.op.Close(); err != nil {
		r.t.Fatal(err)
	}
	r.tables = append(r.tables, upsertTable(r.all))
}

// upsertTable is the table an upsert sink writes from recs: per key the
// last +I or +U row, none after a -D.
func upsertTable(recs []runtime.Record) map[string]string {
	tab := map[string]string{}
	for _, r := range recs {
		switch r.Change {
		case runtime.ChangeInsert, runtime.ChangeUpdateAfter:
			tab[string(r.Key)] = string(r.Value)
		case runtime.ChangeDelete:
			delete(tab, string(r.Key))
		}
	}
	return tab
}

// mbModel is the independent model of the aggregates of
// TestAggregateMiniBatchModel: per key the rows present (amount, user),
// in order of arrival.
type mbModel map[string][][2]any

// table renders each key's row as the operator's output, decoded.
func (m mbModel) table(changelog bool) map[string]map[string]any {
	out := map[string]map[string]any{}
	for k, rows := range m {
		if len(rows) == 0 {
			continue
		}
		var sum int64
		lo, hi := rows[0][0].(int64), rows[0][0].(int64)
		users := map[string]bool{}
		for _, r := range rows {
			a := r[0].(int64)
			sum += a
			lo, hi = min(lo, a), max(hi, a)
			users[r[1].(string)] = true
		}
		row := map[string]any{"key": k, "total": float64(sum), "n": float64(len(rows)), "lo": float64(lo), "hi": float64(hi),
			"mean": float64(sum) / float64(len(rows)), "users": float64(len(users))}
		if !changelog {
			row["first_user"] = rows[0][1]
			row["last_amount"] = float64(rows[len(rows)-1][0].(int64))
		}
		out[k] = row
	}
	return out
}

// decodeTable decodes the rows of an upsert table.
func decodeTable(t *testing.T, tab map[string]string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for k, v := range tab {
		var row map[string]any
		if err := json.Unmarshal([]byte(v), &row); err != nil {
			t.Fatalf("key %q: row %s: %v", k, v, err)
		}
		out[k] = row
	}
	return out
}

// mbSteps generates n records over keys k0..k(keys-1), amounts -20..20 and
// users u0..u5, with a checkpoint and a watermark each with probability
// 1/40 before a record. Over a changelog input a record is, as often as
// the key has rows, a retraction of one of them (-D, or -U followed by
// its +U), so the changelog is consistent; a retraction of a key without
// rows (ignored) now and then. It returns the steps and the model after
// them.
func mbSteps(rng *rand.Rand, n, keys int, changelog bool) ([]mbStep, mbModel) {
	m := mbModel{}
	var steps []mbStep
	rec := func(c runtime.ChangeKind, k string, amount int64, user string) {
		r := changed(c, k, amount, user)
		r.Timestamp = time.UnixMilli(int64(len(steps)))
		if len(steps)%7 == 0 {
			r.Headers = []runtime.Header{{Key: "h", Value: []byte(fmt.Sprint(len(steps)))}}
		}
		steps = append(steps, mbStep{rec: r})
	}
	for range n {
		switch rng.IntN(40) {
		case 0:
			steps = append(steps, mbStep{barrier: true})
		case 1:
			steps = append(steps, mbStep{watermark: true})
		}
		k := fmt.Sprintf("k%d", rng.IntN(keys))
		rows := m[k]
		if changelog && rng.IntN(60) == 0 {
			rec(runtime.ChangeDelete, fmt.Sprintf("none%d", rng.IntN(3)), 1, "u0") // a key with no rows: ignored
		}
		if changelog && len(rows) > 0 && rng.IntN(3) == 0 {
			i := rng.IntN(len(rows))
			old := rows[i]
			m[k] = append(rows[:i:i], rows[i+1:]...)
			if rng.IntN(2) == 0 {
				rec(runtime.ChangeDelete, k, old[0].(int64), old[1].(string))
				continue
			}
			rec(runtime.ChangeUpdateBefore, k, old[0].(int64), old[1].(string))
			row := [2]any{rng.Int64N(41) - 20, fmt.Sprintf("u%d", rng.IntN(6))}
			m[k] = append(m[k], row)
			rec(runtime.ChangeUpdateAfter, k, row[0].(int64), row[1].(string))
			continue
		}
		row := [2]any{rng.Int64N(41) - 20, fmt.Sprintf("u%d", rng.IntN(6))}
		m[k] = append(m[k], row)
		rec(runtime.ChangeInsert, k, row[0].(int64), row[1].(string))
	}
	return steps, m
}

// TestAggregateMiniBatchModel runs random inputs through the aggregate
// with and without mini_batch, on both backends: every function (sum,
// count, min and max, avg, count_distinct; first and last over an
// append-only input; over a changelog min and max retract through their
// multisets and keys are emptied and filled again), -U/+U/-D retractions
// and retractions of keys without rows, batch sizes 1 to 1000, barriers
// (each a snapshot, then a restore into a new operator) and watermarks at
// random points, emit every_update and on_change, with and without the
// -U rows. The upsert table at every checkpoint, every watermark and at
// the end is the same
// with and without mini_batch, and the final one equals an independent
// model's; the changelog is consistent (each -U and -D holds the row last
// emitted, upserts); with mini_batch nothing is emitted inside a batch,
// and each key emits at most one change per batch (+I, +U, -U then +U,
// or -D).
func TestAggregateMiniBatchModel(t *testing.T) {
	type variant struct {
		emit            AggregateEmit
		updateAfterOnly bool
	}
	variants := []variant{{EmitEveryUpdate, false}, {EmitEveryUpdate, true}, {EmitOnChange, false}}
	for _, kind := range backends {
		for _, changelog := range []bool{false, true} {
			for vi, v := range variants {
				name := fmt.Sprintf("%s/changelog=%t/%s/uao=%t", kind, changelog, v.emit, v.updateAfterOnly)
				t.Run(name, func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(vi), map[bool]uint64{false: 1, true: 2}[changelog]))
					steps, model := mbSteps(rng, 400, 6, changelog)
					specs := []AggregateSpec{
						{Name: "total", Fn: AggSum, Of: compiled(t, "amount")},
						{Name: "n", Fn: AggCount},
						{Name: "lo", Fn: AggMin, Of: compiled(t, "amount")},
						{Name: "hi", Fn: AggMax, Of: compiled(t, "amount")},
						{Name: "mean", Fn: AggAvg, Of: compiled(t, "amount")},
						{Name: "users", Fn: AggCountDistinct, Of: compiled(t, "user")},
					}
					if !changelog {
						specs = append(specs,
							AggregateSpec{Name: "first_user", Fn: AggFirst, Of: compiled(t, "user")},
							AggregateSpec{Name: "last_amount", Fn: AggLast, Of: compiled(t, "amount")})
					}
					newRun := func(size int) *mbRun {
						return &mbRun{t: t, kind: kind, size: size, newFn: func() *Aggregate {
							p := AggregateParams{Emit: v.emit, Aggregates: specs}
							if size > 0 {
								p.MiniBatch = &MiniBatchParams{Size: size}
							}
							f := NewAggregate(p, changelog)
							f.updateAfterOnly = v.updateAfterOnly
							return f
						}}
					}
					plain := newRun(0)
					plain.run(steps)
					if got, want := decodeTable(t, plain.tables[len(plain.tables)-1]), model.table(changelog); !reflect.DeepEqual(got, want) {
						t.Fatalf("without mini_batch: table\n%v\nwant (model)\n%v", got, want)
					}
					for _, size := range []int{1, 2, 3, 5, 17, 1000} {
						b := newRun(size)
						b.run(steps)
						if !reflect.DeepEqual(b.tables, plain.tables) {
							t.Fatalf("mini_batch %d: tables at the checkpoints, watermarks and the end\n%v\nwant (without mini_batch)\n%v", size, b.tables, plain.tables)
						}
						checkChangelog(t, b.all, v.updateAfterOnly)
						for i, batch := range b.batches {
							changes := map[string]int{}
							for _, r := range batch {
								if r.Change != runtime.ChangeUpdateBefore { // -U comes with its +U
									changes[string(r.Key)]++
								}
							}
							for k, n := range changes {
								if n > 1 {
									t.Fatalf("mini_batch %d: batch %d: key %s emitted %d changes, want at most 1: %v", size, i, k, n, changelogText(batch))
								}
							}
						}
						if size == 1 && len(b.all) != len(plain.all) && v.emit == EmitEveryUpdate && !changelog {
							t.Fatalf("mini_batch 1: %d records emitted, without %d", len(b.all), len(plain.all))
						}
					}
				})
			}
		}
	}
}

// checkChangelog checks recs as upserts does (with updateAfterOnly, +U
// rows come without their -U: those are added back first), and that every
// output carries its input's key as a string field.
func checkChangelog(t *testing.T, recs []runtime.Record, updateAfterOnly bool) {
	t.Helper()
	if updateAfterOnly {
		last := map[string]string{}
		var full []runtime.Record
		for _, r := range recs {
			if r.Change == runtime.ChangeUpdateBefore {
				t.Fatalf("a -U with updateAfterOnly: %s", r.Value)
			}
			if r.Change == runtime.ChangeUpdateAfter {
				full = append(full, runtime.Record{Key: r.Key, Value: []byte(last[string(r.Key)]), Change: runtime.ChangeUpdateBefore})
			}
			last[string(r.Key)] = string(r.Value)
			full = append(full, r)
		}
		recs = full
	}
	upserts(t, recs)
	for _, r := range recs {
		if !strings.Contains(string(r.Value), fmt.Sprintf(`"key":%q`, r.Key)) {
			t.Fatalf("row %s of key %s", r.Value, r.Key)
		}
	}
}
