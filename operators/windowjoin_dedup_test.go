package operators

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// TestWindowJoinDedupModel joins a random stream of 600 left and right
// records over 3 keys (many records of a key and side per window), with
// watermarks 3s behind the largest time, in tumbling 10s and sliding
// 10s/5s windows, with dedup left, right and both, inner and full, on
// both backends, with a snapshot and restore half-way. The output equals
// the definition computed independently: per key and window, a side with
// dedup holds only the first of its records (in arrival order) that
// entered the window, the other side every record that did; the pairs
// and unmatched rows are those of TestWindowJoinModel over what the
// window holds, and the rows held before the last watermark are those
// of the windows it left open (BufferedRows: a dropped duplicate is not
// held). A dropped duplicate is not late; a record that entered
// none of its windows is; nothing is left once every window ended.
func TestWindowJoinDedupModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(45, 8))
	var events []joinEvent
	maxTS := int64(0)
	for i := range 600 {
		ts := int64(30_000 + i*100 + rng.IntN(14_000) - 7_000)
		events = append(events, joinEvent{side: rng.IntN(2), key: fmt.Sprint("k", rng.IntN(3)), ts: ts, id: i})
		maxTS = max(maxTS, ts)
		if i%10 == 9 {
			events = append(events, joinEvent{wm: maxTS - 3_000})
		}
	}
	for _, wk := range []struct {
		name        string
		size, slide int64
	}{{"tumbling", 10_000, 0}, {"sliding", 10_000, 5_000}} {
		step := wk.size
		if wk.slide > 0 {
			step = wk.slide
		}
		windowsOf := func(ts int64) []int64 { // starts
			var out []int64
			for s := ts - ts%step; s > ts-wk.size; s -= step {
				out = append(out, s)
			}
			return out
		}
		for _, dedup := range []WindowJoinDedup{WindowJoinDedupLeft, WindowJoinDedupRight, WindowJoinDedupBoth} {
			type kw struct {
				key   string
				start int64
			}
			entered := map[kw][2][]joinEvent{}
			var late []string
			dropped := 0
			wm := int64(0)
			for _, e := range events {
				if e.wm > 0 {
					wm = max(wm, e.wm)
					continue
				}
				in := false
				for _, s := range windowsOf(e.ts) {
					if s+wk.size-1 <= wm {
						continue
					}
					in = true
					k := kw{e.key, s}
					sides := entered[k]
					if dedup.keepsFirst(e.side) && len(sides[e.side]) > 0 {
						dropped++
						continue
					}
					sides[e.side] = append(sides[e.side], e)
					entered[k] = sides
				}
				if !in {
					late = append(late, e.value())
				}
			}
			slices.Sort(late)
			// The rows held before the last watermark: those of the windows
			// it has not fired (a dropped duplicate is not held).
			held := int64(0)
			for k, sides := range entered {
				if k.start+wk.size-1 > wm {
					held += int64(len(sides[0]) + len(sides[1]))
				}
			}
			if dropped < 100 || len(late) == 0 {
				t.Fatalf("%s %s: %d duplicates dropped, %d late records: the input should give more", wk.name, dedup, dropped, len(late))
			}
			for _, kind := range []JoinKind{JoinInner, JoinFullOuter} {
				var want []string
				for k, sides := range entered {
					end := k.start + wk.size
					win := fmt.Sprintf(`,"window_start":%q,"window_end":%q`, time.UnixMilli(k.start).UTC().Format(time.RFC3339Nano), time.UnixMilli(end).UTC().Format(time.RFC3339Nano))
					line := func(l, r string) string {
						return fmt.Sprintf(`%s %d {"left":%s,"right":%s%s}`, k.key, end-1, l, r, win)
					}
					for _, l := range sides[0] {
						for _, r := range sides[1] {
							want = append(want, line(l.value(), r.value()))
						}
					}
					for side := range 2 {
						if len(sides[1-side]) == 0 && kind.outer(side) {
							for _, e := range sides[side] {
								if side == 0 {
									want = append(want, line(e.value(), "null"))
								} else {
									want = append(want, line("null", e.value()))
								}
							}
						}
					}
				}
				slices.Sort(want)
				for _, backend := range backends {
					t.Run(fmt.Sprintf("%s/%s/%s/%s", wk.name, dedup, kind, backend), func(t *testing.T) {
						p := WindowJoinParams{Kind: Tumbling, Size: time.Duration(wk.size) * time.Millisecond, Join: kind, Dedup: dedup}
						if wk.slide > 0 {
							p.Kind, p.Slide = Sliding, time.Duration(wk.slide)*time.Millisecond
						}
						h, j := newWindowJoinHarness(t, backend, t.TempDir(), nil, p)
						var got, gotLate []runtime.Record
						lastWM := int64(0)
						for i, e := range events {
							if i == len(events)/2 {
								got = append(got, h.emitted()...)
								gotLate = append(gotLate, h.lateRecords()...)
								r := snapshotRestore(t, h.harness)
								h, j = newWindowJoinHarness(t, backend, t.TempDir(), r, p)
								h.wm(lastWM)
							}
							if e.wm > 0 {
								h.wm(e.wm)
								lastWM = e.wm
								continue
							}
							h.send(e.side, runtime.Record{Key: []byte(e.key), Value: []byte(e.value()), Timestamp: time.UnixMilli(e.ts)})
						}
						if j.BufferedRows() != held {
							t.Errorf("%d rows held before the last watermark, want %d", j.BufferedRows(), held)
						}
						h.wm(maxTS + wk.size)
						got = append(got, h.emitted()...)
						gotLate = append(gotLate, h.lateRecords()...)
						if g := joinOutputs(got); !slices.Equal(g, want) {
							t.Errorf("%d outputs, want %d; first differences:\n%s", len(g), len(want), joinDiff(g, want))
						}
						if g := values(gotLate); !slices.Equal(slices.Sorted(slices.Values(g)), late) {
							t.Errorf("late output %d records, want %d", len(g), len(late))
						}
						if n := h.entries(); n != 0 || j.BufferedRows() != 0 {
							t.Errorf("%d state entries, %d rows counted after every window ended, want none", n, j.BufferedRows())
						}
						h.finish()
					})
				}
			}
		}
	}
}

