package operators

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/broadcast"
	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// matcherRun drives one ShapePairMatcher subtask through a KeyedOperator,
// as the runtime does: records of input 0 (items, keyed by colour) and 1
// (rules), output read from a channel.
type matcherRun struct {
	t  *testing.T
	op *KeyedOperator
	fn *ShapePairMatcher
	ch runtime.Channel
}

func newMatcherRun(t *testing.T, kind, dir string, p, i int, restore *Restore) *matcherRun {
	t.Helper()
	m := &matcherRun{t: t, fn: &ShapePairMatcher{}}
	m.op, m.ch = newKeyedRun(t, kind, dir, p, i, restore, m.fn)
	return m
}

// newKeyedRun opens subtask i of p of the keyed broadcast function fn on
// a backend of kind in dir (restored from restore, if not nil), its output
// read from the channel returned.
func newKeyedRun(t *testing.T, kind, dir string, p, i int, restore *Restore, fn KeyedBroadcastProcessFunction) (*KeyedOperator, runtime.Channel) {
	t.Helper()
	ch := runtime.NewChannel(256)
	cfg := state.BackendConfig{Kind: kind, MaxParallelism: ckMaxP, KeyGroupRange: keygroup.RangeFor(ckMaxP, p, i)}
	if kind == state.KindPebble {
		cfg.Dir = dir
	}
	open := func(r []state.RestoreHandle) (state.KeyedStateBackend, error) {
		return state.OpenBackendRestored(cfg, r)
	}
	out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{}))
	op := NewKeyedBroadcastOperator(OpenContext{Operator: "matcher", Subtask: i, Parallelism: p}, open, restore, fn, out)
	if err := op.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = op.Close() })
	return op, ch
}

func (m *matcherRun) rule(name, first, second string) {
	m.t.Helper()
	v := fmt.Appendf(nil, `{"name":%q,"first":%q,"second":%q}`, name, first, second)
	if err := m.op.ProcessRecord(context.Background(), 1, runtime.Record{Key: []byte(name), Value: v}); err != nil {
		m.t.Fatal(err)
	}
}

func (m *matcherRun) deleteRule(name string) {
	m.t.Helper()
	if err := m.op.ProcessRecord(context.Background(), 1, runtime.Record{Key: []byte(name)}); err != nil {
		m.t.Fatal(err)
	}
}

func (m *matcherRun) item(id int, color, shape string) {
	m.t.Helper()
	v := fmt.Appendf(nil, `{"id":%d,"color":%q,"shape":%q}`, id, color, shape)
	if err := m.op.ProcessRecord(context.Background(), 0, runtime.Record{Key: []byte(color), Value: v}); err != nil {
		m.t.Fatal(err)
	}
}

// matches returns what was emitted since the last call as "rule key
// firstID,secondID".
func (m *matcherRun) matches() []string {
	m.t.Helper()
	var out []string
	for {
		select {
		case el := <-m.ch:
			var mt Match
			if err := json.Unmarshal(el.Record.Value, &mt); err != nil {
				m.t.Fatal(err)
			}
			var a, b struct{ ID int }
			if err := json.Unmarshal(mt.First, &a); err != nil {
				m.t.Fatal(err)
			}
			if err := json.Unmarshal(mt.Second, &b); err != nil {
				m.t.Fatal(err)
			}
			if string(el.Record.Key) != mt.Key {
				m.t.Fatalf("match %s emitted with key %q", el.Record.Value, el.Record.Key)
			}
			out = append(out, fmt.Sprintf("%s %s %d,%d", mt.Rule, mt.Key, a.ID, b.ID))
		default:
			return out
		}
	}
}

// walkedSize is ShapePairListsSerializer.Size counted from the lists
// themselves.
func walkedSize(l ShapePairLists) int {
	n := 56
	for _, pl := range l.lists {
		n += 40 + len(pl.rule) + 24*(len(pl.items)+1)
		for _, it := range pl.items {
			n += len(it)
		}
	}
	return n
}

// stored returns the rules with stored items under key (checking the
// lists' Size on the way).
func (m *matcherRun) stored(key string) []string {
	m.t.Helper()
	m.fn.backend.SetCurrentKey([]byte(key))
	lists, err := listsValue(m.fn.lists)
	if err != nil {
		m.t.Fatal(err)
	}
	if got, want := (ShapePairListsSerializer{}).Size(lists), walkedSize(lists); got != want {
		m.t.Fatalf("Size of %s's lists = %d, counting them gives %d", key, got, want)
	}
	rules := lists.Rules()
	if len(rules) == 0 {
		rules = nil
	}
	if !slices.IsSorted(rules) {
		m.t.Fatalf("lists of %s not in rule order: %v", key, rules)
	}
	return rules
}

