package operators

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
)

// rawBreakValues are record values that attack the joins' raw select
// (joinOutput.rawValue): duplicate keys, huge integers, -0, escapes,
// nested values as selected fields, invalid JSON (which must reach the
// evaluated select, and its error, exactly as before), invalid UTF-8, a
// JSON null, a non-object and whitespace.
var rawBreakValues = []string{
	`{"id":%[1]d,"x":2}`,
	`{"id":1,"id":%[1]d,"x":3}`,
	`{"id":%[1]d,"x":2,"id":"s"}`,
	`{"id":%[1]d,"x":-%[1]d}`,
	`{ "id" : %[1]d ,	"x" : [%[1]d] }`,
	`{"x":"x%[1]d","id":-%[1]d}`,
	`{"id":123456789012345678901234,"x":%[1]d}`,
	`{"id":999999999999999999,"x":-999999999999999999}`,
	`{"id":9223372036854775807,"x":9223372036854775808}`,
	`{"id":-0,"x":-0}`,
	`{"id":-0.0,"x":0e0}`,
	`{"id":1.0,"x":1e2}`,
	`{"id":"a\"b%[1]d","x":"\u00e9"}`,
	`{"id":"a\/b","x":"plain"}`,
	`{"i\u0064":7,"id":%[1]d,"x":1}`,
	`{"id":{"a":[1,{"b":null}]},"x":[1,2]}`,
	`{"id":true,"x":null}`,
	`{"id":false,"x":"é"}`,
	`{"x":1}`,
	`{}`,
	`[1,2]`,
	`null`,
	`"str"`,
	`17`,
	`{"id":%[1]d,"x":`,
	`{"id":%[1]d,"x":2}garbage`,
	`{"id":%[1]d,"x":2}}`,
	`not json`,
	"{\"id\":%[1]d,\"x\":\"\xff\"}",
	"{\"id\":\"\xc3\xa9\",\"x\":1}",
	`{"id":%[1]d,"x":2,"deep":` + strings.Repeat("[", 70) + "1" + strings.Repeat("]", 70) + `}`,
	`{"id":%[1]d,"x":2,"big":1e400}`,
	`{"id":%[1]d,"x":2,"n":` + strings.Repeat("9", 320) + `}`,
	// The last rawBreakNested have nested fields (a path's objects with a
	// repeated name, an escaped key, a non-object, an object value).
	`{"id":%[1]d,"x":2,"p":{"id":%[1]d,"n":"s"}}`,
	`{"id":%[1]d,"p":{"id":"a","id":%[1]d,"n":null}}`,
	`{"id":%[1]d,"p":{"i\u0064":%[1]d,"n":1}}`,
	`{"id":%[1]d,"p":{"id":%[1]d},"p":[%[1]d]}`,
	`{"id":%[1]d,"p":{"id":{"n":1},"n":-0}}`,
}

// rawBreakNested is how many of rawBreakValues, the last, have nested
// fields.
const rawBreakNested = 5

// rawBreakSelects are selects with a raw form for every join kind (the
// right row tested for null; one reading no left field, so a missing
// left row goes through the raw path too; nested fields) and one without
// (control); the window ones read window_join's own fields (window_start,
// window_end) and run on window_join only.
var rawBreakSelects = []struct {
	src    string
	inner  bool // reads the right row without a null test: inner joins only
	window bool // reads window_start or window_end: window_join only
}{
	{`{"l": left.id, "r": right == null ? null : right.id, "x": left.x, "y": null == right ? null : right.x}`, false, false},
	{`{"r": right == null ? null : right.id, "y": right != null ? right.x : null}`, false, false},
	{`{"z": right.x, "a": left.id, "b": right.id, "c": left.id}`, true, false},
	{`{"l": left.p.id, "n": left.p.n, "r": right == null ? null : right.p.id}`, false, false},
	{`{"id": left.p.id, "name": left.p.n, "starttime": window_start}`, false, true},
	{`{"e": window_end, "s": window_start, "r": right == null ? null : right.id, "x": left.x}`, false, true},
	{`{"z": right.x, "e": window_end}`, true, true},
}

// rawBreakInput is one input record of the attack: its side, key, time
// and value (index into rawBreakValues), whether it is a text record,
// whether its source marked it checked JSON, and whether it is sent on
// both sides (a self-join: left and right read the same topic).
type rawBreakInput struct {
	side, key, v int
	id           int // the value's number (%[1]d in it)
	ts           int64
	text, mark   bool
	both         bool
	wm           int64 // > 0: a watermark instead
	change       runtime.ChangeKind
}

