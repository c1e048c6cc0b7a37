package operators

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// windowModel is a brute-force model of tumbling and sliding windows with
// no allowed lateness: per key and window start the values folded in;
// a window fires (and goes) when the watermark reaches its end - 1 ms.
type windowModel struct {
	size, slide int64
	wins        map[string]map[int64][]windowModelRec
	late        int
}

type windowModelRec struct {
	v   int64
	tag string
}

// starts returns the starts of the windows containing t (slide 0: tumbling).
func (m *windowModel) starts(t int64) []int64 {
	if m.slide == 0 {
		return []int64{floorMod(t, m.size)}
	}
	var out []int64
	for s := floorMod(t, m.slide); s > t-m.size; s -= m.slide {
		out = append(out, s)
	}
	return out
}

func (m *windowModel) record(key string, t int64, r windowModelRec, wm int64) {
	live := false
	for _, s := range m.starts(t) {
		if s+m.size-1 > wm {
			live = true
			if m.wins[key] == nil {
				m.wins[key] = map[int64][]windowModelRec{}
			}
			m.wins[key][s] = append(m.wins[key][s], r)
		}
	}
	if !live {
		m.late++
	}
}

// watermark returns the results of the windows wm closes, computed from
// their values.
func (m *windowModel) watermark(wm int64) []string {
	var out []string
	for key, ws := range m.wins {
		for s, rs := range ws {
			if s+m.size-1 > wm {
				continue
			}
			sum, lo, hi := int64(0), rs[0].v, rs[0].v
			tags := map[string]bool{}
			for _, r := range rs {
				sum += r.v
				lo, hi = min(lo, r.v), max(hi, r.v)
				tags[r.tag] = true
			}
			avg := appendFloat(nil, float64(sum)/float64(len(rs)))
			out = append(out, fmt.Sprintf(`{"key":%q,"window_start":%q,"window_end":%q,"n":%d,"s":%d,"lo":%d,"hi":%d,"a":%s,"d":%d}`,
				key, time.UnixMilli(s).UTC().Format(time.RFC3339Nano), time.UnixMilli(s+m.size).UTC().Format(time.RFC3339Nano),
				len(rs), sum, lo, hi, avg, len(tags)))
			delete(ws, s)
		}
	}
	return out
}

// TestWindowRandomModel: tumbling and sliding event-time windows with
// every incremental aggregate (count, sum, min, max, avg) and
// count_distinct, over records out of time order (some late, to the late
// output), watermarks closing windows and a snapshot restored in the
// middle, emit exactly the results of a brute-force model that keeps
// every record of a window and aggregates it when it closes; on both
// backends (Pebble keeps the accumulators decoded in its write cache), and
// no state is left at the end.
func TestWindowRandomModel(t *testing.T) {
	aggs := func(t *testing.T) []AggregateSpec {
		return []AggregateSpec{{Name: "n", Fn: AggCount}, {Name: "s", Fn: AggSum, Of: compiled(t, "v")},
			{Name: "lo", Fn: AggMin, Of: compiled(t, "v")}, {Name: "hi", Fn: AggMax, Of: compiled(t, "v")},
			{Name: "a", Fn: AggAvg, Of: compiled(t, "v")}, {Name: "d", Fn: AggCountDistinct, Of: compiled(t, "tag")}}
	}
	for _, shape := range []struct {
		name        string
		size, slide int64
	}{{"tumbling", 100, 0}, {"sliding", 300, 100}} {
		for _, kind := range backends {
			t.Run(shape.name+"/"+kind, func(t *testing.T) {
				p := WindowParams{Kind: Tumbling, Size: time.Duration(shape.size) * time.Millisecond, Time: WindowEventTime, Aggregates: aggs(t)}
				if shape.slide > 0 {
					p.Kind, p.Slide = Sliding, time.Duration(shape.slide)*time.Millisecond
				}
				rng := rand.New(rand.NewPCG(7, uint64(shape.size)))
				m := &windowModel{size: shape.size, slide: shape.slide, wins: map[string]map[int64][]windowModelRec{}}
				h := newWindowHarness(t, kind, t.TempDir(), nil, p)
				var got, want []string
				late := 0 // records on the late output
				ts, maxTS, wm := int64(1_000_000), int64(0), int64(0)
				for i := range 3000 {
					if i == 1500 {
						got = append(got, values(h.emitted())...)
						late += len(h.lateValues())
						r := snapshotRestore(t, h.harness)
						h = newWindowHarness(t, kind, t.TempDir(), r, p)
						if err := h.op.ProcessWatermark(h.ctx, time.UnixMilli(wm)); err != nil {
							t.Fatal(err)
						}
					}
					ts += rng.Int64N(5)
					at := ts - rng.Int64N(60)*int64(rng.IntN(2))
					if rng.IntN(40) == 0 {
						at -= 400 // behind every window of the sliding shape
					}
					key := "k" + strconv.Itoa(rng.IntN(5))
					r := windowModelRec{v: rng.Int64N(2000) - 700, tag: "t" + strconv.Itoa(rng.IntN(9))}
					m.record(key, at, r, wm)
					h.process(runtime.Record{Key: []byte(key), Value: fmt.Appendf(nil, `{"v":%d,"tag":%q}`, r.v, r.tag), Timestamp: time.UnixMilli(at)})
					maxTS = max(maxTS, at)
					if i%25 == 24 {
						wm = max(wm, maxTS-rng.Int64N(40))
						want = append(want, m.watermark(wm)...)
						got = append(got, h.wm(wm)...)
						late += len(h.lateValues())
					}
				}
				want = append(want, m.watermark(1<<40)...)
				got = append(got, h.wm(1<<40)...)
				slices.Sort(got)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Fatalf("%d results, want %d; %s", len(got), len(want), firstDiff(got, want))
				}
				if n := h.entries(); n != 0 {
					t.Fatalf("%d entries left, want 0", n)
				}
				if late += len(h.lateValues()); late != m.late || late == 0 {
					t.Fatalf("%d records on the late output, want the model's %d (> 0)", late, m.late)
				}
				h.finish()
			})
		}
	}
}

