package operators

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// listsOf builds lists from a map through pairEdit.
func listsOf(t testing.TB, m map[string][]string) ShapePairLists {
	t.Helper()
	var e pairEdit
	for _, rule := range slices.Sorted(maps.Keys(m)) {
		var items []json.RawMessage
		for _, it := range m[rule] {
			c, err := canonicalItem(json.RawMessage(it))
			if err != nil {
				t.Fatal(err)
			}
			items = append(items, c)
		}
		e.set(rule, items)
	}
	l, _ := e.done()
	return l
}

// asMap returns l as rule -> items.
func asMap(l ShapePairLists) map[string][]string {
	out := map[string][]string{}
	for _, r := range l.Rules() {
		for _, it := range l.Items(r) {
			out[r] = append(out[r], string(it))
		}
	}
	return out
}

// TestShapePairListsSerializerBytes: the serializer writes the bytes
// json.Marshal writes for the map of the lists (keys sorted, items
// compacted and HTML-escaped, empty lists left out), reads them back, and
// reads what JSONSerializer of that map wrote (the last of duplicate keys
// winning, null as no items).
func TestShapePairListsSerializerBytes(t *testing.T) {
	m := map[string][]string{
		"R2":         {`{"id":2,"shape":"SQUARE"}`, `{ "id" : 3 }`},
		"R1":         {`{"a":"<&>"}`},
		"r\"q\u00e9": {`[1, 2]`, `"x\u2028"`},
		"empty":      nil,
	}
	l := listsOf(t, m)
	got, err := ShapePairListsSerializer{}.Append(nil, l)
	if err != nil {
		t.Fatal(err)
	}
	ref := map[string][]json.RawMessage{}
	for k, v := range m {
		for _, it := range v {
			ref[k] = append(ref[k], json.RawMessage(it))
		}
	}
	delete(ref, "empty")
	want, _ := json.Marshal(ref)
	if !bytes.Equal(got, want) {
		t.Fatalf("Append = %s\nwant     %s", got, want)
	}
	back, err := ShapePairListsSerializer{}.Decode(got)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := ShapePairListsSerializer{}.Append(nil, back)
	if !bytes.Equal(again, want) || !slices.Equal(back.Rules(), []string{"R1", "R2", "r\"q\u00e9"}) {
		t.Fatalf("Decode(Append) = %v, appends %s", back.Rules(), again)
	}
	for in, wantMap := range map[string]map[string][]string{
		`null`:                        {},
		`{}`:                          {},
		`{"b":[1],"a":[ {"x" : 1} ]}`: {"a": {`{"x":1}`}, "b": {`1`}},
		`{"a":[1],"a":[2,3]}`:         {"a": {`2`, `3`}},
		`{"a":null,"b":[]}`:           {},
	} {
		l, err := ShapePairListsSerializer{}.Decode([]byte(in))
		if err != nil || !maps.EqualFunc(asMap(l), wantMap, slices.Equal) {
			t.Errorf("Decode(%s) = %v %v, want %v", in, asMap(l), err, wantMap)
		}
	}
	for _, in := range []string{``, `[1]`, `{"a":1}`, `{"a":[1}`, `"s"`} {
		if _, err := (ShapePairListsSerializer{}).Decode([]byte(in)); err == nil {
			t.Errorf("Decode(%q) accepted", in)
		}
	}
	if _, err := canonicalItem(json.RawMessage(`{"a":`)); err == nil {
		t.Fatal("canonicalItem accepted invalid JSON")
	}
}