// storedRows returns the rows h's join holds per side (left, right), each
// as its value quoted and whether it is nil, sorted.
func storedRows(t *testing.T, h *joinHarness) [2][]string {
	t.Helper()
	var rows [2][]string
	for side, name := range []string{WindowJoinLeftRowsState, WindowJoinRightRowsState} {
		err := state.ApplyToAllKeys(h.op.backend, windowRowsState(name), func(_ []byte, s state.MapState[int64, []joinRow]) error {
			for rs, err := range s.Values() {
				if err != nil {
					return err
				}
				for _, r := range rs {
					if isNoValue(r.Value) {
						rows[side] = append(rows[side], `"" no value`)
						continue
					}
					rows[side] = append(rows[side], fmt.Sprintf("%q nil %v", r.Value, r.Value == nil))
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(rows[side])
	}
	return rows
}

// TestWindowJoinUnreadSideKeepsNoValue: with a select whose raw form
// reads no field of a side (Nexmark q8's reads none of the right side),
// that side's rows are kept with a null value (checked in the state, on
// both backends, after a restore), and the outputs are exact: pairs the
// raw select writes, a pair it gives up on (a number it does not write:
// select is evaluated), and with a select reading neither side the
// unmatched rows of a full outer join. A select that reads a side keeps
// its values.
func TestWindowJoinUnreadSideKeepsNoValue(t *testing.T) {
	start := `"start":"1970-01-01T00:00:00Z"`
	for _, c := range []struct {
		sel      string
		kind     JoinKind
		keep     [2]bool
		wantRows [2][]string
		want     []string
	}{
		{`{"id": left.id, "start": window_start}`, JoinInner, [2]bool{true, false},
			[2][]string{{`"{\"id\":1}" nil false`, `"{\"id\":2.5}" nil false`}, {`"" no value`, `"" no value`, `"" no value`}},
			[]string{`a 9999 {"id":1,` + start + `}`, `c 9999 {"id":2.5,` + start + `}`}},
		{`{"end": window_end, "start": window_start}`, JoinFullOuter, [2]bool{false, false},
			[2][]string{{`"" no value`, `"" no value`}, {`"" no value`, `"" no value`, `"" no value`}},
			[]string{
				`a 9999 {"end":"1970-01-01T00:00:10Z",` + start + `}`,
				`b 9999 {"end":"1970-01-01T00:00:10Z",` + start + `}`,
				`c 9999 {"end":"1970-01-01T00:00:10Z",` + start + `}`,
			}},
	} {
		for _, backend := range backends {
			t.Run(fmt.Sprintf("%s/%s", c.kind, backend), func(t *testing.T) {
				p := WindowJoinParams{Kind: Tumbling, Size: 10 * time.Second, Join: c.kind, Select: compiled(t, c.sel)}
				h, j := newWindowJoinHarness(t, backend, t.TempDir(), nil, p)
				h.send(0, runtime.Record{Key: []byte("a"), Value: []byte(`{"id":1}`), Timestamp: time.UnixMilli(1_000)})
				if j.keepValue != c.keep {
					t.Fatalf("keepValue %v, want %v", j.keepValue, c.keep)
				}
				h.send(1, runtime.Record{Key: []byte("a"), Value: []byte(`{"seller":"a","extra":"xxxxxxxx"}`), Timestamp: time.UnixMilli(2_000)})
				h.send(1, runtime.Record{Key: []byte("b"), Value: []byte(`{"seller":"b"}`), Timestamp: time.UnixMilli(3_000)})
				h.send(0, runtime.Record{Key: []byte("c"), Value: []byte(`{"id":2.5}`), Timestamp: time.UnixMilli(4_000)})
				h.send(1, runtime.Record{Key: []byte("c"), Value: []byte(`{"seller":"c"}`), Timestamp: time.UnixMilli(5_000)})
				r := snapshotRestore(t, h.harness)
				h, _ = newWindowJoinHarness(t, backend, t.TempDir(), r, p)
				if rows := storedRows(t, h); !slices.Equal(rows[0], c.wantRows[0]) || !slices.Equal(rows[1], c.wantRows[1]) {
					t.Errorf("restored rows %q, want %q", rows, c.wantRows)
				}
				h.wm(20_000)
				if got := joinOutputs(h.emitted()); !slices.Equal(got, c.want) {
					t.Errorf("outputs %q, want %q", got, c.want)
				}
				h.finish()
			})
		}
	}
	// Reading the right side (even only testing it for null, or whole)
	// keeps its values; no raw form keeps both; no select keeps both; an
	// output that never writes raw (the tests' select always evaluated)
	// keeps both.
	for _, src := range []string{`{"id": left.id, "s": right == null ? null : right.seller}`, `{"id": left.id, "r": right}`, `[left.id]`, ``} {
		p := WindowJoinParams{Kind: Tumbling, Size: 10 * time.Second}
		if src != "" {
			p.Select = compiled(t, src)
		}
		h, j := newWindowJoinHarness(t, state.KindHashmap, t.TempDir(), nil, p)
		h.send(1, runtime.Record{Key: []byte("a"), Value: []byte(`{"id":1}`), Timestamp: time.UnixMilli(1_000)})
		if j.keepValue != [2]bool{true, true} {
			t.Errorf("select %s: keepValue %v, want both", src, j.keepValue)
		}
		h.finish()
	}
	h, j := newWindowJoinHarness(t, state.KindHashmap, t.TempDir(), nil, WindowJoinParams{Kind: Tumbling, Size: 10 * time.Second, Select: compiled(t, `{"id": left.id}`)})
	j.output.noRaw = true
	h.send(1, runtime.Record{Key: []byte("a"), Value: []byte(`{"id":1}`), Timestamp: time.UnixMilli(1_000)})
	if j.keepValue != [2]bool{true, true} {
		t.Errorf("select always evaluated: keepValue %v, want both", j.keepValue)
	}
	h.finish()
}

// TestWindowJoinDedupRestoredRows: rows buffered by a join without dedup
// (two right records of a key and window) restored into one with dedup
// right: the window joins its first right row only.
func TestWindowJoinDedupRestoredRows(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			p := WindowJoinParams{Kind: Tumbling, Size: 10 * time.Second}
			h, _ := newWindowJoinHarness(t, backend, t.TempDir(), nil, p)
			h.send(1, runtime.Record{Key: []byte("a"), Value: []byte(`{"id":10}`), Timestamp: time.UnixMilli(1_000)})
			h.send(1, runtime.Record{Key: []byte("a"), Value: []byte(`{"id":11}`), Timestamp: time.UnixMilli(2_000)})
			h.send(0, runtime.Record{Key: []byte("a"), Value: []byte(`{"id":1}`), Timestamp: time.UnixMilli(3_000)})
			r := snapshotRestore(t, h.harness)
			p.Dedup = WindowJoinDedupRight
			h, j := newWindowJoinHarness(t, backend, t.TempDir(), r, p)
			if j.BufferedRows() != 3 {
				t.Errorf("%d rows restored, want 3", j.BufferedRows())
			}
			h.send(1, runtime.Record{Key: []byte("a"), Value: []byte(`{"id":12}`), Timestamp: time.UnixMilli(4_000)})
			h.wm(20_000)
			got := joinOutputs(h.emitted())
			want := []string{`a 9999 {"left":{"id":1},"right":{"id":10},"window_start":"1970-01-01T00:00:00Z","window_end":"1970-01-01T00:00:10Z"}`}
			if !slices.Equal(got, want) {
				t.Errorf("outputs %q, want %q", got, want)
			}
			if n := h.entries(); n != 0 || j.BufferedRows() != 0 {
				t.Errorf("%d state entries, %d rows counted after the window ended, want none", n, j.BufferedRows())
			}
			h.finish()
		})
	}
}

// TestWindowJoinDedupParam: dedup decodes none, left, right and both and
// refuses anything else.
func TestWindowJoinDedupParam(t *testing.T) {
	for _, c := range []struct {
		in          string
		left, right bool
	}{{"none", false, false}, {"left", true, false}, {"right", false, true}, {"both", true, true}} {
		var d WindowJoinDedup
		if err := d.UnmarshalText([]byte(c.in)); err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		if d.keepsFirst(0) != c.left || d.keepsFirst(1) != c.right {
			t.Errorf("%s: keeps first %v %v, want %v %v", c.in, d.keepsFirst(0), d.keepsFirst(1), c.left, c.right)
		}
	}
	var d WindowJoinDedup
	if err := d.UnmarshalText([]byte("first")); err == nil || !strings.Contains(err.Error(), "first") {
		t.Errorf("dedup first: %v, want an error naming it", err)
	}
}

// TestWindowJoinRestoredRowsWithoutValues: rows a join buffered without
// their values (its select read no right field) restored into a job whose
// select reads the right side fail the job at their window's end, naming
// the key and window, instead of joining as null; restored with the same
// select they join exactly; a record whose value is null is still a null
// row (flag 4), not one without a value. Without the no-value flag the
// changed select wrote "seller":null for every right row.
func TestWindowJoinRestoredRowsWithoutValues(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			p := WindowJoinParams{Kind: Tumbling, Size: 10 * time.Second, Select: compiled(t, `{"id": left.id, "start": window_start}`)}
			h, j := newWindowJoinHarness(t, backend, t.TempDir(), nil, p)
			h.send(0, runtime.Record{Key: []byte("a"), Value: []byte(`{"id":1}`), Timestamp: time.UnixMilli(1_000)})
			h.send(1, runtime.Record{Key: []byte("a"), Value: []byte(`{"seller":"a"}`), Timestamp: time.UnixMilli(2_000)})
			h.send(0, runtime.Record{Key: []byte("n"), Value: []byte(`{"id":2}`), Timestamp: time.UnixMilli(3_000)})
			h.send(1, runtime.Record{Key: []byte("n"), Value: nil, Timestamp: time.UnixMilli(4_000)})
			if j.keepValue != [2]bool{true, false} {
				t.Fatalf("keepValue %v, want left only", j.keepValue)
			}
			snapDir := t.TempDir()
			handle := snapshotHarnessTo(t, h.harness, snapDir)
			h.finish()

			// The same select: exact.
			r := &Restore{Keyed: []state.RestoreHandle{{Handle: handle, Dir: copyTree(t, snapDir)}}}
			h, _ = newWindowJoinHarness(t, backend, t.TempDir(), r, p)
			if rows := storedRows(t, h); !slices.Equal(rows[1], []string{`"" no value`, `"" no value`}) {
				t.Fatalf("restored right rows %q, want two without values", rows[1])
			}
			h.wm(20_000)
			start := `"start":"1970-01-01T00:00:00Z"`
			want := []string{`a 9999 {"id":1,` + start + `}`, `n 9999 {"id":2,` + start + `}`}
			if got := joinOutputs(h.emitted()); !slices.Equal(got, want) {
				t.Fatalf("outputs %q, want %q", got, want)
			}
			h.finish()

			// A select that reads the right side: refused at the window's end.
			p.Select = compiled(t, `{"id": left.id, "seller": right.seller}`)
			r = &Restore{Keyed: []state.RestoreHandle{{Handle: handle, Dir: copyTree(t, snapDir)}}}
			h, _ = newWindowJoinHarness(t, backend, t.TempDir(), r, p)
			err := h.op.ProcessWatermark(h.ctx, time.UnixMilli(20_000))
			if !errors.Is(err, errRowsWithoutValues) || !strings.Contains(err.Error(), `the right rows of key "a" and the window from 1970-01-01T00:00:00Z`) {
				t.Fatalf("watermark past the restored window: %v, want the rows-without-values error for key a", err)
			}
			if got := joinOutputs(h.emitted()); len(got) != 0 {
				t.Fatalf("outputs %q before the error, want none", got)
			}
			h.finish()
		})
	}
	// A null value is not a row without a value.
	b, err := windowRowsSerializer{}.Append(nil, []joinRow{{Value: nil}, {Value: noValue}, {Value: []byte(`1`), Text: true}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []byte{4, 0, 8, 0, 2, 1, '1'}; !bytes.Equal(b, want) {
		t.Fatalf("encoded %v, want %v", b, want)
	}
	rows, err := windowRowsSerializer{}.Decode(b)
	if err != nil || len(rows) != 3 || rows[0].Value != nil || !isNoValue(rows[1].Value) || string(rows[2].Value) != "1" || !rows[2].Text {
		t.Fatalf("decoded %+v, %v", rows, err)
	}
	for _, bad := range [][]byte{{12, 0}, {8, 1, 'x'}, {16, 0}} {
		if _, err := (windowRowsSerializer{}).Decode(bad); !errors.Is(err, errJoinRows) {
			t.Errorf("decode %v: %v, want errJoinRows", bad, err)
		}
	}
}