// TestWindowEntrySerializer: the window state's serializer keeps entries
// decoded on Pebble (a state.HeapSerializer) and writes exactly the bytes
// state.JSONSerializer writes for the stored form (the accumulators as an
// object by aggregate name, as main's checkpoints hold them), under its
// name, so checkpoints of either read as before; decoding puts the
// accumulators in the order of the aggregates (absent ones zero, ones of
// unknown names dropped); Copy and View share nothing the caller changes,
// and Copy refuses a double JSON cannot hold, as Append does.
func TestWindowEntrySerializer(t *testing.T) {
	// Spec order differs from the names' byte order on purpose.
	specs := []AggregateSpec{{Name: "s", Fn: AggSum}, {Name: "n", Fn: AggCount}, {Name: "d", Fn: AggCountDistinct}, {Name: "f", Fn: AggFirst}, {Name: "a", Fn: AggAvg}}
	ser := windowStateOf(specs).ValueSerializer
	heap, ok := ser.(state.HeapSerializer[windowEntry])
	if !ok {
		t.Fatal("the window state's serializer is not a state.HeapSerializer")
	}
	if got, want := ser.Name(), (state.JSONSerializer[windowEntryJSON]{}).Name(); got != want {
		t.Fatalf("name %q, want %q", got, want)
	}
	stored := windowEntryJSON{End: 20, Fired: true, Acc: aggregateAccumulators{
		"s": {Fn: AggSum, Records: 2, Num: number{Big: new(big.Int).Lsh(big.NewInt(1), 70)}},
		"d": {Fn: AggCountDistinct, Records: 3, Distinct: 2, Seen: []string{`"a"`, `"b"`, `"<&>"`}},
		"f": {Fn: AggFirst, Records: 1, Value: json.RawMessage(`{"x":1}`)},
		"a": {Fn: AggAvg, Records: 1, Num: number{Float: 2.5, IsFloat: true}},
	}}
	for _, v := range []windowEntryJSON{stored, {End: 5}, {End: 5, Acc: aggregateAccumulators{}}} {
		want, _ := state.JSONSerializer[windowEntryJSON]{}.Append(nil, v)
		e, err := ser.Decode(want)
		if err != nil {
			t.Fatal(err)
		}
		if (e.Accs == nil) != (v.Acc == nil) {
			t.Fatalf("%s decoded with accumulators %v", want, e.Accs)
		}
		for i, s := range specs {
			if got, w := fmt.Sprint(accAt(e.Accs, i)), fmt.Sprint(v.Acc[s.Name]); got != w {
				t.Fatalf("%s: accumulator %s decoded as %s, want %s", want, s.Name, got, w)
			}
		}
		got, err := ser.Append(nil, e)
		if err != nil {
			t.Fatal(err)
		}
		kept, err := heap.Copy(e, nil)
		if err != nil {
			t.Fatal(err)
		}
		viaKept, _ := heap.AppendKept(nil, kept)
		if string(got) != string(want) || string(viaKept) != string(want) {
			t.Fatalf("bytes %s / kept %s, want %s", got, viaKept, want)
		}
	}
	// A stored accumulator of a name the operator no longer has is
	// dropped; one it lacks stays absent (Fn "").
	e, err := ser.Decode([]byte(`{"end":7,"acc":{"gone":{"fn":"count","records":4},"n":{"fn":"count","records":2}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := ser.Append(nil, e); string(got) != `{"end":7,"acc":{"n":{"fn":"count","records":2}}}` {
		t.Fatalf("re-encoded %s", got)
	}
	if e.Accs[0].Fn != "" || e.Accs[1].Records != 2 {
		t.Fatalf("decoded %+v", e.Accs)
	}
	want, _ := state.JSONSerializer[windowEntryJSON]{}.Append(nil, stored)
	e, _ = ser.Decode(want)
	kept, _ := heap.Copy(e, nil)
	view := heap.View(kept)
	view.Accs[0].Num.Big.SetInt64(1)
	view.Accs[2].Seen[0] = "changed"
	view.Accs[1] = aggAccumulator{Fn: AggCount, Records: 9}
	e.Accs[3].Value[2] = 'y'
	b, _ := heap.AppendKept(nil, kept)
	if string(b) != string(want) {
		t.Fatalf("kept entry changed through its view or the original:\n%s\nwant\n%s", b, want)
	}
	inf := windowEntry{End: 1, Accs: []aggAccumulator{{Fn: AggSum, Num: number{Float: math.Inf(1), IsFloat: true}}}}
	if _, err := ser.Append(nil, inf); err == nil {
		t.Fatal("Append of +Inf: no error")
	}
	if _, err := heap.Copy(inf, nil); err == nil {
		t.Fatal("Copy of +Inf: no error, want the error Append gives")
	}
}