// FuzzShapePairListsSerializer: for any object of arrays encoding/json
// decodes into map[string][]json.RawMessage, Decode accepts it, holds the
// same rules and items (as json.Marshal writes them), and Append writes
// exactly json.Marshal of the decoded map; what encoding/json refuses,
// Decode refuses.
func FuzzShapePairListsSerializer(f *testing.F) {
	for _, s := range []string{`{"R1":[{"id":1}],"R0":[1,"a",null]}`, `null`, `{"a":[],"b":null}`, `{"<":["\u2028"]}`, `{"a":[1],"a":[2]}`, `[]`, `{"a":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var ref map[string][]json.RawMessage
		refErr := json.Unmarshal(b, &ref)
		l, err := ShapePairListsSerializer{}.Decode(b)
		if (refErr == nil) != (err == nil) {
			t.Fatalf("Decode(%q) error %v, encoding/json %v", b, err, refErr)
		}
		if err != nil {
			return
		}
		for k, v := range ref {
			if len(v) == 0 {
				delete(ref, k)
			}
		}
		want, err := json.Marshal(ref)
		if err != nil {
			t.Fatal(err)
		}
		if len(ref) == 0 {
			want = []byte(`{}`)
		}
		if got, want := (ShapePairListsSerializer{}).Size(l), walkedSize(l); got != want {
			t.Fatalf("Size(Decode(%q)) = %d, counting gives %d", b, got, want)
		}
		got, err := ShapePairListsSerializer{}.Append(nil, l)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("Append(Decode(%q)) = %s %v, want %s", b, got, err, want)
		}
	})
}

// TestShapePairMatcherModel: on both backends (Pebble with a write cache
// so small it evicts all the time, and with the default one, where the
// lists the matcher changes in place stay decoded), random rules (names out of order,
// First == Second, updates and deletions) and random items give exactly
// the matches of a model of the matcher's rules, in order, through a
// checkpoint and a restore at another parallelism every 1,500 records.
func TestShapePairMatcherModel(t *testing.T) {
	shapes := []string{"A", "B", "C", "D"}
	colors := []string{"red", "blue", "green", "black", "white", "grey", "pink"}
	for _, kind := range []string{state.KindHashmap, state.KindPebble, pebbleCached} {
		t.Run(kind, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, 8))
			type rule struct{ first, second string }
			rules := map[string]rule{}
			stored := map[string][]int{} // colour/rule -> stored item ids
			root := t.TempDir()
			p := 1
			runs := []*matcherRun{newSmallCacheRun(t, kind, filepath.Join(root, "p1-0"), 1, 0, nil)}
			for step := 1; step <= 6000; step++ {
				switch r := rng.IntN(100); {
				case r < 3:
					name := fmt.Sprintf("R%d", 9-rng.IntN(8))
					nr := rule{shapes[rng.IntN(4)], shapes[rng.IntN(4)]}
					rules[name] = nr
					for _, m := range runs {
						m.rule(name, nr.first, nr.second)
					}
				case r < 4:
					name := fmt.Sprintf("R%d", 9-rng.IntN(8))
					if _, ok := rules[name]; ok {
						delete(rules, name)
						for k := range stored {
							if k[len(k)-len(name)-1:] == "/"+name {
								delete(stored, k)
							}
						}
					}
					for _, m := range runs {
						m.deleteRule(name)
					}
				default:
					c, shape := colors[rng.IntN(len(colors))], shapes[rng.IntN(4)]
					var want []string
					for _, name := range slices.Sorted(maps.Keys(rules)) {
						r, k := rules[name], c+"/"+name
						if shape == r.second {
							for _, id := range stored[k] {
								want = append(want, fmt.Sprintf("%s %s %d,%d", name, c, id, step))
							}
							delete(stored, k)
						}
						if shape == r.first {
							stored[k] = append(stored[k], step)
						}
					}
					m := runs[keygroup.SubtaskForKey([]byte(c), ckMaxP, p)]
					m.item(step, c, shape)
					if got := m.matches(); !slices.Equal(got, want) {
						t.Fatalf("step %d: %s %s matched %q, want %q", step, c, shape, got, want)
					}
					m.stored(c) // checks the lists' Size, kept by the edits
				}
				if step%1500 == 0 {
					newP := 1 + (p % 3)
					runs = rescaleRuns(t, kind, root, step, runs, newP)
					p = newP
					for _, c := range colors {
						m := runs[keygroup.SubtaskForKey([]byte(c), ckMaxP, p)]
						var want []string
						for _, name := range slices.Sorted(maps.Keys(rules)) {
							if len(stored[c+"/"+name]) > 0 {
								want = append(want, name)
							}
						}
						if got := m.stored(c); !slices.Equal(got, want) {
							t.Fatalf("after the restore at %d: %s has lists of %q, want %q", p, c, got, want)
						}
					}
				}
			}
		})
	}
}

// pebbleCached is the kind of newSmallCacheRun for Pebble with the default
// write cache (16 MiB: the test's state never leaves it but for snapshots).
const pebbleCached = "pebble-cached"

// smallCacheConfig is the backend of newSmallCacheRun's kind for key
// groups kgs in dir.
func smallCacheConfig(kind, dir string, kgs keygroup.Range) state.BackendConfig {
	cfg := state.BackendConfig{Kind: kind, MaxParallelism: ckMaxP, KeyGroupRange: kgs}
	switch kind {
	case state.KindPebble:
		cfg.Dir, cfg.WriteCacheBytes = dir, 4<<10
	case pebbleCached:
		cfg.Kind, cfg.Dir = state.KindPebble, dir
	}
	return cfg
}

// newSmallCacheRun is newMatcherRun with a 4 KiB write cache on Pebble
// (kind pebbleCached: Pebble with the default cache).
func newSmallCacheRun(t *testing.T, kind, dir string, p, i int, restore *Restore) *matcherRun {
	t.Helper()
	m := &matcherRun{t: t, fn: &ShapePairMatcher{}, ch: runtime.NewChannel(256)}
	cfg := smallCacheConfig(kind, dir, keygroup.RangeFor(ckMaxP, p, i))
	open := func(r []state.RestoreHandle) (state.KeyedStateBackend, error) {
		return state.OpenBackendRestored(cfg, r)
	}
	out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{m.ch}, runtime.ForwardPartitioner{}))
	m.op = NewKeyedBroadcastOperator(OpenContext{Operator: "matcher", Subtask: i, Parallelism: p}, open, restore, m.fn, out)
	if err := m.op.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.op.Close() })
	return m
}

// rescaleRuns checkpoints every run as checkpoint id, closes them and
// restores the job at parallelism p.
func rescaleRuns(t *testing.T, kind, root string, id int, runs []*matcherRun, p int) []*matcherRun {
	t.Helper()
	dir := filepath.Join(root, fmt.Sprint("chk-", id))
	restores := restoresFor(t, snapshotRuns(t, runs, dir, id), dir, "", p)
	var out []*matcherRun
	for i := range p {
		out = append(out, newSmallCacheRun(t, kind, filepath.Join(root, fmt.Sprintf("p%d-%d-%d", p, id, i)), p, i, restores[i]))
	}
	return out
}

// TestShapePairMigratesItems: state of the earlier layout (MapState
// "shape-pair-items", one entry per key and rule), as checkpoints taken
// before "shape-pair-lists" hold it, is moved into the per-key layout when
// the matcher opens on it, also restored at another parallelism: the
// stored items pair after the restore exactly as they would have before,
// a rule's items already in the new layout stay after the older ones, and
// nothing is left in the old state.
func TestShapePairMigratesItems(t *testing.T) {
	for _, kind := range []string{state.KindHashmap, state.KindPebble} {
		t.Run(kind, func(t *testing.T) {
			root := t.TempDir()
			colors := []string{"red", "blue", "green", "yellow", "black", "white"}
			var runs []*matcherRun
			for i := range 2 {
				m := newMatcherRun(t, kind, filepath.Join(root, fmt.Sprint("old-", i)), 2, i, nil)
				m.rule("R1", "RECTANGLE", "TRIANGLE")
				m.rule("R2", "CIRCLE", "TRIANGLE")
				runs = append(runs, m)
			}
			for i, c := range colors {
				m := runs[keygroup.SubtaskForKey([]byte(c), ckMaxP, 2)]
				old, err := state.GetMapState(m.fn.backend, ShapePairItemsState)
				if err != nil {
					t.Fatal(err)
				}
				m.fn.backend.SetCurrentKey([]byte(c))
				// As the old layout stored them: one entry per rule.
				if err := old.Put("R1", []json.RawMessage{json.RawMessage(fmt.Sprintf(`{"id":%d,"color":%q,"shape":"RECTANGLE"}`, 10+i, c))}); err != nil {
					t.Fatal(err)
				}
				if i%2 == 0 {
					if err := old.Put("R2", []json.RawMessage{json.RawMessage(fmt.Sprintf(`{"id":%d,"color":%q,"shape":"CIRCLE"}`, 20+i, c))}); err != nil {
						t.Fatal(err)
					}
				}
			}
			// red's R1 also has an item in the new layout, stored after the
			// old ones (a restore of a mixed state keeps arrival order).
			runs[keygroup.SubtaskForKey([]byte("red"), ckMaxP, 2)].item(30, "red", "RECTANGLE")
			restores := restoresFor(t, snapshotRuns(t, runs, filepath.Join(root, "chk-1"), 1), filepath.Join(root, "chk-1"), "", 3)
			runs = nil
			for i := range 3 {
				runs = append(runs, newMatcherRun(t, kind, filepath.Join(root, fmt.Sprint("new-", i)), 3, i, restores[i]))
			}
			for _, m := range runs {
				if err := state.ApplyToAllKeys(m.fn.backend, ShapePairItemsState, func(key []byte, _ state.MapState[string, []json.RawMessage]) error {
					return fmt.Errorf("old state left under %s", key)
				}); err != nil {
					t.Fatal(err)
				}
			}
			var got []string
			for i, c := range colors {
				m := runs[keygroup.SubtaskForKey([]byte(c), ckMaxP, 3)]
				want := []string{"R1", "R2"}
				if i%2 == 1 {
					want = []string{"R1"}
				}
				if s := m.stored(c); !slices.Equal(s, want) {
					t.Fatalf("%s restored with lists %q, want %q", c, s, want)
				}
				m.item(100+i, c, "TRIANGLE")
				got = append(got, m.matches()...)
			}
			var want []string
			for i, c := range colors {
				want = append(want, fmt.Sprintf("R1 %s %d,%d", c, 10+i, 100+i))
				if c == "red" {
					want = append(want, fmt.Sprintf("R1 %s 30,%d", c, 100+i))
				}
				if i%2 == 0 {
					want = append(want, fmt.Sprintf("R2 %s %d,%d", c, 20+i, 100+i))
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("matches after the restore = %q\nwant %q", got, want)
			}
		})
	}
}

// snapshotRuns checkpoints every run into dir as checkpoint id, closes
// them and returns their task states.
func snapshotRuns(t *testing.T, runs []*matcherRun, dir string, id int) []checkpoint.TaskState {
	t.Helper()
	old := make([]checkpoint.TaskState, len(runs))
	for i, m := range runs {
		finish, err := m.op.SnapshotState(context.Background(), &runtime.Barrier{CheckpointID: int64(id), Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		snap, err := finish(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(snap.State, &old[i]); err != nil {
			t.Fatal(err)
		}
		if err := m.op.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return old
}

// TestShapePairListsWith: with, given the positions seek finds, builds the
// same lists, in rule order and with the same Size, as pairEdit's
// one-rule-at-a-time sets, for random lists and random sets of lists to
// add (before, between and after the existing ones).
func TestShapePairListsWith(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	names := []string{"a", "b", "c", "d", "e", "f"}
	for round := 0; round < 2000; round++ {
		m := map[string][]string{}
		for _, n := range names {
			if rng.IntN(2) == 0 {
				for i := 0; i <= rng.IntN(3); i++ {
					m[n] = append(m[n], fmt.Sprintf(`{"n":%d}`, rng.IntN(100)))
				}
			}
		}
		base := listsOf(t, m)
		want := pairEdit{base: base}
		var adds []listAdd
		pos := 0
		for _, n := range names {
			at, found := base.seek(pos, n)
			pos = at
			if found || rng.IntN(2) == 0 {
				continue
			}
			var items []json.RawMessage
			for i := 0; i <= rng.IntN(3); i++ {
				items = append(items, json.RawMessage(fmt.Sprintf(`[%d]`, rng.IntN(100))))
			}
			adds = append(adds, listAdd{at: at, rule: n, items: items})
			want.set(n, items)
		}
		got := base.with(adds)
		w, _ := want.done()
		if !reflect.DeepEqual(asMap(got), asMap(w)) || got.Len() != w.Len() || !slices.IsSortedFunc(got.lists, func(a, b pairList) int { return strings.Compare(a.rule, b.rule) }) {
			t.Fatalf("round %d: with(%v) of %v = %v, want %v", round, adds, asMap(base), asMap(got), asMap(w))
		}
		if gs, ws := (ShapePairListsSerializer{}).Size(got), walkedSize(got); gs != ws {
			t.Fatalf("round %d: Size %d, counting gives %d", round, gs, ws)
		}
	}
}

// TestShapePairListsEmptyLists: a list a match emptied in place stays in
// the value but is neither counted nor serialized, wherever it is.
func TestShapePairListsEmptyLists(t *testing.T) {
	it := json.RawMessage(`{"id":1}`)
	l := ShapePairLists{lists: []pairList{{rule: "a"}, {rule: "b", items: []json.RawMessage{it}}, {rule: "c", items: []json.RawMessage{}}}}
	got, err := ShapePairListsSerializer{}.Append(nil, l)
	if err != nil || string(got) != `{"b":[{"id":1}]}` {
		t.Fatalf("Append = %s %v", got, err)
	}
	if l.Len() != 1 || !slices.Equal(l.Rules(), []string{"b"}) || l.Items("a") != nil || l.Items("c") != nil {
		t.Fatalf("Len %d, Rules %v, Items(a) %v, Items(c) %v", l.Len(), l.Rules(), l.Items("a"), l.Items("c"))
	}
	none := ShapePairLists{lists: []pairList{{rule: "a"}}}
	if got, _ := (ShapePairListsSerializer{}).Append(nil, none); string(got) != `{}` || none.Len() != 0 {
		t.Fatalf("all empty: Append = %s, Len %d", got, none.Len())
	}
}

// refuseNth is a Collector whose n-th Collect (1-based) fails with a
// *runtime.RecordError, as a downstream operator refusing a record does;
// got lists the other outputs as "rule key firstID,secondID".
type refuseNth struct {
	n, calls int
	got      []string
}

func (c *refuseNth) Collect(rec runtime.Record) error {
	if c.calls++; c.calls == c.n {
		return &runtime.RecordError{Reason: runtime.ReasonEvalError, Detail: "refused downstream"}
	}
	var m Match
	var a, b struct{ ID int }
	if json.Unmarshal(rec.Value, &m) != nil || json.Unmarshal(m.First, &a) != nil || json.Unmarshal(m.Second, &b) != nil {
		return fmt.Errorf("bad match %s", rec.Value)
	}
	c.got = append(c.got, fmt.Sprintf("%s %s %d,%d", m.Rule, m.Key, a.ID, b.ID))
	return nil
}

// watermarkTimers is a TimerService at a settable watermark.
type watermarkTimers struct{ wm time.Time }

func (w *watermarkTimers) CurrentWatermark() time.Time                 { return w.wm }
func (w *watermarkTimers) CurrentProcessingTime() time.Time            { return time.Now() }
func (w *watermarkTimers) RegisterEventTimeTimer(time.Time) error      { return nil }
func (w *watermarkTimers) RegisterProcessingTimeTimer(time.Time) error { return nil }
func (w *watermarkTimers) DeleteEventTimeTimer(time.Time) error        { return nil }
func (w *watermarkTimers) DeleteProcessingTimeTimer(time.Time) error   { return nil }

// TestShapePairRefusedOutput: when a match of the second rule an item
// pairs under is refused downstream (a bad-record policy may skip the
// record and go on), the first rule's matches went out and its items are
// gone with their times, the refused rule keeps its item and time, the
// error is the refusal, and later records pair and expire as if the
// refused record's first rule had run alone: no match twice, no item
// without its time.
func TestShapePairRefusedOutput(t *testing.T) {
	for _, kind := range []string{state.KindHashmap, state.KindPebble, pebbleCached} {
		t.Run(kind, func(t *testing.T) {
			b, err := state.OpenBackendRestored(smallCacheConfig(kind, t.TempDir(), keygroup.Range{Start: 0, End: ckMaxP - 1}), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			timers := &watermarkTimers{}
			fn := &ShapePairMatcher{PendingTimeout: 10 * time.Second}
			if err := fn.Open(OpenContext{Operator: "m", Parallelism: 1, Backend: b, Timers: timers}); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for _, r := range []string{`{"name":"a","first":"X","second":"Y"}`, `{"name":"b","first":"Z","second":"Y"}`} {
				if err := fn.ProcessBroadcastElement(ctx, runtime.Record{Value: []byte(r)}, nil); err != nil {
					t.Fatal(err)
				}
			}
			process := func(id int, shape string, ms int64, out Collector) error {
				b.SetCurrentKey([]byte("red"))
				return fn.ProcessElement(ctx, runtime.Record{Key: []byte("red"), Value: fmt.Appendf(nil, `{"id":%d,"shape":%q}`, id, shape), Timestamp: time.UnixMilli(ms)}, out)
			}
			current := func() (map[string][]string, map[string][]int64) {
				b.SetCurrentKey([]byte("red"))
				l, err := listsValue(fn.lists)
				if err != nil {
					t.Fatal(err)
				}
				times := map[string][]int64{}
				for e, err := range fn.times.Entries() {
					if err != nil {
						t.Fatal(err)
					}
					times[e.Key] = e.Value
				}
				return asMap(l), times
			}
			ok := &refuseNth{n: -1}
			for _, r := range []struct {
				id    int
				shape string
			}{{1, "X"}, {2, "Z"}} {
				if err := process(r.id, r.shape, 0, ok); err != nil {
					t.Fatal(err)
				}
			}
			refuse := &refuseNth{n: 2}
			err = process(3, "Y", 1000, refuse)
			var re *runtime.RecordError
			if !errors.As(err, &re) || re.Detail != "refused downstream" || !slices.Equal(refuse.got, []string{"a red 1,3"}) {
				t.Fatalf("refused record: error %v, outputs %q; want the refusal after a red 1,3", err, refuse.got)
			}
			lists, times := current()
			if !reflect.DeepEqual(lists, map[string][]string{"b": {`{"id":2,"shape":"Z"}`}}) || !reflect.DeepEqual(times, map[string][]int64{"b": {0}}) {
				t.Fatalf("after the refused record: lists %v, times %v; want b's item 2 at 0 only", lists, times)
			}
			if err := process(4, "Y", 2000, ok); err != nil || !slices.Equal(ok.got, []string{"b red 2,4"}) {
				t.Fatalf("next Y: %v, outputs %q; want b red 2,4 only", err, ok.got)
			}
			if err := process(5, "X", 0, ok); err != nil {
				t.Fatal(err)
			}
			timers.wm = time.UnixMilli(60_000)
			b.SetCurrentKey([]byte("red"))
			if err := fn.OnTimer(ctx, timers.wm, TimerContext{Key: []byte("red")}, ok); err != nil {
				t.Fatal(err)
			}
			if lists, times := current(); len(lists) != 0 || len(times) != 0 {
				t.Fatalf("after the watermark passed every item's expiry: lists %v, times %v left", lists, times)
			}
		})
	}
}

// TestShapePairManyRulesOneShape: 37 rules on one shape (more than the
// matcher's 16-entry arrays on the stack), First == Second on every third:
// one record adds 37 lists at once, a match empties 24 in place and the
// next record refills them, on every backend.
func TestShapePairManyRulesOneShape(t *testing.T) {
	for _, kind := range []string{state.KindHashmap, state.KindPebble, pebbleCached} {
		t.Run(kind, func(t *testing.T) {
			m := newSmallCacheRun(t, kind, t.TempDir(), 1, 0, nil)
			const n = 37
			for i := n - 1; i >= 0; i-- {
				second := "B"
				if i%3 == 0 {
					second = "A"
				}
				m.rule(fmt.Sprintf("r%02d", i), "A", second)
			}
			// step checks the matches of the last item and the lists left.
			step := func(what string, lists int, want []string) {
				t.Helper()
				if got := m.matches(); !slices.Equal(got, want) {
					t.Fatalf("%s: %q, want %q", what, got, want)
				}
				if s := m.stored("red"); len(s) != lists {
					t.Fatalf("%d lists after %s, want %d", len(s), what, lists)
				}
			}
			pairs := func(every3 bool, ids ...string) []string {
				var out []string
				for i := 0; i < n; i++ {
					if (i%3 == 0) == every3 {
						for _, id := range ids {
							out = append(out, fmt.Sprintf("r%02d red %s", i, id))
						}
					}
				}
				return out
			}
			m.item(1, "red", "A")
			m.item(2, "red", "A")
			step("A, A", n, pairs(true, "1,2"))
			m.item(3, "red", "B")
			step("B", 13, pairs(false, "1,3", "2,3")) // the 13 A->A rules keep their lists
			m.item(4, "red", "A")
			step("A", n, pairs(true, "2,4"))
		})
	}
}

// valueLists is a keyed broadcast function that holds the matcher's
// lists as main's matcher did: a ValueState of ShapePairLists by value,
// with ShapePairListsSerializer.
type valueLists struct {
	lists state.ValueState[ShapePairLists]
}

func (v *valueLists) Open(ctx OpenContext) (err error) {
	v.lists, err = state.GetValueState(ctx.Backend, state.ValueStateDescriptor[ShapePairLists]{Name: ShapePairListsState.Name, Serializer: ShapePairListsSerializer{}})
	return err
}
func (*valueLists) ProcessElement(context.Context, runtime.Record, Collector) error { return nil }
func (*valueLists) ProcessBroadcastElement(context.Context, runtime.Record, Collector) error {
	return nil
}

// TestShapePairRestoresValueLists: lists written through main's descriptor
// (a ValueState of ShapePairLists by value, before the state held them by
// pointer) restore, rescaled from 2 subtasks to 3, into the matcher with
// the same items, which pair as before; and the pointer serializer writes
// ShapePairListsSerializer's bytes and reads them back.
func TestShapePairRestoresValueLists(t *testing.T) {
	for _, kind := range []string{state.KindHashmap, state.KindPebble} {
		t.Run(kind, func(t *testing.T) {
			root := t.TempDir()
			colors := []string{"red", "blue", "green", "yellow"}
			var runs []*matcherRun
			var fns []*valueLists
			for i := range 2 {
				fn := &valueLists{}
				op, ch := newKeyedRun(t, kind, filepath.Join(root, fmt.Sprint("old-", i)), 2, i, nil, fn)
				runs, fns = append(runs, &matcherRun{t: t, op: op, ch: ch}), append(fns, fn)
			}
			for i, c := range colors {
				sub := keygroup.SubtaskForKey([]byte(c), ckMaxP, 2)
				runs[sub].op.backend.SetCurrentKey([]byte(c))
				l := listsOf(t, map[string][]string{"R1": {fmt.Sprintf(`{"id":%d,"shape":"RECTANGLE"}`, 10+i)}})
				if i%2 == 0 {
					l = listsOf(t, map[string][]string{
						"R1": {fmt.Sprintf(`{"id":%d,"shape":"RECTANGLE"}`, 10+i)},
						"R2": {fmt.Sprintf(`{"id":%d,"shape":"CIRCLE"}`, 20+i), fmt.Sprintf(`{"id":%d,"shape":"CIRCLE"}`, 30+i)},
					})
				}
				if err := fns[sub].lists.Update(l); err != nil {
					t.Fatal(err)
				}
			}
			restores := restoresFor(t, snapshotRuns(t, runs, filepath.Join(root, "chk-1"), 1), filepath.Join(root, "chk-1"), "", 3)
			runs = nil
			for i := range 3 {
				m := newMatcherRun(t, kind, filepath.Join(root, fmt.Sprint("new-", i)), 3, i, restores[i])
				m.rule("R1", "RECTANGLE", "TRIANGLE")
				m.rule("R2", "CIRCLE", "TRIANGLE")
				runs = append(runs, m)
			}
			var got, want []string
			for i, c := range colors {
				m := runs[keygroup.SubtaskForKey([]byte(c), ckMaxP, 3)]
				rules := []string{"R1"}
				want = append(want, fmt.Sprintf("R1 %s %d,%d", c, 10+i, 100+i))
				if i%2 == 0 {
					rules = []string{"R1", "R2"}
					want = append(want, fmt.Sprintf("R2 %s %d,%d", c, 20+i, 100+i), fmt.Sprintf("R2 %s %d,%d", c, 30+i, 100+i))
				}
				if s := m.stored(c); !slices.Equal(s, rules) {
					t.Fatalf("%s restored with lists %q, want %q", c, s, rules)
				}
				m.item(100+i, c, "TRIANGLE")
				got = append(got, m.matches()...)
				if s := m.stored(c); len(s) != 0 {
					t.Fatalf("%s keeps lists %q after its pairs", c, s)
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("matches after the restore = %q\nwant %q", got, want)
			}
		})
	}
	l := listsOf(t, map[string][]string{"b": {`{"x":1}`}, "a": {`{"y":"<"}`, `2`}})
	for _, v := range []*ShapePairLists{nil, {}, &l} {
		want := []byte("{}")
		if v != nil {
			want, _ = ShapePairListsSerializer{}.Append(nil, *v)
		}
		got, err := shapePairListsRef{}.Append(nil, v)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("pointer serializer wrote %s (%v), the value serializer %s", got, err, want)
		}
		var orig ShapePairLists
		if v != nil {
			orig = *v
		}
		back, err := shapePairListsRef{}.Decode(got)
		if err != nil || !reflect.DeepEqual(asMap(*back), asMap(orig)) {
			t.Fatalf("decoded %s as %v (%v)", got, back, err)
		}
	}
}
