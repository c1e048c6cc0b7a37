package operators

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// newRegularJoinHarness drives a RegularJoin on a KeyedOperator as a
// KeyedCoProcessFunction, its backend's TTL clock clk.
func newRegularJoinHarness(t *testing.T, kind, dir string, clk state.Clock, restore *Restore, p JoinParams) *joinHarness {
	t.Helper()
	h := &joinHarness{harness: &harness{t: t, mb: runtime.NewMailbox(), ch: runtime.NewChannel(1 << 16), ctx: context.Background()},
		late: runtime.NewChannel(16)}
	out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{h.ch}, runtime.ForwardPartitioner{}))
	h.op = NewKeyedCoProcessOperator(OpenContext{Operator: "join", Parallelism: 1}, clockOpener(kind, dir, clk), restore, NewRegularJoin(p), out)
	h.op.SetMailbox(h.mb)
	if err := h.op.Open(h.ctx); err != nil {
		t.Fatal(err)
	}
	return h
}

// change is a record of key k with value v and kind c at ts.
func change(c runtime.ChangeKind, k, v string, ts int64) runtime.Record {
	return runtime.Record{Key: []byte(k), Value: []byte(v), Timestamp: time.UnixMilli(ts), Change: c}
}

// joinChangeLines renders records as "kind key value" lines.
func joinChangeLines(recs []runtime.Record) string {
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, "%s %s %s\n", r.Change, r.Key, r.Value)
	}
	return b.String()
}

// materialize applies a changelog of +I and -D records to a multiset of
// "key value" rows, failing on any other kind or on a -D of a row not
// there.
func materialize(t *testing.T, view map[string]int, recs []runtime.Record) {
	t.Helper()
	for _, r := range recs {
		row := string(r.Key) + " " + string(r.Value)
		switch r.Change {
		case runtime.ChangeInsert:
			view[row]++
		case runtime.ChangeDelete:
			if view[row] == 0 {
				t.Fatalf("-D of %s, which is not in the view", row)
			}
			view[row]--
			if view[row] == 0 {
				delete(view, row)
			}
		default:
			t.Fatalf("kind %s in the join's output, want only +I and -D", r.Change)
		}
	}
}

// TestRegularJoinChangelog: the exact changelog of a fixed input for every
// join kind: a left row without a partner, the first right row (retracting
// the null-padded left row on an outer join), a second right row, an
// update of the left row (-U then +U: its pairs retracted then re-made),
// the deletes of both right rows (the last one bringing back the
// null-padded left row), and an unmatched right row of another key.
func TestRegularJoinChangelog(t *testing.T) {
	input := []struct {
		side int
		rec  runtime.Record
	}{
		{0, change(runtime.ChangeInsert, "k", `"a"`, 1)},
		{1, change(runtime.ChangeInsert, "k", `"x"`, 2)},
		{1, change(runtime.ChangeInsert, "k", `"y"`, 3)},
		{0, change(runtime.ChangeUpdateBefore, "k", `"a"`, 4)},
		{0, change(runtime.ChangeUpdateAfter, "k", `"b"`, 4)},
		{1, change(runtime.ChangeDelete, "k", `"x"`, 5)},
		{1, change(runtime.ChangeDelete, "k", `"y"`, 6)},
		{1, change(runtime.ChangeInsert, "m", `"z"`, 7)},
	}
	want := map[JoinKind]string{
		JoinInner: `+I k {"left":"a","right":"x"}
+I k {"left":"a","right":"y"}
-D k {"left":"a","right":"x"}
-D k {"left":"a","right":"y"}
+I k {"left":"b","right":"x"}
+I k {"left":"b","right":"y"}
-D k {"left":"b","right":"x"}
-D k {"left":"b","right":"y"}
`,
		JoinLeftOuter: `+I k {"left":"a","right":null}
-D k {"left":"a","right":null}
+I k {"left":"a","right":"x"}
+I k {"left":"a","right":"y"}
-D k {"left":"a","right":"x"}
-D k {"left":"a","right":"y"}
+I k {"left":"b","right":"x"}
+I k {"left":"b","right":"y"}
-D k {"left":"b","right":"x"}
-D k {"left":"b","right":"y"}
+I k {"left":"b","right":null}
`,
		JoinRightOuter: `+I k {"left":"a","right":"x"}
+I k {"left":"a","right":"y"}
-D k {"left":"a","right":"x"}
-D k {"left":"a","right":"y"}
+I k {"left":null,"right":"x"}
+I k {"left":null,"right":"y"}
-D k {"left":null,"right":"x"}
-D k {"left":null,"right":"y"}
+I k {"left":"b","right":"x"}
+I k {"left":"b","right":"y"}
-D k {"left":"b","right":"x"}
-D k {"left":"b","right":"y"}
+I m {"left":null,"right":"z"}
`,
		JoinFullOuter: `+I k {"left":"a","right":null}
-D k {"left":"a","right":null}
+I k {"left":"a","right":"x"}
+I k {"left":"a","right":"y"}
-D k {"left":"a","right":"x"}
-D k {"left":"a","right":"y"}
+I k {"left":null,"right":"x"}
+I k {"left":null,"right":"y"}
-D k {"left":null,"right":"x"}
-D k {"left":null,"right":"y"}
+I k {"left":"b","right":"x"}
+I k {"left":"b","right":"y"}
-D k {"left":"b","right":"x"}
-D k {"left":"b","right":"y"}
+I k {"left":"b","right":null}
+I m {"left":null,"right":"z"}
`,
	}
	for _, kind := range backends {
		for _, jk := range []JoinKind{JoinInner, JoinLeftOuter, JoinRightOuter, JoinFullOuter} {
			t.Run(kind+"/"+string(jk), func(t *testing.T) {
				h := newRegularJoinHarness(t, kind, t.TempDir(), newStepClock(), nil, JoinParams{Join: jk})
				for _, in := range input {
					h.send(in.side, in.rec)
				}
				got := h.emitted()
				if s := joinChangeLines(got); s != want[jk] {
					t.Fatalf("changelog:\n%s\nwant:\n%s", s, want[jk])
				}
				for _, r := range got {
					if string(r.Key) == "k" && r.Timestamp.UnixMilli() > 6 {
						t.Fatalf("output %s at %d, after the last input of k", r.Value, r.Timestamp.UnixMilli())
					}
				}
				h.finish()
			})
		}
	}
}

