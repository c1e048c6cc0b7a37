package operators

import (
	"reflect"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// dedupLastFn returns the sync or async keep-last dedup of p.
func dedupLastFn(mode string, p DedupParams) any {
	if mode == "async" {
		return NewAsyncDedupLast(p)
	}
	return NewDedupLast(p)
}

// keyedChangelog renders records per key as "<kind> <value>@<ts ms>", each
// key's in order (async: keys may overtake each other).
func keyedChangelog(recs []runtime.Record) map[string][]string {
	m := map[string][]string{}
	for _, r := range recs {
		m[string(r.Key)] = append(m[string(r.Key)], r.Change.String()+" "+string(r.Value)+"@"+time.Duration(r.Timestamp.UnixMilli()*int64(time.Millisecond)).String())
	}
	return m
}

// TestDedupKeepLast: keep: last emits each key's latest record as a
// changelog (Nexmark q18): +I of the first, then -U of the record kept
// (its value, timestamp and headers) and +U of the new one; a record older
// than the one kept is dropped, an equal timestamp replaces it; the kept
// record survives a checkpoint and restore; with ttl 2s a key unseen for
// 3s starts again with +I. Both backends, sync and async.
func TestDedupKeepLast(t *testing.T) {
	rec := func(key, value string, ms int64) runtime.Record {
		return runtime.Record{Key: []byte(key), Value: []byte(value), Timestamp: time.UnixMilli(ms),
			Headers: []runtime.Header{{Key: "v", Value: []byte(value)}}}
	}
	first := []runtime.Record{rec("a", "a1", 10), rec("b", "b1", 20), rec("a", "a2", 30), rec("a", "old", 5)}
	then := []runtime.Record{rec("a", "a3", 30), rec("b", "b2", 40)}
	later := []runtime.Record{rec("a", "a4", 50)} // 3s of processing time later: a expired (ttl 2s)
	wantFirst := map[string][]string{
		"a": {"+I a1@10ms", "-U a1@10ms", "+U a2@30ms"},
		"b": {"+I b1@20ms"},
	}
	wantThen := map[string][]string{
		"a": {"-U a2@30ms", "+U a3@30ms", "+I a4@50ms"},
		"b": {"-U b1@20ms", "+U b2@40ms"},
	}
	for _, kind := range backends {
		for _, mode := range modes {
			t.Run(kind+"/"+mode, func(t *testing.T) {
				p := DedupParams{Keep: DedupKeepLast, TTL: 2 * time.Second}
				clk := newStepClock()
				h, err := openStateful(t, kind, t.TempDir(), clk, nil, dedupLastFn(mode, p))
				if err != nil {
					t.Fatal(err)
				}
				h.feed(&recordErrors{}, first...)
				got := h.emitted()
				if g := keyedChangelog(got); !reflect.DeepEqual(g, wantFirst) {
					t.Fatalf("changelog %q, want %q", g, wantFirst)
				}
				for _, r := range got {
					if r.Change == runtime.ChangeUpdateBefore && string(r.Headers[0].Value) != string(r.Value) {
						t.Fatalf("-U %s carries headers %q, want the kept record's", r.Value, r.Headers)
					}
				}
				h2, err := openStateful(t, kind, t.TempDir(), clk, snapshotRestore(t, h), dedupLastFn(mode, p))
				if err != nil {
					t.Fatal(err)
				}
				h2.feed(&recordErrors{}, then...)
				clk.advance(3 * time.Second)
				h2.feed(&recordErrors{}, later...)
				if g := keyedChangelog(h2.finish()); !reflect.DeepEqual(g, wantThen) {
					t.Fatalf("changelog after restore %q, want %q", g, wantThen)
				}
			})
		}
	}
}

// TestDedupKeepParams: keep: last takes no by and needs no ttl; keep:
// first still requires ttl; only keep: last produces a changelog.
func TestDedupKeepParams(t *testing.T) {
	for _, c := range []struct {
		p         DedupParams
		want      []string
		changelog bool
	}{
		{p: DedupParams{Keep: DedupKeepLast}, changelog: true},
		{p: DedupParams{Keep: DedupKeepLast, By: compiled(t, "id"), TTL: time.Minute}, changelog: true,
			want: []string{"by: keep: last keeps one record per key (the changelog's row); by applies to keep: first only"}},
		{p: DedupParams{Keep: DedupKeepFirst}, want: []string{"ttl: required: how long a seen record is remembered (a duration such as 10m)"}},
	} {
		var got []string
		c.p.CheckParams(func(field, msg string) { got = append(got, field+": "+msg) })
		if !reflect.DeepEqual(got, c.want) || c.p.ProducesChangelog() != c.changelog {
			t.Errorf("keep %s: problems %q changelog %v, want %q %v", c.p.Keep, got, c.p.ProducesChangelog(), c.want, c.changelog)
		}
	}
}

// TestDedupLastSerializer: keep: last's row serializer writes the bytes
// state.JSONSerializer wrote (name "json"), so checkpoints written before
// it restore and the other way round, and its Copy is Decode(Append(v))
// (nil and empty values, headers or none) sharing no memory with v.
func TestDedupLastSerializer(t *testing.T) {
	old := state.JSONSerializer[dedupLastRow]{}
	ser := dedupLastSerializer{}
	if ser.Name() != old.Name() {
		t.Fatalf("name %q, want %q", ser.Name(), old.Name())
	}
	rows := []dedupLastRow{
		{Value: []byte(`{"bid":1}`), TS: 7, Headers: []runtime.Header{{Key: "h", Value: []byte("x")}, {Key: "n"}, {Key: "e", Value: []byte{}}}},
		{Value: []byte{}, TS: 1, Headers: []runtime.Header{}},
		{TS: -3},
	}
	for i, v := range rows {
		c, err := ser.Copy(v, nil)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := old.Append(nil, v)
		got, _ := ser.AppendKept(nil, c)
		if string(got) != string(want) {
			t.Fatalf("row %d encodes as %s, want %s", i, got, want)
		}
		round, _ := old.Decode(want)
		if !reflect.DeepEqual(c, round) {
			t.Fatalf("row %d: Copy %#v, want the round trip's %#v", i, c, round)
		}
		if len(v.Value) > 0 && sameBytes(c.Value, v.Value) {
			t.Fatalf("row %d: Copy shares the value's memory", i)
		}
	}
	stored := []byte(`{"value":"eyJiaWQiOjF9","ts":7,"headers":[{"key":"h","value":"eA=="}]}`)
	v, err := ser.Decode(stored)
	if err != nil {
		t.Fatal(err)
	}
	if string(v.Value) != `{"bid":1}` || v.TS != 7 || len(v.Headers) != 1 || string(v.Headers[0].Value) != "x" {
		t.Fatalf("a row stored before decodes as %#v", v)
	}
}
