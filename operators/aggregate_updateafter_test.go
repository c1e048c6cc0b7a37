package operators

import (
	"reflect"
	"testing"

	"github.com/kstreamd/kstreamd/runtime"
)

// TestAggregateUpdateAfterOnly builds the aggregate through its factory
// with FactoryContext.UpdateAfterOnly (the planner sets it when only
// upsert sinks read the output) and checks the exact changelog, sync and
// async, on both backends (one key: the async aggregate orders per key):
// +I of a new key, +U alone per update (no -U),
// nothing for an update that changes no row with emit on_change, and over
// a changelog input the -D of a key whose rows are all retracted. Without
// the flag the same input gives each -U too.
func TestAggregateUpdateAfterOnly(t *testing.T) {
	in := []runtime.Record{
		changed(runtime.ChangeInsert, "k", 5, "u1"),
		changed(runtime.ChangeInsert, "k", 3, "u2"),
		changed(runtime.ChangeInsert, "k", 0, "u2"), // on_change: the same row
		changed(runtime.ChangeDelete, "k", 3, "u2"),
		changed(runtime.ChangeDelete, "k", 0, "u2"),
		changed(runtime.ChangeDelete, "k", 5, "u1"), // the last row: -D
	}
	k1, k2, k3 := `{"key":"k","total":5,"users":1}`, `{"key":"k","total":8,"users":2}`, `{"key":"k","total":5,"users":2}`
	k4 := `{"key":"k","total":5,"users":1}`
	for _, tc := range []struct {
		afterOnly bool
		want      []string
	}{
		{true, []string{"+I " + k1, "+U " + k2, "+U " + k3, "+U " + k4, "-D " + k4}},
		{false, []string{"+I " + k1, "-U " + k1, "+U " + k2, "-U " + k2, "+U " + k3, "-U " + k3, "+U " + k4, "-D " + k4}},
	} {
		for _, kind := range backends {
			for _, mode := range modes {
				name := kind + "/" + mode + "/all"
				if tc.afterOnly {
					name = kind + "/" + mode + "/after-only"
				}
				t.Run(name, func(t *testing.T) {
					p := &AggregateParams{Emit: EmitOnChange, Aggregates: []AggregateSpec{
						{Name: "total", Fn: AggSum, Of: compiled(t, "amount")},
						{Name: "users", Fn: AggCountDistinct, Of: compiled(t, "user")},
					}}
					fn, err := aggregateFactory().New(FactoryContext{
						Operator: "agg", Params: p, AsyncState: mode == "async", ChangelogInput: true, UpdateAfterOnly: tc.afterOnly,
					})
					if err != nil {
						t.Fatal(err)
					}
					h, err := openStateful(t, kind, t.TempDir(), nil, nil, fn)
					if err != nil {
						t.Fatal(err)
					}
					bad := &recordErrors{}
					h.feed(bad, in...)
					got := h.finish()
					if len(bad.errs) > 0 {
						t.Fatalf("bad records %v", bad.errs)
					}
					if g := changelogText(got); !reflect.DeepEqual(g, tc.want) {
						t.Fatalf("changelog\n%q\nwant\n%q", g, tc.want)
					}
				})
			}
		}
	}
}