// rawBreakInputs returns n random inputs (and watermarks) of seed:
// retractions of earlier inserts when changes; when nested, half of the
// values are of the last rawBreakNested (nested fields).
func rawBreakInputs(seed uint64, n int, changes, nested bool) []rawBreakInput {
	rng := rand.New(rand.NewPCG(seed, 42))
	var in []rawBreakInput
	maxTS := int64(0)
	for i := range n {
		ts := int64(10_000 + i*50 + rng.IntN(2_000))
		e := rawBreakInput{side: rng.IntN(2), key: rng.IntN(3), v: rng.IntN(len(rawBreakValues)), ts: ts,
			text: rng.IntN(25) == 0, mark: rng.IntN(2) == 0, both: rng.IntN(4) == 0, change: runtime.ChangeInsert}
		if rng.IntN(3) > 0 {
			e.v = rng.IntN(6)              // mostly values with a raw form
			if nested && rng.IntN(4) > 0 { // or with nested fields
				e.v = len(rawBreakValues) - 1 - rng.IntN(rawBreakNested)
			}
		}
		e.id = i + 1
		if changes && i > 10 && rng.IntN(4) == 0 {
			// A retraction of an earlier insert (its side, key and value).
			p := in[rng.IntN(len(in))]
			for p.wm > 0 || p.change != runtime.ChangeInsert {
				p = in[rng.IntN(len(in))]
			}
			p.change = []runtime.ChangeKind{runtime.ChangeDelete, runtime.ChangeUpdateBefore}[rng.IntN(2)]
			e = p
			e.ts = ts
		}
		in = append(in, e)
		maxTS = max(maxTS, ts)
		if i%9 == 8 {
			in = append(in, rawBreakInput{wm: maxTS - 1_500})
		}
	}
	return append(in, rawBreakInput{wm: maxTS + 1_000_000})
}

// runRawBreak sends inputs to the join h drives, the records' values in
// one buffer overwritten after each record (as a source reusing its
// fetch buffer), and returns its outputs ("change key ts value", in
// order) and each record's error; clk, when not nil, is the state TTL's
// clock, stepped 300ms before each input so rows expire between pairs.
func runRawBreak(t *testing.T, h *joinHarness, inputs []rawBreakInput, clk *stepClock) []string {
	t.Helper()
	var got []string
	for _, e := range inputs {
		if clk != nil {
			clk.ns.Add(int64(300 * time.Millisecond))
		}
		got = append(got, runRawBreakOne(h, e)...)
	}
	h.finish()
	return append(got, rawBreakLines(h.emitted())...)
}

// rawBreakLines renders records as "change key ts value".
func rawBreakLines(recs []runtime.Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, fmt.Sprintf("%s %s %d %s", r.Change, r.Key, r.Timestamp.UnixMilli(), r.Value))
	}
	return out
}

// rawBreakSame fails t unless got equals want line for line.
func rawBreakSame(t *testing.T, what string, got, want []string) {
	t.Helper()

	if !slices.Equal(got, want) {
		for i := range max(len(got), len(want)) {
			var g, w string
			if i < len(got) {
				g = got[i]
			}
			if i < len(want) {
				w = want[i]
			}
			if g != w {
				t.Fatalf("%s: the raw select's output differs from the evaluated select's at line %d of %d/%d:\n got %s\nwant %s", what, i, len(got), len(want), g, w)
			}
		}
	}
}

