package operators

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/runtime"
)

// updateSpillGolden rewrites testdata/rules_spill_golden from the code
// under test. It was written by f2a2eb3 (no pages: a key's ninth slice
// moved the eight its summary held into RulesSliceState one entry each),
// with this file copied into a worktree of that commit:
//
//	cp operators/rules_spill_golden_test.go /tmp/base/operators/
//	cd /tmp/base && go test ./operators -run TestRulesRestoresSpilledSlices -update-spill-golden \
//	    -spill-golden-dir /path/to/this/operators/testdata/rules_spill_golden
var (
	updateSpillGolden = flag.Bool("update-spill-golden", false, "rewrite testdata/rules_spill_golden (see rules_spill_golden_test.go)")
	spillGoldenDir    = flag.String("spill-golden-dir", "testdata/rules_spill_golden", "where -update-spill-golden writes")
)

// spillGoldenInput is the spill golden test's rules and records: every
// fn over sliding windows of 40-400 ms (one slice per millisecond), two
// groups, records 0-2 ms apart, some late by up to 100 ms: a key holds
// dozens of slices, so it passes maxInlineSlices (its summary's slices
// move out) and keeps moving its displaced newest out, and the watermark
// expires slices in the summary, the map and (after a restore into code
// with pages) pages.
func spillGoldenInput() ([]modelRule, []modelRec) {
	rules := []modelRule{
		{id: "sum", fn: "sum", of: "amount", window: 400, grouped: true},
		{id: "avg", fn: "avg", of: "amount", window: 120},
		{id: "max", fn: "max", of: "amount", window: 300, grouped: true},
		{id: "min", fn: "min", of: "amount", window: 200, filtered: true},
		{id: "cd", fn: "count_distinct", of: "tag", window: 250, grouped: true},
		{id: "cnt", fn: "count", window: 40, grouped: true},
	}
	rng := rand.New(rand.NewPCG(46, 5))
	recs := make([]modelRec, 600)
	ts := int64(1_700_000_000_000)
	for i := range recs {
		ts += rng.Int64N(3)
		at := ts
		if rng.IntN(8) == 0 {
			at -= rng.Int64N(100)
		}
		amount := strconv.Itoa(rng.IntN(40) - 15)
		if rng.IntN(5) == 0 {
			amount = []string{"0.5", "-2.25", "0.1", "7.75"}[rng.IntN(4)]
		}
		v, _ := strconv.ParseFloat(amount, 64)
		recs[i] = modelRec{id: i, ts: at, g: fmt.Sprintf("g%d", rng.IntN(2)), tag: fmt.Sprintf("t%d", rng.IntN(6)), amount: amount,
			isFloat: slices.Contains([]byte(amount), '.'), value: v}
	}
	return rules, recs
}

// TestRulesRestoresSpilledSlices: a checkpoint f2a2eb3 wrote (keys past
// maxInlineSlices with their older slices in RulesSliceState, one entry
// each; testdata/rules_spill_golden, see updateSpillGolden) restores on
// both backends, at parallelism 1, 2 and 3, and the second half gives
// f2a2eb3's alerts, which are the brute-force model's; run straight
// through, this code gives f2a2eb3's alerts for both halves.
func TestRulesRestoresSpilledSlices(t *testing.T) {
	rules, recs := spillGoldenInput()
	half := len(recs) / 2
	run := func(g *rulesRig, from, to int, model *bruteWindows, want *[]string) []string {
		for i := from; i < to; i++ {
			x := recs[i]
			if model != nil {
				*want = append(*want, model.record(x)...)
			}
			g.send(x)
			if i%40 == 39 {
				wm := x.ts - 150
				g.watermark(wm)
				if model != nil {
					model.watermark(wm)
				}
			}
		}
		return g.alerts()
	}
	lines := func(s []string) string { return strings.Join(s, "\n") + "\n" }
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			dir := filepath.Join(*spillGoldenDir, kind)
			model := &bruteWindows{rules: rules, held: map[string][]modelRec{}}
			var want []string
			g := newRulesRig(t, kind, 1, RuleTimeProcessing, nil, nil)
			for _, r := range rules {
				g.rule(r.id, r.json(), 0)
			}
			first := run(g, 0, half, model, &want)
			routerState, err := g.router.SnapshotBroadcastState()
			if err != nil {
				t.Fatal(err)
			}
			snapDir := t.TempDir()
			if *updateSpillGolden {
				snapDir = filepath.Join(dir, "checkpoint")
				if err := os.RemoveAll(snapDir); err != nil {
					t.Fatal(err)
				}
				if err := os.MkdirAll(snapDir, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			var tasks []checkpoint.TaskState
			for _, op := range g.evals {
				fin, err := op.SnapshotState(g.ctx, &runtime.Barrier{CheckpointID: 1, Dir: snapDir})
				if err != nil {
					t.Fatal(err)
				}
				snap, err := fin(g.ctx)
				if err != nil {
					t.Fatal(err)
				}
				ts, err := checkpoint.DecodeTaskStates(checkpoint.OperatorMetadata{Subtasks: []json.RawMessage{snap.State}})
				if err != nil {
					t.Fatal(err)
				}
				tasks = append(tasks, ts[0])
			}
			if n := mapSlices(t, g); len(n) == 0 {
				t.Fatal("no key has slices in RulesSliceState at the checkpoint: the input no longer spills")
			}
			second := run(g, half, len(recs), model, &want)
			slices.Sort(want)
			if all := slices.Sorted(slices.Values(append(slices.Clone(first), second...))); !slices.Equal(all, want) {
				t.Fatalf("straight: %d alerts, the model %d; %s", len(all), len(want), firstDiff(all, want))
			}
			if *updateSpillGolden {
				tb, err := json.Marshal(tasks)
				if err != nil {
					t.Fatal(err)
				}
				rb, err := json.Marshal(routerState)
				if err != nil {
					t.Fatal(err)
				}
				for name, b := range map[string][]byte{"first.txt": []byte(lines(first)), "second.txt": []byte(lines(second)), "tasks.json": tb, "router.json": rb} {
					if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				return
			}
			read := func(name string) []byte {
				b, err := os.ReadFile(filepath.Join(dir, name))
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
			for name, got := range map[string][]string{"first.txt": first, "second.txt": second} {
				if w := string(read(name)); lines(got) != w {
					t.Fatalf("straight, %s differs from f2a2eb3's:\n%s", name, firstDiff(got, strings.Split(strings.TrimSuffix(w, "\n"), "\n")))
				}
			}
			var baseTasks []checkpoint.TaskState
			if err := json.Unmarshal(read("tasks.json"), &baseTasks); err != nil {
				t.Fatal(err)
			}
			var baseRouter map[string]json.RawMessage
			if err := json.Unmarshal(read("router.json"), &baseRouter); err != nil {
				t.Fatal(err)
			}
			wantSecond := strings.Split(strings.TrimSuffix(string(read("second.txt")), "\n"), "\n")
			for _, p := range []int{1, 2, 3} {
				h := newRulesRig(t, kind, p, RuleTimeProcessing, restoresFor(t, baseTasks, copyTree(t, filepath.Join(dir, "checkpoint")), "", p), baseRouter)
				checkKeyHints(t, h)
				if got := run(h, half, len(recs), nil, nil); !slices.Equal(got, wantSecond) {
					t.Fatalf("restored from f2a2eb3's checkpoint at parallelism %d, the second half differs:\n%s", p, firstDiff(got, wantSecond))
				}
				checkKeyHints(t, h)
			}
		})
	}
}
