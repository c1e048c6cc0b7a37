package operators

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// mbStep is one step of a mini-batch model run: a record, a checkpoint
// (snapshot, close, restore into a new operator), a watermark, or tick:
// the wall clock moves on by tick and the allow_latency wake-up runs (as
// from the mailbox).
type mbStep struct {
	rec       runtime.Record
	barrier   bool
	watermark bool
	tick      time.Duration
}

// mbRun drives one aggregate operator through steps, restoring at every
// barrier, and returns every record it emitted (in order, over all its
// restored incarnations), the upsert table after each barrier and each
// watermark, and the
// outputs grouped by batch: what was emitted between two batch ends (a
// size or max_bytes trigger, allow_latency, a barrier, a watermark
// without allow_latency, the end of input). size is the mini-batch size
// (0: off); latency its allow_latency.
//
// Without mini_batch it also keeps the upsert table after every step
// (prefix); with it, after every step that leaves no batch open, the
// table must equal the plain run's prefix table of that step (plain).
// The watermarks forwarded (by the operator at a batch's end, or, when
// ProcessWatermark returns nil, by the task the test plays) are checked:
// increasing, after their batch's rows, and none held once no batch is
// open.
type mbRun struct {
	t       *testing.T
	kind    string
	newFn   func() *Aggregate
	fn      *Aggregate
	op      *KeyedOperator
	ch      runtime.Channel
	restore *Restore
	all     []runtime.Record
	tables  []map[string]string
	batches [][]runtime.Record
	size    int
	latency time.Duration
	plain   *mbRun
	prefix  []map[string]string
	// clock is the wall clock the operator's batch clock reads; start
	// when the open batch began by it.
	clock, start time.Time
	// wms are the watermarks forwarded; latest the last handed to the
	// operator.
	wms    []time.Time
	latest time.Time
}

func (r *mbRun) open() {
	r.t.Helper()
	r.ch = runtime.NewChannel(1 << 14)
	out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{r.ch}, runtime.ForwardPartitioner{}))
	r.fn = r.newFn()
	r.op = NewKeyedProcessOperator(OpenContext{Operator: "op", Parallelism: 1}, opener(r.kind, r.t.TempDir()), r.restore, r.fn, out)
	if err := r.op.Open(context.Background()); err != nil {
		r.t.Fatal(err)
	}
	if (r.op.bundle != nil) != (r.latency > 0) {
		r.t.Fatalf("allow_latency %s: batch clock %v", r.latency, r.op.bundle)
	}
	if r.op.bundle != nil {
		r.op.bundle.now = func() time.Time { return r.clock }
	}
}

// open reports whether a batch is open.
func (r *mbRun) batchOpen() bool { return r.fn.BundleRecords() > 0 }

