package job

import (
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/internal/testkit"
)

// TestMatchRestoredOperators: a restore matches the graph's vertices with
// the checkpoint's operators by uid (a recorded operator without uid by
// its name), logs renames and added vertices, refuses state no vertex has
// the uid of, naming it, the vertices the checkpoint lacks and both ways
// out, and with allow drops it, logging each.
func TestMatchRestoredOperators(t *testing.T) {
	held := []json.RawMessage{json.RawMessage(`{"operator":{}}`)}
	meta := func(ops map[string]string) *checkpoint.Metadata {
		m := &checkpoint.Metadata{Operators: map[string]checkpoint.OperatorMetadata{}}
		for name, uid := range ops {
			m.Operators[name] = checkpoint.OperatorMetadata{Parallelism: 1, UID: uid, Subtasks: held}
		}
		m.Operators["stateless"] = checkpoint.OperatorMetadata{Parallelism: 1, Subtasks: []json.RawMessage{json.RawMessage("null")}}
		return m
	}
	g := func(uids map[string]string, names ...string) *graph.Graph {
		gr := &graph.Graph{UIDs: uids}
		for _, n := range names {
			gr.Operators = append(gr.Operators, &graph.Operator{Name: n, Parallelism: 1})
		}
		return gr
	}
	for _, tc := range []struct {
		name      string
		g         *graph.Graph
		m         *checkpoint.Metadata
		allow     bool
		keys      map[string]string
		err       []string
		logs      []string
		notLogged string
	}{
		{name: "old checkpoint, same names", g: g(nil, "counts", "events"), m: meta(map[string]string{"counts": "", "events": ""}),
			keys: map[string]string{"counts": "counts", "events": "events"}},
		{name: "renamed with uid kept", g: g(map[string]string{"tally": "counts"}, "tally", "events"), m: meta(map[string]string{"counts": "", "events": ""}),
			keys: map[string]string{"tally": "counts", "events": "events"},
			logs: []string{`msg="restoring the state of a renamed operator by its uid" operator=tally uid=counts recorded_as=counts`}},
		{name: "recorded under a uid, renamed again", g: g(map[string]string{"total": "counts"}, "total"), m: meta(map[string]string{"tally": "counts"}),
			keys: map[string]string{"total": "tally"}},
		{name: "a name equal to a recorded name but another uid gets nothing", g: g(map[string]string{"tally": "counts"}, "tally", "counts2"),
			m: meta(map[string]string{"tally": "other", "counts2": "counts"}),
			err: []string{`the checkpoint holds state of "tally" (uid "other"), which the pipeline no longer has: no source, operator or sink has that uid`,
				`the pipeline's "counts2" is not in the checkpoint`}},
		{name: "renamed without uid", g: g(nil, "tally", "events"), m: meta(map[string]string{"counts": "", "events": ""}),
			err: []string{`the checkpoint holds state of "counts" (uid "counts"), which the pipeline no longer has: no source, operator or sink has that uid`,
				`the pipeline's "tally" is not in the checkpoint: if one is a renamed operator, set its uid to the old one (uid: counts)`,
				`to drop the state instead, run with --allow-non-restored-state (or checkpoints.allow_non_restored_state: true)`}},
		{name: "removed, allowed", g: g(nil, "events", "added"), m: meta(map[string]string{"counts": "", "events": ""}), allow: true,
			keys: map[string]string{"events": "events", "added": ""},
			logs: []string{`msg="dropping the state of an operator the pipeline no longer has (allow_non_restored_state)" operator=counts uid=counts`,
				`msg="operator not in the checkpoint: it starts without state" operator=added uid=added`},
			notLogged: "operator=stateless"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log testkit.SyncBuffer
			keys, err := matchRestoredOperators(tc.g, tc.m, tc.allow, slog.New(slog.NewTextHandler(&log, nil)))
			if tc.err != nil {
				if !errors.Is(err, ErrIncompatibleState) {
					t.Fatalf("err = %v, want ErrIncompatibleState", err)
				}
				for _, w := range tc.err {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("err %q does not say %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for n, k := range tc.keys {
				if keys[n] != k {
					t.Errorf("keys[%s] = %q, want %q (all: %v)", n, keys[n], k, keys)
				}
			}
			for _, w := range tc.logs {
				if !strings.Contains(log.String(), w) {
					t.Errorf("log does not say %q:\n%s", w, log.String())
				}
			}
			if tc.notLogged != "" && strings.Contains(log.String(), tc.notLogged) {
				t.Errorf("log names %s:\n%s", tc.notLogged, log.String())
			}
		})
	}
}
