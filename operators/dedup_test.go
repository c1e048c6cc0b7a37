package operators

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
)

// dedupFn returns the sync or async dedup of p.
func dedupFn(mode string, p DedupParams) any {
	if mode == "async" {
		return NewAsyncDedup(p)
	}
	return NewDedup(p)
}

// TestDedup: with ttl 2s, the sequence a, b, a (at once), a (3s later)
// emits exactly a, b, a (each key's in order), unchanged (value, timestamp, headers, origin);
// with by the same holds for by values within one key, and a by that fails
// is an eval_error. Time is the backends' injected TTL clock.
func TestDedup(t *testing.T) {
	rec := func(key, value string, i int) runtime.Record {
		return runtime.Record{Key: []byte(key), Value: []byte(value), Timestamp: time.UnixMilli(int64(500 + i)),
			Headers: []runtime.Header{{Key: "n", Value: []byte{byte('0' + i)}}}, Origin: runtime.Origin{Topic: "in", Offset: int64(i)}}
	}
	for _, c := range []struct {
		name    string
		by      string
		first   []runtime.Record // at once
		later   []runtime.Record // 3s later
		want    []int            // indexes into first ++ later
		badRecs int
	}{
		{
			name:  "key",
			first: []runtime.Record{rec("a", `{"v":1}`, 0), rec("b", `{"v":2}`, 1), rec("a", `{"v":3}`, 2)},
			later: []runtime.Record{rec("a", `{"v":4}`, 3)},
			want:  []int{0, 1, 3},
		},
		{
			name: "by",
			by:   "event_id",
			first: []runtime.Record{rec("k", `{"event_id":"a"}`, 0), rec("k", `{"event_id":"b"}`, 1), rec("k", `{"event_id":"a"}`, 2),
				rec("j", `{"event_id":"a"}`, 3), rec("k", `{"other":1}`, 4)},
			later:   []runtime.Record{rec("k", `{"event_id":"a"}`, 5), rec("k", `{"event_id":"b","x":1}`, 6)},
			want:    []int{0, 1, 3, 5, 6},
			badRecs: 1,
		},
	} {
		for _, kind := range backends {
			for _, mode := range modes {
				t.Run(c.name+"/"+kind+"/"+mode, func(t *testing.T) {
					p := DedupParams{TTL: 2 * time.Second}
					if c.by != "" {
						p.By = compiled(t, c.by)
					}
					clk := newStepClock()
					h, err := openStateful(t, kind, t.TempDir(), clk, nil, dedupFn(mode, p))
					if err != nil {
						t.Fatal(err)
					}
					bad := &recordErrors{}
					h.feed(bad, c.first...)
					clk.advance(3 * time.Second)
					h.feed(bad, c.later...)
					got := h.finish()
					all := append(append([]runtime.Record(nil), c.first...), c.later...)
					var want []runtime.Record
					for _, i := range c.want {
						want = append(want, all[i])
					}
					perKey := func(rs []runtime.Record) map[string][]runtime.Record { // async: keys may overtake each other
						m := map[string][]runtime.Record{}
						for _, r := range rs {
							m[string(r.Key)] = append(m[string(r.Key)], r)
						}
						return m
					}
					if len(got) != len(want) || !reflect.DeepEqual(perKey(got), perKey(want)) {
						t.Fatalf("emitted\n%v\nwant exactly\n%v", values(got), values(want))
					}
					if len(bad.errs) != c.badRecs {
						t.Fatalf("bad records %v, want %d", bad.errs, c.badRecs)
					}
					for _, e := range bad.errs {
						if e.Reason != runtime.ReasonEvalError || !strings.Contains(e.Detail, `expression "event_id"`) {
							t.Fatalf("bad record %v, want an eval_error of event_id", e)
						}
					}
				})
			}
		}
	}
}

// TestDedupCheckParams: ttl is required and at least 1ms.
func TestDedupCheckParams(t *testing.T) {
	for _, c := range []struct {
		ttl  time.Duration
		want []string
	}{
		{10 * time.Minute, nil},
		{0, []string{"ttl: required: how long a seen record is remembered (a duration such as 10m)"}},
		{-time.Second, []string{"ttl: must be at least 1ms, got -1s"}},
	} {
		var got []string
		(&DedupParams{TTL: c.ttl}).CheckParams(func(field, msg string) { got = append(got, field+": "+msg) })
		if !reflect.DeepEqual(got, c.want) {
			t.Fatalf("ttl %v: problems %q, want %q", c.ttl, got, c.want)
		}
	}
}

// TestBuiltinsAggregateDedup: both types are registered keyed with async
// state and their params defaults.
func TestBuiltinsAggregateDedup(t *testing.T) {
	r := NewBuiltinRegistry()
	for typ, want := range map[string]Traits{
		AggregateType: {Keyed: true, AsyncState: true, Changelog: ChangelogTraits{Accepts: true, Produces: true, UpdateAfterOnly: true}},
		DedupType:     {Keyed: true, AsyncState: true, Changelog: ChangelogTraits{Produces: true}},
	} {
		f, ok := r.Lookup(typ)
		if !ok || f.Traits != want || f.Params == nil {
			t.Fatalf("%s: registered %v with traits %+v", typ, ok, f)
		}
	}
	f, _ := r.Lookup(AggregateType)
	if p := f.Params().(*AggregateParams); p.Emit != EmitEveryUpdate || p.StateTTL.Config() != nil {
		t.Fatalf("aggregate defaults %+v", p)
	}
}