// TestShapePairRuleDeletionClearsItems: deleting a rule removes that
// rule's stored items under every key (Flink's applyToKeyedState), so a
// re-added rule starts clean; other rules' items stay. The control case
// without the deletion shows the same input matching.
func TestShapePairRuleDeletionClearsItems(t *testing.T) {
	colors := []string{"red", "blue", "green", "yellow"}
	for _, kind := range []string{state.KindHashmap, state.KindPebble} {
		for _, tc := range []struct {
			name       string
			deleteRule string // "" for none
			want       []string
			wantStored []string // rules with items under red after the deletion
		}{
			{name: "delete and re-add R1", deleteRule: "R1", want: []string{"R2 red 1,8"}, wantStored: []string{"R2"}},
			{name: "delete unknown rule", deleteRule: "R9", want: []string{
				"R1 red 1,4", "R1 blue 2,5", "R1 green 3,6", "R1 yellow 4,7", "R2 red 1,8",
			}, wantStored: []string{"R1", "R2"}},
			{name: "no deletion", want: []string{
				"R1 red 1,4", "R1 blue 2,5", "R1 green 3,6", "R1 yellow 4,7", "R2 red 1,8",
			}, wantStored: []string{"R1", "R2"}},
		} {
			t.Run(kind+"/"+tc.name, func(t *testing.T) {
				m := newMatcherRun(t, kind, t.TempDir(), 1, 0, nil)
				m.rule("R1", "RECTANGLE", "TRIANGLE")
				m.rule("R2", "RECTANGLE", "CIRCLE")
				for i, c := range colors {
					m.item(i+1, c, "RECTANGLE")
				}
				if got := m.matches(); len(got) != 0 {
					t.Fatalf("rectangles alone matched %q", got)
				}
				for _, c := range colors {
					if got := m.stored(c); !slices.Equal(got, []string{"R1", "R2"}) {
						t.Fatalf("%s holds items of %q before the deletion", c, got)
					}
				}
				if tc.deleteRule != "" {
					m.deleteRule(tc.deleteRule)
					if _, ok := m.fn.Rules().Get(tc.deleteRule); ok {
						t.Fatalf("rule %s still in broadcast state", tc.deleteRule)
					}
					for _, c := range colors {
						if got := m.stored(c); !slices.Equal(got, tc.wantStored) {
							t.Fatalf("%s holds items of %q after deleting %s, want %q", c, got, tc.deleteRule, tc.wantStored)
						}
					}
					m.rule("R1", "RECTANGLE", "TRIANGLE")
				}
				for i, c := range colors {
					m.item(i+4, c, "TRIANGLE")
				}
				m.item(8, "red", "CIRCLE")
				got := m.matches()
				if !slices.Equal(got, tc.want) {
					t.Fatalf("matches = %q, want %q", got, tc.want)
				}
			})
		}
	}
}

