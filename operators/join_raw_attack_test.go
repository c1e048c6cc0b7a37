package operators

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
)

// rawAttackSelects are selects aimed at the raw select's nested paths,
// the join's own fields (window_start, window_end and other plain
// identifiers, CEL's type names among them) and a field read twice.
var rawAttackSelects = []string{
	`{"a": left.p.q.r, "b": right == null ? null : right.p.q.r}`,
	`{"a": left.a.b, "s": window_start}`,
	`{"a": left.id, "b": left.id, "s": window_start, "s2": window_start, "e": window_end}`,
	`{"a": left.p.q, "b": left.p.q.r}`,
	`{"r": right.p.q.r, "e": window_end}`,
	`{"i": int, "l": left.id}`,
	`{"t": type, "l": left.id}`,
	`{"n": null_type, "s": window_start}`,
	`{"s": string, "e": window_end}`,
	`{"o": optional, "e": window_end}`,
	`{"u": __result__, "e": window_end}`,
}

// rawAttackValues are values with nested paths through duplicate keys at
// several levels, escaped keys deep down, arrays, null, a literal dotted
// key, integers at and past int64's edges and in non-canonical forms,
// and nesting around the raw select's depth limit.
var rawAttackValues = func() []string {
	v := []string{
		`{"a.b":1,"a":{"b":2},"id":3}`,
		`{"a":{"b":2},"a.b":1,"id":3}`,
		`{"a":{"b.c":1,"b":-0},"id":-0}`,
		`{"a":{"b":{"c":1}},"id":0}`,
		`{"p":{"q":{"r":"x","r":5}},"p":{"q":{"r":7}},"id":1}`,
		`{"p":{"q":{"r":7},"q":{"r":8}},"id":1}`,
		`{"p":{"q":{"r":7}},"p":{"q":{"r":8},"q":{"s":1}},"id":1}`,
		`{"p":{"q":{"\u0072":1}},"id":1}`,
		`{"p":{"q":{"r":1,"\u0073":2}},"id":1}`,
		`{"p":{"\u0071":{"r":1},"q":{"r":2}},"id":1}`,
		`{"p":{"q":{"r":1}},"p\u0000":2,"id":1}`,
		`{"p":null,"id":1}`,
		`{"p":{"q":null},"id":1}`,
		`{"p":[{"q":{"r":1}}],"id":1}`,
		`{"p":{"q":[1]},"id":1}`,
		`{"p":{},"id":1}`,
		`{"p":{"q":{}},"id":1}`,
		`{"p":{"q":{" r":1,"r ":2}},"id":1}`,
		`{ "p" : { "q" : { "r" : 1 } } , "id" : 1 }`,
		`{"p":{"q":{"r":9223372036854775807}},"id":-9223372036854775808}`,
		`{"p":{"q":{"r":999999999999999999}},"id":-999999999999999999}`,
		`{"p":{"q":{"r":1000000000000000000}},"id":-1000000000000000000}`,
		`{"p":{"q":{"r":0}},"id":-0}`,
		`{"p":{"q":{"r":-1}},"id":10}`,
		`{"p":{"q":{"r":+1}},"id":1}`,
		`{"p":{"q":{"r":00}},"id":1}`,
		`{"p":{"q":{"r":-00}},"id":1}`,
		`{"p":{"q":{"r":01}},"id":1}`,
		`{"p":{"q":{"r":1.0}},"id":1e0}`,
		`{"p":{"q":{"r":"a.b"}},"id":"\u0041"}`,
		`{"p":{"q":{"r":true,"r":false}},"id":null}`,
		`{"p":{"q":{"r":1}}}`,
		`{"p":"{\"q\":{\"r\":1}}","id":1}`,
	}
	// A path's value among deep nesting: the whole value 63 to 66 levels
	// deep, the selected field near the top or at the bottom.
	for d := 62; d <= 66; d++ {
		v = append(v,
			`{"id":1,"p":{"q":{"r":1}},"deep":`+strings.Repeat(`{"x":`, d)+"1"+strings.Repeat("}", d)+`}`,
			`{"id":1,"p":{"q":`+strings.Repeat(`{"r":`, d)+"1"+strings.Repeat("}", d)+`}}`,
			`{"id":1,"p":{"q":{"r":2,"z":`+strings.Repeat("[", d)+strings.Repeat("]", d)+`}}}`,
		)
	}
	return v
}()

// rawAttackExtras are extra fields as emit may be given them: the window
// join's, integers in edge forms, a repeated name with an object last,
// whitespace, a name select reads that is not the window's, none.
var rawAttackExtras = []string{
	`,"window_start":"2026-12-07T13:00:00Z","window_end":"2026-12-07T13:00:10Z"`,
	`,"window_start":-0,"window_end":0`,
	`,"window_start":9223372036854775807,"window_end":-999999999999999999`,
	`,"window_start":1,"window_start":{"a":1},"window_end":2`,
	`,"window_start":{"a":1},"window_start":1,"window_end":2`,
	`, "window_start" : "a" , "window_end" : "b" `,
	`,"int":5,"type":6,"null_type":7,"string":"s","optional":8,"__result__":9,"window_start":1,"window_end":2`,
	`,"window_start":"2026-12-07T13:00:00.5Z","window_end":"2026-12-07T13:00:10.5Z"`,
	`,"window_start":00,"window_end":1`,
	`,"window_start":"x"`,
	``,
}

