package operators

import (
	"fmt"
	"math/rand/v2"
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

// countingDedupRow counts the reads of keep-last's row state.
type countingDedupRow struct {
	state.ValueState[dedupLastRow]
	reads int
}

func (c *countingDedupRow) Value() (dedupLastRow, bool, error) {
	c.reads++
	return c.ValueState.Value()
}

// TestDedupLastKeyHintSkipsAbsentReads: the sync keep-last reads no state
// for a key that holds no row (100 new keys: 0 reads; fails without the
// hint: 100), reads every key that holds one, and rebuilds the hint from
// the state at Open after a restore (keys 50..149: 50 reads, for the
// restored keys 50..99); the changelog is the same as without a hint.
// Both backends.
func TestDedupLastKeyHintSkipsAbsentReads(t *testing.T) {
	recs := func(from, to int, ms int64) []runtime.Record {
		var out []runtime.Record
		for i := from; i < to; i++ {
			out = append(out, runtime.Record{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("v%d-%d", i, ms)), Timestamp: time.UnixMilli(ms)})
		}
		return out
	}
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			d := NewDedupLast(DedupParams{Keep: DedupKeepLast})
			h, err := openStateful(t, kind, t.TempDir(), nil, nil, d)
			if err != nil {
				t.Fatal(err)
			}
			cnt := &countingDedupRow{ValueState: d.row}
			d.row = cnt
			h.feed(&recordErrors{}, recs(0, 100, 10)...)
			if cnt.reads != 0 {
				t.Fatalf("%d row reads for 100 new keys, want 0", cnt.reads)
			}
			got := h.emitted() // the harness's channel holds 256
			h.feed(&recordErrors{}, recs(0, 100, 20)...)
			if cnt.reads != 100 {
				t.Fatalf("%d row reads for 100 keys with a row, want 100", cnt.reads)
			}
			if got := keyedChangelog(append(got, h.emitted()...))["k7"]; !reflect.DeepEqual(got, []string{"+I v7-10@10ms", "-U v7-10@10ms", "+U v7-20@20ms"}) {
				t.Fatalf("k7's changelog %q", got)
			}
			d2 := NewDedupLast(DedupParams{Keep: DedupKeepLast})
			h2, err := openStateful(t, kind, t.TempDir(), nil, snapshotRestore(t, h), d2)
			if err != nil {
				t.Fatal(err)
			}
			cnt = &countingDedupRow{ValueState: d2.row}
			d2.row = cnt
			h2.feed(&recordErrors{}, recs(50, 150, 30)...)
			if cnt.reads != 50 {
				t.Fatalf("%d row reads after the restore, want 50 (keys k50..k99)", cnt.reads)
			}
			got = h2.finish()
			if g := keyedChangelog(got)["k60"]; !reflect.DeepEqual(g, []string{"-U v60-20@20ms", "+U v60-30@30ms"}) {
				t.Fatalf("restored k60's changelog %q", g)
			}
			if g := keyedChangelog(got)["k120"]; !reflect.DeepEqual(g, []string{"+I v120-30@30ms"}) {
				t.Fatalf("new k120's changelog %q", g)
			}
		})
	}
}

// TestDedupLastKeyHintModel: random keys, timestamps, restores and a hint
// that fills up (and is dropped) give the changelog of a model keeping
// each key's latest row; both backends, and the hint knows every key that
// holds a row whenever it is on.
func TestDedupLastKeyHintModel(t *testing.T) {
	for _, kind := range backends {
		for _, maxHint := range []int{dedupHintMaxKeys, 40} {
			t.Run(fmt.Sprintf("%s/max%d", kind, maxHint), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(7, uint64(maxHint)))
				model := map[string]int64{}
				kept := map[string]string{}
				newFn := func() *DedupLast {
					d := NewDedupLast(DedupParams{Keep: DedupKeepLast})
					d.maxHint = maxHint
					return d
				}
				d := newFn()
				h, err := openStateful(t, kind, t.TempDir(), nil, nil, d)
				if err != nil {
					t.Fatal(err)
				}
				hinted := false
				for round := range 6 {
					var in []runtime.Record
					var want []string
					for i := range 200 {
						k := fmt.Sprintf("k%d", rng.IntN(60))
						ms := int64(rng.IntN(50))
						v := fmt.Sprintf("%s-%d-%d", k, round, i)
						in = append(in, runtime.Record{Key: []byte(k), Value: []byte(v), Timestamp: time.UnixMilli(ms)})
						old, ok := model[k]
						switch {
						case !ok:
							want = append(want, k+" +I "+v)
						case ms >= old:
							want = append(want, k+" -U "+kept[k], k+" +U "+v)
						default:
							continue
						}
						model[k], kept[k] = ms, v
					}
					var got []string
					for i := 0; i < len(in); i += 50 { // at most 100 records out: the harness's channel holds 256
						h.feed(&recordErrors{}, in[i:i+50]...)
						for _, r := range h.emitted() {
							got = append(got, string(r.Key)+" "+r.Change.String()+" "+string(r.Value))
						}
					}
					if !reflect.DeepEqual(got, want) {
						t.Fatalf("round %d: changelog %q, want %q", round, got, want)
					}
					if d.hint != nil {
						hinted = true
						for k := range model {
							if !d.hint.mayHold([]byte(k)) {
								t.Fatalf("round %d: the hint says %s holds no row", round, k)
							}
						}
					}
					d = newFn()
					if h, err = openStateful(t, kind, t.TempDir(), nil, snapshotRestore(t, h), d); err != nil {
						t.Fatal(err)
					}
				}
				if (maxHint == 40) == (d.hint != nil) || !hinted && maxHint > 40 {
					t.Fatalf("hint %v at the end with max %d keys (60 keys held)", d.hint != nil, maxHint)
				}
				h.finish()
			})
		}
	}
}