// joinModel is the reference: per key and side, the multiset of rows.
type joinModel map[string]*[2]map[string]int

// view returns the expected join of the model's rows, as "key value"
// rows with their multiplicity (values in the default output shape).
func (m joinModel) view(jk JoinKind) map[string]int {
	out := map[string]int{}
	for k, sides := range m {
		for l, nl := range sides[0] {
			for r, nr := range sides[1] {
				out[fmt.Sprintf(`%s {"left":%s,"right":%s}`, k, l, r)] += nl * nr
			}
			if len(sides[1]) == 0 && jk.outer(0) {
				out[fmt.Sprintf(`%s {"left":%s,"right":null}`, k, l)] += nl
			}
		}
		if len(sides[0]) == 0 && jk.outer(1) {
			for r, nr := range sides[1] {
				out[fmt.Sprintf(`%s {"left":null,"right":%s}`, k, r)] += nr
			}
		}
	}
	return out
}

// TestRegularJoinModel: random inserts, updates (-U/+U) and deletes on both
// sides of three keys, with duplicate rows, for every join kind on both
// backends, with a snapshot and restore half-way: the view materialized
// from the join's changelog (+I adds a row, -D removes one that must be
// there) equals the join of the model's final rows, after every step.
// Once every row is deleted, the state is empty and so is the view.
func TestRegularJoinModel(t *testing.T) {
	for _, kind := range backends {
		for _, jk := range []JoinKind{JoinInner, JoinLeftOuter, JoinRightOuter, JoinFullOuter} {
			t.Run(kind+"/"+string(jk), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(23, uint64(len(jk))))
				p := JoinParams{Join: jk}
				clk := newStepClock()
				h := newRegularJoinHarness(t, kind, t.TempDir(), clk, nil, p)
				model := joinModel{}
				view := map[string]int{}
				keys := []string{"k1", "k2", "k3"}
				ts := int64(0)
				step := func(side int, c runtime.ChangeKind, k, v string) {
					ts++
					sides := model[k]
					if sides == nil {
						sides = &[2]map[string]int{{}, {}}
						model[k] = sides
					}
					if c == runtime.ChangeInsert || c == runtime.ChangeUpdateAfter {
						sides[side][v]++
					} else {
						sides[side][v]--
						if sides[side][v] == 0 {
							delete(sides[side], v)
						}
					}
					h.send(side, change(c, k, v, ts))
				}
				const steps = 400
				for i := range steps {
					if i == steps/2 {
						materialize(t, view, h.emitted())
						r := snapshotRestore(t, h.harness)
						h = newRegularJoinHarness(t, kind, t.TempDir(), clk, r, p)
					}
					side, k := rng.IntN(2), keys[rng.IntN(len(keys))]
					rows := slices.Sorted(maps.Keys(model.side(k, side)))
					v := fmt.Sprintf(`{"v":%d}`, rng.IntN(4))
					switch op := rng.IntN(10); {
					case len(rows) == 0 || op < 5:
						step(side, runtime.ChangeInsert, k, v)
					case op < 8:
						step(side, runtime.ChangeUpdateBefore, k, rows[rng.IntN(len(rows))])
						step(side, runtime.ChangeUpdateAfter, k, v)
					default:
						step(side, runtime.ChangeDelete, k, rows[rng.IntN(len(rows))])
					}
					materialize(t, view, h.emitted())
					if want := model.view(jk); !maps.Equal(view, want) {
						t.Fatalf("step %d: view\n%v\nwant\n%v", i, view, want)
					}
				}
				// Delete everything: the view and the state empty out.
				for _, k := range keys {
					for side := range 2 {
						for v, n := range model.side(k, side) {
							for range n {
								step(side, runtime.ChangeDelete, k, v)
							}
						}
					}
				}
				materialize(t, view, h.emitted())
				if len(view) != 0 {
					t.Fatalf("view %v once every row is deleted, want empty", view)
				}
				if n := h.entries(); n != 0 {
					t.Fatalf("%d state entries once every row is deleted, want 0", n)
				}
				h.finish()
			})
		}
	}
}

