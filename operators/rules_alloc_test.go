package operators

import (
	"bytes"
	"math/big"
	"math/rand/v2"
	"reflect"
	"testing"
)

// randomRuleWindow returns a summary with random fields of every kind the
// serializer writes (negative and 64-bit values, a newest slice or none,
// older slices in the summary or none, inline distinct inputs or none),
// without big numbers.
func randomRuleWindow(rng *rand.Rand) ruleWindow {
	v := func() int64 {
		switch rng.IntN(4) {
		case 0:
			return rng.Int64N(200) - 100
		case 1:
			return 1_700_000_000_000 + rng.Int64N(1_000_000)
		case 2:
			return -rng.Int64()
		}
		return rng.Int64()
	}
	in := func() [][]byte {
		var ins [][]byte
		for range rng.IntN(4) {
			ins = append(ins, bytes.Repeat([]byte("7"), 1+rng.IntN(200)))
		}
		return ins
	}
	w := ruleWindow{Shape: string(bytes.Repeat([]byte("s"), rng.IntN(300))), Fn: []AggregateFn{AggCount, AggSum, AggMax, AggCountDistinct}[rng.IntN(4)],
		WindowMs: v(), Slices: v(), Head: v(), Tail: v(), First: v(), N: v(), Floats: v(), Distinct: v(), DFront: v(), DBack: v(), DLen: v(),
		Ints: number{Int: v()}}
	if rng.IntN(3) > 0 {
		w.TailSlice = &ruleSlice{WindowMs: v(), N: v(), In: in(), Prev: v(), Next: v(), DPrev: v(), DNext: v(),
			HasPrev: rng.IntN(2) == 0, HasNext: rng.IntN(2) == 0, HasDPrev: rng.IntN(2) == 0, HasDNext: rng.IntN(2) == 0, InDeque: rng.IntN(2) == 0}
	}
	if w.TailSlice != nil && w.Tail > -1<<62 && rng.IntN(2) == 0 {
		// Older slices (format version 4), oldest first, below Tail.
		k := w.Tail
		for range 1 + rng.IntN(maxInlineSlices-1) {
			k -= 1 + rng.Int64N(1_000_000)
			s := &ruleSlice{WindowMs: v(), N: v(), In: in(), Prev: v(), Next: v(), HasPrev: rng.IntN(2) == 0, HasNext: true}
			w.Older = append([]inlineSlice{{K: k, S: s}}, w.Older...)
		}
	}
	if rng.IntN(2) == 0 {
		w.DInline = true
		for i := range rng.IntN(9) {
			w.DVals = append(w.DVals, distinctVal{V: string(rune('a'+i)) + string(bytes.Repeat([]byte("x"), rng.IntN(200))), N: v()})
		}
	}
	return w
}

// TestRuleStateSizeHints: the summary and slice serializers size their
// buffer exactly (one allocation, no slack the hashmap backend would keep)
// for summaries without big-number sums, and their bytes decode back to
// the same values; with big-number sums the buffer still holds them.
func TestRuleStateSizeHints(t *testing.T) {
	rng := rand.New(rand.NewPCG(39, 25))
	for i := range 2000 {
		w := randomRuleWindow(rng)
		b, err := ruleWindowSerializer{}.Append(nil, w)
		if err != nil {
			t.Fatal(err)
		}
		if h := ruleWindowSizeHint(&w); h != len(b) {
			t.Fatalf("summary %d: size hint %d, written %d bytes", i, h, len(b))
		}
		d, err := ruleWindowSerializer{}.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if again, _ := (ruleWindowSerializer{}).Append(nil, d); !bytes.Equal(again, b) {
			t.Fatalf("summary %d: round trip differs", i)
		}
		if w.TailSlice != nil {
			sb, _ := ruleSliceSerializer{}.Append(nil, *w.TailSlice)
			if h := ruleSliceSizeHint(w.TailSlice); h != len(sb) {
				t.Fatalf("slice %d: size hint %d, written %d bytes", i, h, len(sb))
			}
			if !reflect.DeepEqual(d.TailSlice.In, w.TailSlice.In) {
				t.Fatalf("slice %d: inputs %q, want %q", i, d.TailSlice.In, w.TailSlice.In)
			}
		}
		if len(d.Older) != len(w.Older) || d.DInline != w.DInline || !reflect.DeepEqual(d.DVals, w.DVals) {
			t.Fatalf("summary %d: %d older slices, inline %v, want %d, %v", i, len(d.Older), d.DInline, len(w.Older), w.DInline)
		}
		for j, o := range w.Older {
			ds, err := d.Older[j].slice()
			if err != nil || d.Older[j].K != o.K || !reflect.DeepEqual(*ds, *o.S) {
				t.Fatalf("summary %d: older slice %d: %d %+v (%v), want %d %+v", i, j, d.Older[j].K, ds, err, o.K, *o.S)
			}
		}
		w.Ints = number{Big: new(big.Int).Lsh(big.NewInt(int64(i)+1), 100)}
		w.FSum = new(big.Float).SetPrec(fsumPrec).SetFloat64(0.1)
		w.FSum.Add(w.FSum, new(big.Float).SetFloat64(1e300))
		b, err = ruleWindowSerializer{}.Append(nil, w)
		if err != nil {
			t.Fatal(err)
		}
		if h := ruleWindowSizeHint(&w); h < len(b) {
			t.Fatalf("summary %d with big sums: size hint %d below the %d bytes written", i, h, len(b))
		}
	}
}

// TestRuleStateAllocs: writing a summary with its newest slice is one
// allocation (it was seven: the buffer's growth and the slice's own
// buffer), and reading one with a newest slice of three inputs is four
// (the shape, the slice, its input list and one buffer for the inputs; it
// was seven: the fn and one per input besides); a decoded input is capped,
// so appending to it leaves the next one unchanged.
func TestRuleStateAllocs(t *testing.T) {
	w := ruleWindow{Shape: `["max","amount",["key"]]`, Fn: AggMax, WindowMs: 2_678_400_000, Slices: 3, Head: 1_700_000_000_000, Tail: 1_700_000_000_900,
		First: 1_700_000_000_000, N: 5, DFront: 1_700_000_000_000, DBack: 1_700_000_000_900, DLen: 2,
		TailSlice: &ruleSlice{WindowMs: 2_678_400_000, N: 3, In: [][]byte{[]byte("12"), []byte("985"), []byte("7")}, Prev: 1_700_000_000_500, HasPrev: true, InDeque: true,
			DPrev: 1_700_000_000_000, HasDPrev: true}}
	var b []byte
	// The race detector allocates for itself: the counts hold without it.
	if n := testing.AllocsPerRun(100, func() { b, _ = ruleWindowSerializer{}.Append(nil, w) }); n != 1 && !raceEnabled {
		t.Errorf("Append: %v allocations, want 1", n)
	}
	var d ruleWindow
	if n := testing.AllocsPerRun(100, func() { d, _ = ruleWindowSerializer{}.Decode(b) }); n != 4 && !raceEnabled {
		t.Errorf("Decode: %v allocations, want 4", n)
	}
	if d.Fn != AggMax || !reflect.DeepEqual(d.TailSlice.In, w.TailSlice.In) {
		t.Fatalf("decoded fn %q, inputs %q", d.Fn, d.TailSlice.In)
	}
	_ = append(d.TailSlice.In[0], '9', '9', '9')
	if string(d.TailSlice.In[1]) != "985" {
		t.Fatalf("an append to input 0 changed input 1 to %q", d.TailSlice.In[1])
	}
}