// TestJoinsRawSelectAttack: for the attack selects, values and extra
// fields above, in every role of a window join's timer and the other
// joins' (checkWindowRawSelect; the extras varying between pairs of one
// output, which caches the last extra's fields), the raw select writes
// exactly what evaluating select writes; and it writes some of them
// (nested paths and own fields through the raw path).
func TestJoinsRawSelectAttack(t *testing.T) {
	hits := 0
	for _, src := range rawAttackSelects {
		if _, err := CompileExpression(src); err != nil {
			t.Logf("%s: no such select (%v)", src, err)
			continue
		}
		withRaw, eval := newJoinOutputs(t, src)
		for _, l := range rawAttackValues {
			for i, extra := range rawAttackExtras {
				r := rawAttackValues[(len(l)+i)%len(rawAttackValues)]
				hits += checkWindowRawSelect(t, withRaw, eval, l, r, false, extra)
			}
		}
	}
	if hits == 0 {
		t.Fatal("the raw select wrote none of the outputs")
	}
}

// rawNoteValues are values for the interval join's noted field
// (joinRow.rawAt): the field near the start, after a long padding (past
// rawAt's range), longer than rawLen holds, nested, non-canonical (not
// noted: written again), repeated, absent, and invalid JSON.
var rawNoteValues = []string{
	`{"p":{"id":%[1]d},"id":%[1]d}`,
	`{"pad":"` + strings.Repeat("z", 70_000) + `","id":%[1]d,"p":{"id":-%[1]d}}`,
	`{"id":"` + strings.Repeat("y", 300) + `%[1]d","p":{"id":"` + strings.Repeat("w", 254) + `"}}`,
	`{"id":-0,"p":{"id":00}}`,
	`{"id":-0,"p":{"id":-0}}`,
	`{"id":%[1]d,"id":7,"p":{"id":1,"id":%[1]d},"p":{"id":%[1]d}}`,
	`{"x":%[1]d}`,
	`{"id":%[1]d,"p":{"id":%[1]d}`,
	`{"id":"%[1]d","p":{"id":"\u0041"}}`,
}

// TestIntervalJoinRawNoteAttack runs interval_join with selects reading
// one field of each side (noted in the buffered row) over records whose
// value buffer is overwritten after each, self-joined (each record on
// both sides) or not, rows pairing many times and expiring, for every
// join kind, both backends and both layouts, with the raw select and
// with select evaluated, and wants the same outputs.
func TestIntervalJoinRawNoteAttack(t *testing.T) {
	selects := []string{
		`{"l": left.p.id, "r": right == null ? null : right.id}`,
		`{"r": right == null ? null : right.p.id, "l": left.id, "l2": left.id}`,
	}
	kinds := []JoinKind{JoinInner, JoinLeftOuter, JoinRightOuter, JoinFullOuter}
	for si, src := range selects {
		sel := compiled(t, src)
		for _, backend := range backends {
			for _, kind := range kinds {
				for _, spill := range []int{intervalJoinSpillRows, 2} {
					run := func(noRaw bool) ([]string, int) {
						j := NewIntervalJoin(IntervalJoinParams{Lower: -3 * time.Second, Upper: 2 * time.Second, Join: kind, Select: sel})
						j.spillRows, j.output.noRaw = spill, noRaw
						h := newJoinHarnessFunc(t, backend, t.TempDir(), nil, j, j)
						var got []string
						var buf []byte
						for i := range 150 {
							ts := int64(10_000 + i*100)
							sides := []int{i % 2}
							if i%3 == 0 {
								sides = []int{0, 1}
							}
							for _, side := range sides {
								buf = fmt.Appendf(buf[:0], rawNoteValues[(i*7+si)%len(rawNoteValues)], i+1)
								rec := runtime.Record{Key: []byte(fmt.Sprint("k", i%2)), Value: buf, Timestamp: time.UnixMilli(ts)}
								if i%4 == 0 && json.Valid(buf) {
									rec.SetDecoded(runtime.ValidJSON{})
								}
								if err := h.op.ProcessRecord(h.ctx, side, rec); err != nil {
									got = append(got, fmt.Sprintf("record %d side %d error: %v", i, side, err))
								}
								for k := range buf {
									buf[k] = 'X'
								}
								got = append(got, rawBreakLines(h.emitted())...)
							}
							if i%10 == 9 {
								if err := h.op.ProcessWatermark(h.ctx, time.UnixMilli(ts-2_500)); err != nil {
									got = append(got, fmt.Sprintf("watermark error: %v", err))
								}
								got = append(got, rawBreakLines(h.emitted())...)
							}
						}
						h.finish()
						return append(got, rawBreakLines(h.emitted())...), j.output.rawHits
					}
					want, _ := run(true)
					got, hits := run(false)
					rawBreakSame(t, fmt.Sprintf("select %d %s %s spill %d", si, backend, kind, spill), got, want)
					if hits == 0 {
						t.Fatalf("select %d %s %s spill %d: the raw select wrote none of %d outputs", si, backend, kind, spill, len(got))
					}
				}
			}
		}
	}
}