// side returns the model's rows of key k's side (nil when none).
func (m joinModel) side(k string, side int) map[string]int {
	if s := m[k]; s != nil {
		return maps.Clone(s[side])
	}
	return nil
}

// TestRegularJoinStateTTL: with state_ttl 10s (processing time, the
// backends' TTL clock) a row unwritten for longer no longer joins: a right
// row arriving 11s after the left one finds nothing (on a left join, the
// left row's null-padded output stays, as the row expired before the
// match); a row written again (its match count, on an outer side) lives
// on; once every left row has expired a right row joins nothing.
func TestRegularJoinStateTTL(t *testing.T) {
	for _, kind := range backends {
		for _, jk := range []JoinKind{JoinInner, JoinLeftOuter} {
			t.Run(kind+"/"+string(jk), func(t *testing.T) {
				clk := newStepClock()
				p := JoinParams{Join: jk, StateTTL: StateTTLParams{TTL: 10 * time.Second}, Select: compiled(t, `{"l": left, "r": right}`)}
				h := newRegularJoinHarness(t, kind, t.TempDir(), clk, nil, p)
				h.send(0, change(runtime.ChangeInsert, "a", `1`, 1))
				h.send(0, change(runtime.ChangeInsert, "b", `2`, 1))
				clk.advance(6 * time.Second)
				h.send(0, change(runtime.ChangeInsert, "b", `3`, 2)) // b's second row, written at 6s
				clk.advance(5 * time.Second)                         // a's row and b's first 11s old: expired
				h.send(1, change(runtime.ChangeInsert, "a", `10`, 3))
				h.send(1, change(runtime.ChangeInsert, "b", `20`, 4))
				want := ""
				if jk == JoinLeftOuter {
					want = `+I a {"l":1,"r":null}
+I b {"l":2,"r":null}
+I b {"l":3,"r":null}
-D b {"l":3,"r":null}
+I b {"l":3,"r":20}
`
				} else {
					want = "+I b {\"l\":3,\"r\":20}\n"
				}
				if got := joinChangeLines(h.emitted()); got != want {
					t.Fatalf("changelog:\n%s\nwant:\n%s", got, want)
				}
				clk.advance(11 * time.Second)
				h.send(1, change(runtime.ChangeInsert, "b", `30`, 5)) // b's rows all expired
				if got := joinChangeLines(h.emitted()); got != "" {
					t.Fatalf("after every left row expired: %s, want nothing", got)
				}
				h.finish()
			})
		}
	}
}