// TestShapePairBroadcastStateScaleUp: the matcher's rules, checkpointed by
// each of 2 subtasks, are on every subtask after a restore at 4 (scale-up
// subtasks take old copies round-robin), and a pair begun before the
// checkpoint completes after it in the subtask now owning the key.
func TestShapePairBroadcastStateScaleUp(t *testing.T) {
	for _, kind := range []string{state.KindHashmap, state.KindPebble} {
		t.Run(kind, func(t *testing.T) {
			root := t.TempDir()
			colors := []string{"red", "blue", "green", "yellow", "black", "white"}
			var runs []*matcherRun
			for i := range 2 {
				m := newMatcherRun(t, kind, filepath.Join(root, fmt.Sprint("old-", i)), 2, i, nil)
				m.rule("R1", "RECTANGLE", "TRIANGLE")
				m.rule("R2", "CIRCLE", "CIRCLE")
				runs = append(runs, m)
			}
			for i, c := range colors {
				runs[keygroup.SubtaskForKey([]byte(c), ckMaxP, 2)].item(i+1, c, "RECTANGLE")
			}
			dir := filepath.Join(root, "chk-1")
			old := make([]checkpoint.TaskState, 2)
			for i, m := range runs {
				finish, err := m.op.SnapshotState(context.Background(), &runtime.Barrier{CheckpointID: 1, Dir: dir})
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
			restores := restoresFor(t, old, dir, "", 4)
			wantRules := map[string]broadcast.Rule{
				"R1": {Name: "R1", First: "RECTANGLE", Second: "TRIANGLE"},
				"R2": {Name: "R2", First: "CIRCLE", Second: "CIRCLE"},
			}
			runs = nil
			for i := range 4 {
				m := newMatcherRun(t, kind, filepath.Join(root, fmt.Sprint("new-", i)), 4, i, restores[i])
				if got := maps.Collect(m.fn.Rules().Entries()); !maps.Equal(got, wantRules) {
					t.Fatalf("subtask %d of 4 restored rules %v, want %v", i, got, wantRules)
				}
				runs = append(runs, m)
			}
			var got []string
			for i, c := range colors {
				m := runs[keygroup.SubtaskForKey([]byte(c), ckMaxP, 4)]
				m.item(100+i, c, "TRIANGLE")
				got = append(got, m.matches()...)
			}
			var want []string
			for i, c := range colors {
				want = append(want, fmt.Sprintf("R1 %s %d,%d", c, i+1, 100+i))
			}
			if !slices.Equal(got, want) {
				t.Fatalf("matches after the restore at 4 = %q, want %q", got, want)
			}
		})
	}
}

// TestShapePairPendingTimeout: with pending_timeout 10s an item that found
// no pair is removed once the watermark passes its timestamp plus 10s
// (count asserted), a pair completed in time matches exactly as without
// the timeout, and no entry is left once everything paired or expired.
func TestShapePairPendingTimeout(t *testing.T) {
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			expired := &addCounter{}
			ch := runtime.NewChannel(64)
			fn := &ShapePairMatcher{PendingTimeout: 10 * time.Second, Expired: expired}
			out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{}))
			op := NewKeyedBroadcastOperator(OpenContext{Operator: "matcher", Parallelism: 1}, opener(kind, t.TempDir()), nil, fn, out)
			ctx := context.Background()
			if err := op.Open(ctx); err != nil {
				t.Fatal(err)
			}
			defer op.Close()
			m := &matcherRun{t: t, op: op, fn: fn, ch: ch}
			m.rule("R", "CIRCLE", "SQUARE")
			item := func(id int, color, shape string, ms int64) {
				v := fmt.Appendf(nil, `{"id":%d,"color":%q,"shape":%q}`, id, color, shape)
				if err := op.ProcessRecord(ctx, 0, runtime.Record{Key: []byte(color), Value: v, Timestamp: time.UnixMilli(ms)}); err != nil {
					t.Fatal(err)
				}
			}
			wm := func(ms int64) {
				if err := op.ProcessWatermark(ctx, time.UnixMilli(ms)); err != nil {
					t.Fatal(err)
				}
			}
			item(1, "red", "CIRCLE", 0)
			item(2, "blue", "CIRCLE", 1000)
			item(3, "green", "CIRCLE", 2000)
			item(4, "red", "SQUARE", 5000) // pairs with 1 in time
			item(5, "green", "CIRCLE", 9000)
			wm(12_000)                         // 2 (1s) and 3 (2s) expired; 5 (9s) not yet
			item(6, "blue", "SQUARE", 13_000)  // 2 is gone: no match
			item(7, "green", "SQUARE", 14_000) // pairs with 5 only
			if got, want := m.matches(), []string{"R red 1,4", "R green 5,7"}; !slices.Equal(got, want) {
				t.Fatalf("matches %q, want %q", got, want)
			}
			if got := expired.n; got != 2 {
				t.Fatalf("expired %v items, want 2", got)
			}
			wm(30_000)
			if n, err := state.EntryCount(op.backend); err != nil || n != 0 {
				t.Fatalf("%d entries left (%v), want 0", n, err)
			}
		})
	}
}

// addCounter counts what is added to it.
type addCounter struct{ n float64 }

func (c *addCounter) Add(v float64) { c.n += v }

// TestShapePairOutBuf: outBuf hands out empty buffers of capacity n carved
// from one slab (one allocation per matchSlab bytes), so that filling one,
// and appending past its capacity, never changes another; a buffer over a
// quarter of a slab is its own.
func TestShapePairOutBuf(t *testing.T) {
	m := &ShapePairMatcher{}
	var bufs [][]byte
	for i := range 200 {
		b := m.outBuf(300)
		if len(b) != 0 || cap(b) != 300 {
			t.Fatalf("buffer %d: len %d cap %d, want 0, 300", i, len(b), cap(b))
		}
		b = append(b, bytes.Repeat([]byte{byte(i)}, 300)...)
		bufs = append(bufs, b)
	}
	grown := append(bufs[0], 'x') // past its capacity: copied, not into bufs[1]
	grown[0] = 0xff
	for i, b := range bufs {
		if !bytes.Equal(b, bytes.Repeat([]byte{byte(i)}, 300)) {
			t.Fatalf("buffer %d changed by another: %v...", i, b[:8])
		}
	}
	if big := m.outBuf(matchSlab/4 + 1); cap(big) != matchSlab/4+1 {
		t.Fatalf("large buffer's capacity %d", cap(big))
	}
	m.slab = nil
	perSlab := matchSlab / 300
	if allocs := testing.AllocsPerRun(20, func() {
		for range perSlab {
			m.outBuf(300)
		}
	}); allocs > 1 {
		t.Fatalf("%v allocations per %d buffers of 300 bytes, want at most 1 (a slab)", allocs, perSlab)
	}
}
