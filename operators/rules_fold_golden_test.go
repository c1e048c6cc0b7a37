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

// updateFoldGolden rewrites testdata/rules_fold_golden from the code
// under test. It was written by a9c897c (slices of one input per record,
// format version 1; summaries with their slices' links as times), with
// this file copied into a worktree of that commit:
//
//	cp operators/rules_fold_golden_test.go /tmp/base/operators/
//	cd /tmp/base && go test ./operators -run TestRulesRestoresUnfoldedSlices -update-fold-golden \
//	    -fold-golden-dir /path/to/this/operators/testdata/rules_fold_golden
var (
	updateFoldGolden = flag.Bool("update-fold-golden", false, "rewrite testdata/rules_fold_golden (see rules_fold_golden_test.go)")
	foldGoldenDir    = flag.String("fold-golden-dir", "testdata/rules_fold_golden", "where -update-fold-golden writes")
)

// foldGoldenInput is the fold golden test's rules and records: every fn
// over panes of 100-250 ms (dozens of records per pane and key), 1 h
// panes of a 744 h window, sliding windows of 3-5 ms; amounts integers
// (repeated: equal extremes) and doubles, 4 tags (repeated in a pane);
// mostly in time order, some late into older panes.
func foldGoldenInput() ([]modelRule, []modelRec) {
	rules := []modelRule{
		{id: "sum", fn: "sum", of: "amount", window: 1000, slice: 100, grouped: true},
		{id: "avg", fn: "avg", of: "amount", window: 1000, slice: 100},
		{id: "max", fn: "max", of: "amount", window: 1000, slice: 250, grouped: true},
		{id: "min", fn: "min", of: "amount", window: 1000, slice: 100, filtered: true},
		{id: "minms", fn: "min", of: "amount", window: 5},
		{id: "summs", fn: "sum", of: "amount", window: 3, grouped: true},
		{id: "cd", fn: "count_distinct", of: "tag", window: 1000, slice: 100, grouped: true},
		{id: "cdh", fn: "count_distinct", of: "tag", window: 744 * 3_600_000, slice: 3_600_000},
		{id: "cnt", fn: "count", window: 1000, slice: 500},
	}
	rng := rand.New(rand.NewPCG(44, 2))
	recs := make([]modelRec, 600)
	ts := int64(1_700_000_000_000)
	for i := range recs {
		ts += rng.Int64N(3)
		at := ts
		if rng.IntN(8) == 0 {
			at -= rng.Int64N(400)
		}
		amount := strconv.Itoa(rng.IntN(40) - 15)
		if rng.IntN(5) == 0 {
			amount = []string{"0.5", "-2.25", "0.1", "7.75"}[rng.IntN(4)]
		}
		v, _ := strconv.ParseFloat(amount, 64)
		recs[i] = modelRec{id: i, ts: at, g: fmt.Sprintf("g%d", rng.IntN(2)), tag: fmt.Sprintf("t%d", rng.IntN(4)), amount: amount,
			isFloat: slices.Contains([]byte(amount), '.'), value: v}
	}
	return rules, recs
}

// TestRulesRestoresUnfoldedSlices: a checkpoint a9c897c wrote (slices of
// one input per record, format version 1, links as times in the
// summaries; testdata/rules_fold_golden, see updateFoldGolden) restores on
// both backends, at parallelism 1, 2 and 3, and the second half, whose
// records fold into the restored slices, gives a9c897c's alerts, which
// are the brute-force model's; run straight through, this code gives
// a9c897c's alerts for both halves.
func TestRulesRestoresUnfoldedSlices(t *testing.T) {
	rules, recs := foldGoldenInput()
	half := len(recs) / 2
	run := func(g *rulesRig, from, to int, model *bruteWindows, want *[]string) []string {
		for i := from; i < to; i++ {
			x := recs[i]
			if model != nil {
				*want = append(*want, model.record(x)...)
			}
			g.send(x)
			if i%40 == 39 {
				wm := x.ts - 450
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
			dir := filepath.Join(*foldGoldenDir, kind)
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
			if *updateFoldGolden {
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
			second := run(g, half, len(recs), model, &want)
			slices.Sort(want)
			if all := slices.Sorted(slices.Values(append(slices.Clone(first), second...))); !slices.Equal(all, want) {
				t.Fatalf("straight: %d alerts, the model %d; %s", len(all), len(want), firstDiff(all, want))
			}
			if *updateFoldGolden {
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
					t.Fatalf("straight, %s differs from a9c897c's:\n%s", name, firstDiff(got, strings.Split(strings.TrimSuffix(w, "\n"), "\n")))
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
					t.Fatalf("restored from a9c897c's checkpoint at parallelism %d, the second half differs:\n%s", p, firstDiff(got, wantSecond))
				}
				checkKeyHints(t, h)
			}
		})
	}
}