// TestRegularJoinEventTimeTTL: with state_ttl {ttl: 10s, time: event} a
// stored row expires 10s of event time (the later of the record
// timestamps and the watermark) after it was written, whatever the wall
// clock does (the harness's clock never moves): a's left row written at
// 1s still joins a right row at 10s, b's left row written at 1s no longer
// joins once the watermark is at 12s, and the left row of b written at 8s
// still does; with a left join b's expired row's null-padded output is
// not retracted (it is gone from state, as in Flink). Both backends.
func TestRegularJoinEventTimeTTL(t *testing.T) {
	for _, kind := range backends {
		for _, jk := range []JoinKind{JoinInner, JoinLeftOuter} {
			t.Run(kind+"/"+string(jk), func(t *testing.T) {
				clk := newStepClock()
				p := JoinParams{Join: jk, StateTTL: StateTTLParams{TTL: 10 * time.Second, Time: TTLEventTime}, Select: compiled(t, `{"l": left, "r": right}`)}
				h := newRegularJoinHarness(t, kind, t.TempDir(), clk, nil, p)
				h.send(0, change(runtime.ChangeInsert, "a", `1`, 1_000))
				h.send(0, change(runtime.ChangeInsert, "b", `2`, 1_000))
				h.send(1, change(runtime.ChangeInsert, "a", `10`, 10_000)) // a's row: 1 + 10 > 10, alive
				h.send(0, change(runtime.ChangeInsert, "b", `3`, 8_000))
				h.wm(12_000) // b's row 2 (written at 1s) expired, row 3 (8s) not
				h.send(1, change(runtime.ChangeInsert, "b", `20`, 12_500))
				want := "+I a {\"l\":1,\"r\":10}\n+I b {\"l\":3,\"r\":20}\n"
				if jk == JoinLeftOuter {
					want = `+I a {"l":1,"r":null}
+I b {"l":2,"r":null}
-D a {"l":1,"r":null}
+I a {"l":1,"r":10}
+I b {"l":3,"r":null}
-D b {"l":3,"r":null}
+I b {"l":3,"r":20}
`
				}
				if got := joinChangeLines(h.emitted()); got != want {
					t.Fatalf("changelog:\n%s\nwant:\n%s", got, want)
				}
				h.finish()
			})
		}
	}
}

// TestRegularJoinUpsert: with upsert: [right] the right side is a table
// (upserts +U without -U, tombstones -D without a value): an upsert
// replaces the key's row, retracting its pairs first (on a left join the
// null-padded row comes back in between, as in Flink), and a tombstone
// deletes it, bringing back the null-padded left rows on a left join; a
// tombstone of an absent key emits nothing. Both backends, restored
// half-way.
func TestRegularJoinUpsert(t *testing.T) {
	want := `+I k {"left":1,"right":null}
-D k {"left":1,"right":null}
+I k {"left":1,"right":"x"}
-D k {"left":1,"right":"x"}
+I k {"left":1,"right":null}
-D k {"left":1,"right":null}
+I k {"left":1,"right":"y"}
+I k {"left":2,"right":"y"}
-D k {"left":1,"right":"y"}
-D k {"left":2,"right":"y"}
+I k {"left":1,"right":null}
+I k {"left":2,"right":null}
`
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			p := JoinParams{Join: JoinLeftOuter, Upsert: []string{JoinRight}}
			clk := newStepClock()
			h := newRegularJoinHarness(t, kind, t.TempDir(), clk, nil, p)
			h.send(0, change(runtime.ChangeInsert, "k", `1`, 1))
			h.send(1, change(runtime.ChangeUpdateAfter, "k", `"x"`, 2))
			h.send(1, change(runtime.ChangeUpdateAfter, "k", `"y"`, 3))
			got := h.emitted()
			h = newRegularJoinHarness(t, kind, t.TempDir(), clk, snapshotRestore(t, h.harness), p)
			h.send(0, change(runtime.ChangeInsert, "k", `2`, 4))
			h.send(1, runtime.Record{Key: []byte("k"), Change: runtime.ChangeDelete})
			h.send(1, runtime.Record{Key: []byte("other"), Change: runtime.ChangeDelete})
			got = append(got, h.emitted()...)
			if s := joinChangeLines(got); s != want {
				t.Fatalf("changelog:\n%s\nwant:\n%s", s, want)
			}
			if n := h.entries(); n != 3 {
				t.Fatalf("%d state entries, want 3 (the left rows and the key's sizes)", n)
			}
			h.finish()
		})
	}
}

// TestJoinParamsCheck: upsert names only the roles, each once.
func TestJoinParamsCheck(t *testing.T) {
	p := JoinParams{Upsert: []string{"right", "middle", "right"}, StateTTL: StateTTLParams{UpdateType: TTLOnReadAndWrite}}
	var got []string
	p.CheckParams(func(field, msg string) { got = append(got, field+": "+msg) })
	want := []string{
		"state_ttl.ttl: required when state_ttl is set (a duration such as 30m)",
		`upsert[1]: unknown role "middle"; want left or right`,
		`upsert[2]: role "right" listed twice`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("reports %q, want %q", got, want)
	}
}