// TestJoinsRawSelectEqualsEvalThroughOperators runs interval_join (both
// layouts), the regular join (with and without state_ttl, with -D and -U
// retractions) and window_join over the same random inputs twice, with
// the raw select and with select always evaluated (joinOutput.noRaw), for
// every join kind on both backends, and wants the same outputs, change
// kinds and errors in the same order. The inputs attack the raw path:
// self-joined records (each sent on both sides: a row paired with
// itself), records pairing with many rows, values overwritten in the
// source's buffer after each record, unmarked invalid JSON, text records,
// and rawBreakValues. The raw select must have written some outputs of
// each join (else the comparison tests nothing); window_join passes its
// window_start and window_end as extra fields, which the raw select
// writes when select reads them.
func TestJoinsRawSelectEqualsEvalThroughOperators(t *testing.T) {
	kinds := []JoinKind{JoinInner, JoinLeftOuter, JoinRightOuter, JoinFullOuter}
	for si, s := range rawBreakSelects {
		sel := compiled(t, s.src)
		nested := strings.Contains(s.src, ".p.") // more values with nested fields
		for _, backend := range backends {
			for _, kind := range kinds {
				if s.inner && kind != JoinInner {
					continue
				}
				name := fmt.Sprintf("sel%d/%s/%s", si, backend, kind)
				t.Run("window/"+name, func(t *testing.T) {
					inputs := rawBreakInputs(uint64(si*7+5), 120, false, nested)
					run := func(noRaw bool) ([]string, int) {
						h, j := newWindowJoinHarness(t, backend, t.TempDir(), nil, WindowJoinParams{Kind: Tumbling, Size: 3 * time.Second, Join: kind, Select: sel})
						j.output.noRaw = noRaw
						return runRawBreak(t, h, inputs, nil), j.output.rawHits
					}
					want, _ := run(true)
					got, hits := run(false)
					rawBreakSame(t, "window join", got, want)
					if hits == 0 {
						t.Fatalf("the raw select wrote none of %d outputs", len(got))
					}
				})
				if s.window {
					continue // reads window_join's own fields
				}
				t.Run("interval/"+name, func(t *testing.T) {
					inputs := rawBreakInputs(uint64(si*7+1), 160, false, nested)
					for _, spill := range []int{intervalJoinSpillRows, 2} {
						run := func(noRaw bool) ([]string, int) {
							j := NewIntervalJoin(IntervalJoinParams{Lower: -3 * time.Second, Upper: 2 * time.Second, Join: kind, Select: sel})
							j.spillRows, j.output.noRaw = spill, noRaw
							h := newJoinHarnessFunc(t, backend, t.TempDir(), nil, j, j)
							return runRawBreak(t, h, inputs, nil), j.output.rawHits
						}
						want, _ := run(true)
						got, hits := run(false)
						rawBreakSame(t, fmt.Sprintf("spill %d", spill), got, want)
						if hits == 0 {
							t.Fatalf("spill %d: the raw select wrote none of %d outputs", spill, len(got))
						}
					}
				})
				for _, ttl := range []time.Duration{0, 2 * time.Second} {
					t.Run(fmt.Sprintf("regular/ttl%v/%s", ttl, name), func(t *testing.T) {
						inputs := rawBreakInputs(uint64(si*7+3), 120, true, nested)
						run := func(noRaw bool) ([]string, int) {
							j := NewRegularJoin(JoinParams{Join: kind, StateTTL: StateTTLParams{TTL: ttl}, Select: sel})
							j.output.noRaw = noRaw
							clk := newStepClock()
							h := &joinHarness{harness: &harness{t: t, mb: runtime.NewMailbox(), ch: runtime.NewChannel(1 << 16), ctx: context.Background()},
								late: runtime.NewChannel(16)}
							out := runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{h.ch}, runtime.ForwardPartitioner{}))
							var open BackendOpener = opener(backend, t.TempDir())
							if ttl > 0 {
								open = clockOpener(backend, t.TempDir(), clk)
							}
							h.op = NewKeyedCoProcessOperator(OpenContext{Operator: "join", Parallelism: 1}, open, nil, j, out)
							h.op.SetMailbox(h.mb)
							if err := h.op.Open(h.ctx); err != nil {
								t.Fatal(err)
							}
							return runRawBreak(t, h, inputs, clk), j.output.rawHits
						}
						want, _ := run(true)
						got, hits := run(false)
						rawBreakSame(t, "regular join", got, want)
						if hits == 0 {
							t.Fatalf("the raw select wrote none of %d outputs", len(got))
						}
						if !slices.ContainsFunc(got, func(l string) bool { return strings.HasPrefix(l, runtime.ChangeDelete.String()+" ") }) {
							t.Fatalf("no -D output: the retractions were not exercised")
						}
					})
				}
			}
		}
	}
}

// rawBreakBuf is the source buffer runRawBreakOne reuses for every
// record (tests in this package do not run in parallel).
var rawBreakBuf []byte

// runRawBreakOne is runRawBreak for one input, without finishing.
func runRawBreakOne(h *joinHarness, e rawBreakInput) []string {
	var got []string
	drain := func() { got = append(got, rawBreakLines(h.emitted())...) }
	if e.wm > 0 {
		if err := h.op.ProcessWatermark(h.ctx, time.UnixMilli(e.wm)); err != nil {
			got = append(got, fmt.Sprintf("watermark error: %v", err))
		}
		drain()
		return got
	}
	sides := []int{e.side}
	if e.both {
		sides = []int{0, 1}
	}
	for _, side := range sides {
		buf := fmt.Appendf(rawBreakBuf[:0], rawBreakValues[e.v], e.id)
		rawBreakBuf = buf
		rec := runtime.Record{Key: []byte(fmt.Sprint("k", e.key)), Value: buf, Timestamp: time.UnixMilli(e.ts), Change: e.change}
		if e.text {
			rec.Format = runtime.FormatText
		}
		if e.mark && !e.text && json.Valid(rec.Value) {
			rec.SetDecoded(runtime.ValidJSON{})
		}
		if err := h.op.ProcessRecord(h.ctx, side, rec); err != nil {
			got = append(got, fmt.Sprintf("record side %d error: %v", side, err))
		}
		for k := range buf {
			buf[k] = 'X'
		}
		drain()
	}
	return got
}