// drain takes what the operator emitted; batchEnd says a batch ended, so
// the records form one batch (outside one, nothing may have been emitted
// with mini_batch on).
func (r *mbRun) drain(batchEnd bool) {
	r.t.Helper()
	var got []runtime.Record
	for {
		select {
		case el := <-r.ch:
			switch el.Kind {
			case runtime.KindRecord:
				rec := el.Record
				rec.Value = append([]byte(nil), rec.Value...)
				got = append(got, rec)
			case runtime.KindWatermark:
				if r.latency == 0 {
					r.t.Fatalf("mini_batch %d: the operator forwarded watermark %d itself without allow_latency", r.size, el.Watermark.UnixMilli())
				}
				r.forwarded(el.Watermark)
				if len(r.ch) > 0 {
					if next := <-r.ch; next.Kind == runtime.KindRecord {
						r.t.Fatalf("mini_batch %d: a row after the held watermark %d its batch's end forwarded: %s", r.size, el.Watermark.UnixMilli(), next.Record.Value)
					}
					r.t.Fatalf("mini_batch %d: more after the held watermark %d", r.size, el.Watermark.UnixMilli())
				}
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
		r.t.Fatalf("mini_batch %d: %d records emitted within a batch (%d buffered)", r.size, len(got), r.fn.BundleRecords())
	}
}

// forwarded records watermark wm going downstream; it must be after the
// last forwarded.
func (r *mbRun) forwarded(wm time.Time) {
	r.t.Helper()
	if n := len(r.wms); n > 0 && !wm.After(r.wms[n-1]) {
		r.t.Fatalf("mini_batch %d: watermark %d forwarded after %d", r.size, wm.UnixMilli(), r.wms[n-1].UnixMilli())
	}
	r.wms = append(r.wms, wm)
}

// settled checks, after step i, that a run without an open batch shows
// the plain run's table after the same steps and holds no watermark back.
func (r *mbRun) settled(i int) {
	r.t.Helper()
	if r.plain == nil || r.batchOpen() {
		return
	}
	if got := upsertTable(r.all); !reflect.DeepEqual(got, r.plain.prefix[i]) {
		r.t.Fatalf("mini_batch %d allow_latency %s: no batch open after step %d, table\n%v\nwant (without mini_batch)\n%v", r.size, r.latency, i, got, r.plain.prefix[i])
	}
	if !r.latest.IsZero() && (len(r.wms) == 0 || !r.wms[len(r.wms)-1].Equal(r.latest)) {
		r.t.Fatalf("mini_batch %d allow_latency %s: no batch open after step %d, watermark %d not forwarded (forwarded %v)", r.size, r.latency, i, r.latest.UnixMilli(), r.wms)
	}
}

func (r *mbRun) run(steps []mbStep) {
	r.t.Helper()
	ctx := context.Background()
	r.open()
	wm := time.UnixMilli(0)
	r.clock = time.UnixMilli(1_000_000)
	for i, s := range steps {
		switch {
		case s.tick > 0:
			r.clock = r.clock.Add(s.tick)
			if r.op.bundle == nil {
				break
			}
			open := r.batchOpen()
			due := open && !r.clock.Before(r.start.Add(r.latency))
			r.op.bundleDue()
			if open && r.batchOpen() == due || !open && r.batchOpen() {
				r.t.Fatalf("mini_batch %d allow_latency %s: a batch open since %s at %s: ended %t, want %t", r.size, r.latency,
					r.start.Sub(time.UnixMilli(1_000_000)), r.clock.Sub(time.UnixMilli(1_000_000)), !r.batchOpen(), due)
			}
			r.drain(due)
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
			if r.batchOpen() {
				r.t.Fatalf("mini_batch %d: a batch open after the snapshot", r.size)
			}
			r.settled(i)
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
			r.latest = wm
			open := r.batchOpen()
			switch err := r.op.ProcessWatermark(ctx, wm); {
			case err == runtime.ErrWatermarkHeld:
				if r.latency == 0 || !open {
					r.t.Fatalf("mini_batch %d allow_latency %s: watermark held (a batch open before: %t)", r.size, r.latency, open)
				}
				r.drain(false)
			case err != nil:
				r.t.Fatal(err)
			default:
				if r.latency > 0 && open {
					r.t.Fatalf("mini_batch %d allow_latency %s: watermark not held with a batch open", r.size, r.latency)
				}
				r.drain(true)
				r.forwarded(wm) // the task forwards it
				if r.latency == 0 {
					r.tables = append(r.tables, upsertTable(r.all)) // the rows before wm were emitted before it
				}
			}
		default:
			open := r.batchOpen()
			if err := r.op.ProcessRecord(ctx, 0, s.rec); err != nil {
				r.t.Fatal(err)
			}
			if !open && r.batchOpen() {
				r.start = r.clock
			}
			r.drain(r.size == 0 || !r.batchOpen())
		}
		if r.size == 0 {
			r.prefix = append(r.prefix, upsertTable(r.all))
		} else if b := r.fn.batch; b.bytes >= b.maxBytes {
			r.t.Fatalf("mini_batch %d: %d bytes buffered after step %d, max_bytes %d", r.size, b.bytes, i, b.maxBytes)
		}
		r.settled(i)
	}
	if err := r.op.EndInput(ctx); err != nil {
		r.t.Fatal(err)
	}
	r.drain(true)
	r.settled(len(steps) - 1)
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
		case 1, 2, 3:
			steps = append(steps, mbStep{watermark: true})
		case 4, 5:
			steps = append(steps, mbStep{tick: time.Duration(1+rng.IntN(15)) * time.Millisecond})
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
// or -D). Each case runs twice: with every aggregate, and without those
// keeping a MapState (count_distinct; min and max over a changelog), where
// the batch folds each record as it comes (aggBatch.early).
func TestAggregateMiniBatchModel(t *testing.T) {
	type variant struct {
		emit            AggregateEmit
		updateAfterOnly bool
	}
	variants := []variant{{EmitEveryUpdate, false}, {EmitEveryUpdate, true}, {EmitOnChange, false}}
	for _, kind := range backends {
		for _, changelog := range []bool{false, true} {
			for _, maps := range []bool{true, false} {
				for vi, v := range variants {
					name := fmt.Sprintf("%s/changelog=%t/maps=%t/%s/uao=%t", kind, changelog, maps, v.emit, v.updateAfterOnly)
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
						// dropped: the aggregates left out without maps.
						dropped := map[string]bool{}
						if !maps {
							dropped["users"] = true
							if changelog {
								dropped["lo"], dropped["hi"] = true, true
							}
							specs = slices.DeleteFunc(specs, func(s AggregateSpec) bool { return dropped[s.Name] })
						}
						newRun := func(mb MiniBatchParams) *mbRun {
							return &mbRun{t: t, kind: kind, size: mb.Size, latency: mb.AllowLatency, newFn: func() *Aggregate {
								p := AggregateParams{Emit: v.emit, Aggregates: specs}
								if mb.Size > 0 {
									p.MiniBatch = &mb
								}
								f := NewAggregate(p, changelog)
								f.updateAfterOnly = v.updateAfterOnly
								return f
							}}
						}
						if f := newRun(MiniBatchParams{Size: 1}).newFn(); f.foldsEarly() == maps {
							t.Fatalf("maps=%t: foldsEarly %t", maps, f.foldsEarly())
						}
						plain := newRun(MiniBatchParams{})
						plain.run(steps)
						want := model.table(changelog)
						for _, row := range want {
							for name := range dropped {
								delete(row, name)
							}
						}
						if got := decodeTable(t, plain.tables[len(plain.tables)-1]); !reflect.DeepEqual(got, want) {
							t.Fatalf("without mini_batch: table\n%v\nwant (model)\n%v", got, want)
						}
						for _, mb := range []MiniBatchParams{{Size: 1}, {Size: 2}, {Size: 3}, {Size: 5}, {Size: 17}, {Size: 1000},
							{Size: 1000, MaxBytes: 700}, {Size: 1000, MaxBytes: 5000},
							{Size: 5, AllowLatency: 10 * time.Millisecond}, {Size: 17, AllowLatency: 10 * time.Millisecond},
							{Size: 1000, AllowLatency: 10 * time.Millisecond}, {Size: 1000, AllowLatency: 20 * time.Millisecond, MaxBytes: 3000}} {
							size := mb.Size
							b := newRun(mb)
							b.plain = plain
							b.run(steps)
							if mb.AllowLatency > 0 { // the tables at checkpoints and the end (watermarks do not end a batch)
								if got, want := b.tables[len(b.tables)-1], plain.tables[len(plain.tables)-1]; !reflect.DeepEqual(got, want) {
									t.Fatalf("%+v: final table\n%v\nwant (without mini_batch)\n%v", mb, got, want)
								}
							} else if !reflect.DeepEqual(b.tables, plain.tables) {
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
							if n := len(b.wms); n != len(plain.wms) && mb.AllowLatency == 0 || n > 0 && !b.wms[n-1].Equal(plain.wms[len(plain.wms)-1]) {
								t.Fatalf("%+v: watermarks forwarded %v, without mini_batch %v", mb, b.wms, plain.wms)
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