// TestRegularJoinSelectFailureAllOrNothing: a record whose select fails
// for any of its outputs emits none of them and leaves rows, match counts
// and sizes as they were, both backends:
//   - an upsert of the right side whose new pair fails keeps the row it
//     would have replaced (its retraction is not emitted), so deleting the
//     left row retracts the old pair, and deleting the right row empties
//     the state;
//   - a full outer join where a right row's pair with one of two left rows
//     fails: neither left row's null-padded output is retracted nor their
//     match counts raised (on main they were, and the right row was not
//     stored: deleting a left row then retracted its null-padded row a
//     second time).
func TestRegularJoinSelectFailureAllOrNothing(t *testing.T) {
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			run := func(p JoinParams, steps func(send func(side int, rec runtime.Record)), wantBad int, want string) *joinHarness {
				t.Helper()
				h := newRegularJoinHarness(t, kind, t.TempDir(), newStepClock(), nil, p)
				bad := &recordErrors{}
				h.op.SetBadRecordHandlers([]runtime.BadRecordHandler{bad})
				steps(func(side int, rec runtime.Record) {
					t.Helper()
					var re *runtime.RecordError
					switch err := h.op.ProcessRecord(h.ctx, side, rec); {
					case errors.As(err, &re):
						_ = bad.HandleBadRecord(h.ctx, rec, re)
					case err != nil:
						t.Fatal(err)
					}
				})
				if len(bad.errs) != wantBad {
					t.Fatalf("%d bad records, want %d", len(bad.errs), wantBad)
				}
				if s := joinChangeLines(h.emitted()); s != want {
					t.Fatalf("changelog:\n%s\nwant:\n%s", s, want)
				}
				return h
			}

			up := JoinParams{Join: JoinInner, Upsert: []string{JoinRight}, Select: compiled(t, `{"l": left, "r": right.v}`)}
			h := run(up, func(send func(int, runtime.Record)) {
				send(0, change(runtime.ChangeInsert, "k", `1`, 1))
				send(1, change(runtime.ChangeUpdateAfter, "k", `{"v":"x"}`, 2))
				send(1, change(runtime.ChangeUpdateAfter, "k", `"no fields"`, 3)) // select fails on right.v
				send(0, change(runtime.ChangeDelete, "k", `1`, 4))
			}, 1, "+I k {\"l\":1,\"r\":\"x\"}\n-D k {\"l\":1,\"r\":\"x\"}\n")
			if got, want := regularJoinRows(t, h), "k right \"\\x00{\\\"v\\\":\\\"x\\\"}\" count=1 assoc=1\nk sizes=0,1\n"; got != want {
				t.Fatalf("rows and sizes\n%s\nwant (the right row kept)\n%s", got, want)
			}
			if n := h.entries(); n != 1 {
				t.Fatalf("%d state entries, want 1 (the sizes, the right row inline in them)", n)
			}
			if err := h.op.ProcessRecord(h.ctx, 1, change(runtime.ChangeDelete, "k", ``, 5)); err != nil {
				t.Fatal(err)
			}
			if n := h.entries(); n != 0 {
				t.Fatalf("%d state entries left, want 0", n)
			}
			h.finish()

			full := JoinParams{Join: JoinFullOuter, Select: compiled(t, `{"l": left == null ? null : left.v, "s": left == null || right == null ? null : left.v + right.w}`)}
			h = run(full, func(send func(int, runtime.Record)) {
				send(0, change(runtime.ChangeInsert, "k", `{"v":1}`, 1))
				send(0, change(runtime.ChangeInsert, "k", `{"v":"s"}`, 2))
				send(1, change(runtime.ChangeInsert, "k", `{"w":2}`, 3)) // 1 + 2, then "s" + 2 fails
				send(0, change(runtime.ChangeDelete, "k", `{"v":"s"}`, 4))
				send(1, change(runtime.ChangeInsert, "k", `{"w":5}`, 5))
			}, 1, "+I k {\"l\":1,\"s\":null}\n"+
				"+I k {\"l\":\"s\",\"s\":null}\n"+
				"-D k {\"l\":\"s\",\"s\":null}\n"+
				"-D k {\"l\":1,\"s\":null}\n"+
				"+I k {\"l\":1,\"s\":6}\n")
			if got, want := regularJoinRows(t, h), "k left \"\\x00{\\\"v\\\":1}\" count=1 assoc=1\nk right \"\\x00{\\\"w\\\":5}\" count=1 assoc=1\nk sizes=1,1\n"; got != want {
				t.Fatalf("rows and sizes\n%s\nwant (one row a side)\n%s", got, want)
			}
			// The left side held two rows, so its rows moved to its MapState
			// (and stay there with one); the right row is inline.
			if n := h.entries(); n != 2 {
				t.Fatalf("%d state entries, want 2 (the sizes with the right row, the left row)", n)
			}
			h.finish()
		})
	}
}
