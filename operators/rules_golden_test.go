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
	"time"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/runtime"
)

// updateRulesGolden rewrites testdata/rules_golden from the code under
// test. It was written by main at a62e0e9 (summaries of format version 2,
// count_distinct's counts in RulesDistinctState), with this file copied
// into a worktree of that commit:
//
//	cp operators/rules_golden_test.go /tmp/main-src/operators/
//	cd /tmp/main-src && go test ./operators -run TestRulesRestoresDistinctMapLayout -update-rules-golden \
//	    -rules-golden-dir /path/to/this/operators/testdata/rules_golden
var (
	updateRulesGolden = flag.Bool("update-rules-golden", false, "rewrite testdata/rules_golden (see rules_golden_test.go)")
	rulesGoldenDir    = flag.String("rules-golden-dir", "testdata/rules_golden", "where -update-rules-golden writes")
)

// rulesGoldenInput is the golden test's rules and records: four
// count_distinct rules (744 h, 250 ms and 90 s windows grouped, one
// ungrouped 1 s window) and a sum; groups g0-g3 with up to 12 tags (more
// than an inline summary holds) or 3, and g4-g5 only after the half (keys
// new to the restored state); mostly in time order, some late.
func rulesGoldenInput() ([]modelRule, []modelRec) {
	rules := []modelRule{
		{id: "d-long", fn: "count_distinct", of: "tag", window: 744 * 3_600_000, grouped: true},
		{id: "d-short", fn: "count_distinct", of: "tag", window: 250, grouped: true},
		{id: "d-all", fn: "count_distinct", of: "tag", window: 1000},
		{id: "d-filtered", fn: "count_distinct", of: "tag", window: 90_000, grouped: true, filtered: true},
		{id: "s", fn: "sum", of: "amount", window: 1000, grouped: true},
	}
	rng := rand.New(rand.NewPCG(38, 25))
	recs := make([]modelRec, 600)
	ts := int64(1_700_000_000_000)
	for i := range recs {
		ts += rng.Int64N(6)
		at := ts
		if rng.IntN(10) == 0 {
			at -= rng.Int64N(300)
		}
		groups := 4
		if i >= len(recs)/2 {
			groups = 6
		}
		g := rng.IntN(groups)
		tags := 12
		if g%2 == 1 {
			tags = 3
		}
		amount := strconv.Itoa(rng.IntN(1000) - 200)
		v, _ := strconv.ParseFloat(amount, 64)
		recs[i] = modelRec{id: i, ts: at, g: fmt.Sprintf("g%d", g), tag: fmt.Sprintf("t%d", rng.IntN(tags)), amount: amount, value: v}
	}
	return rules, recs
}

// TestRulesRestoresDistinctMapLayout: a checkpoint main wrote (summaries
// of format version 2, count_distinct's counts in RulesDistinctState;
// testdata/rules_golden, see updateRulesGolden) restores on both backends,
// at parallelism 1 and rescaled to 2, and the second half gives main's
// alerts, which are the brute-force model's; run straight through, this
// code gives main's alerts for both halves.
func TestRulesRestoresDistinctMapLayout(t *testing.T) {
	rules, recs := rulesGoldenInput()
	half := len(recs) / 2
	run := func(g *rulesRig, from, to int, model *bruteWindows, want *[]string) []string {
		for i := from; i < to; i++ {
			x := recs[i]
			if model != nil {
				*want = append(*want, model.record(x)...)
			}
			c := &sliceCollector{}
			if err := g.router.ProcessElement(g.ctx, runtime.Record{Value: x.json(), Format: runtime.FormatJSON, Timestamp: time.UnixMilli(x.ts)}, c); err != nil {
				t.Fatal(err)
			}
			g.evaluate(c.recs)
			if i%40 == 39 {
				wm := x.ts - 400
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
			dir := filepath.Join(*rulesGoldenDir, kind)
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
			if *updateRulesGolden {
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
			if *updateRulesGolden {
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
					t.Fatalf("straight, %s differs from main's:\n%s", name, firstDiff(got, strings.Split(strings.TrimSuffix(w, "\n"), "\n")))
				}
			}
			var mainTasks []checkpoint.TaskState
			if err := json.Unmarshal(read("tasks.json"), &mainTasks); err != nil {
				t.Fatal(err)
			}
			var mainRouter map[string]json.RawMessage
			if err := json.Unmarshal(read("router.json"), &mainRouter); err != nil {
				t.Fatal(err)
			}
			wantSecond := strings.Split(strings.TrimSuffix(string(read("second.txt")), "\n"), "\n")
			for _, p := range []int{1, 2} {
				h := newRulesRig(t, kind, p, RuleTimeProcessing, restoresFor(t, mainTasks, copyTree(t, filepath.Join(dir, "checkpoint")), "", p), mainRouter)
				if got := run(h, half, len(recs), nil, nil); !slices.Equal(got, wantSecond) {
					t.Fatalf("restored from main's checkpoint at parallelism %d, the second half differs:\n%s", p, firstDiff(got, wantSecond))
				}
			}
		})
	}
}
