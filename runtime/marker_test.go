package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestMarkerEncoding encodes every marker kind and decodes it back, and
// refuses malformed markers with exact messages.
func TestMarkerEncoding(t *testing.T) {
	for _, tc := range []struct {
		m         Marker
		value     string
		timestamp int64 // ms; 0: the zero time
	}{
		{m: Marker{Kind: MarkerWatermark, Unit: "0/3", Watermark: time.UnixMilli(1700000000123)}, value: "1700000000123", timestamp: 1700000000123},
		{m: Marker{Kind: MarkerWatermark, Unit: "2/0", Watermark: time.UnixMilli(-5)}, value: "-5", timestamp: -5},
		{m: Marker{Kind: MarkerIdle, Unit: "0/11"}},
		{m: Marker{Kind: MarkerActive, Unit: "1/2"}},
		{m: Marker{Kind: MarkerEnd, Unit: "0/0"}},
	} {
		t.Run(string(tc.m.Kind)+"-"+tc.m.Unit, func(t *testing.T) {
			rec := tc.m.Record()
			if rec.Key != nil || string(rec.Value) != tc.value {
				t.Errorf("key %q value %q, want no key and %q", rec.Key, rec.Value, tc.value)
			}
			if len(rec.Headers) != 2 || rec.Headers[0].Key != "kstreamd-marker" || string(rec.Headers[0].Value) != string(tc.m.Kind) ||
				rec.Headers[1].Key != "kstreamd-unit" || string(rec.Headers[1].Value) != tc.m.Unit {
				t.Errorf("headers %+v", rec.Headers)
			}
			if (tc.timestamp == 0 && !rec.Timestamp.IsZero()) || (tc.timestamp != 0 && rec.Timestamp.UnixMilli() != tc.timestamp) {
				t.Errorf("timestamp %v, want %d ms", rec.Timestamp, tc.timestamp)
			}
			got, ok, err := DecodeMarker(rec.Headers, rec.Value)
			if err != nil || !ok || got.Kind != tc.m.Kind || got.Unit != tc.m.Unit || !got.Watermark.Equal(tc.m.Watermark) {
				t.Errorf("decoded %+v %v %v, want %+v", got, ok, err, tc.m)
			}
		})
	}
	if _, ok, err := DecodeMarker([]Header{{Key: "trace", Value: []byte("x")}}, []byte(`{"a":1}`)); ok || err != nil {
		t.Errorf("data record decoded as a marker: %v %v", ok, err)
	}
	for _, tc := range []struct {
		headers []Header
		value   string
		want    string
	}{
		{[]Header{{Key: MarkerHeader, Value: []byte("watermark")}}, "1", "runtime: watermark marker without a kstreamd-unit header"},
		{[]Header{{Key: MarkerHeader, Value: []byte("idle")}, {Key: MarkerUnitHeader}}, "", "runtime: idle marker without a kstreamd-unit header"},
		{[]Header{{Key: MarkerHeader, Value: []byte("watermark")}, {Key: MarkerUnitHeader, Value: []byte("0/1")}}, "12.5", `runtime: watermark marker of unit 0/1: value "12.5" is not an int64 of ms`},
		{[]Header{{Key: MarkerHeader, Value: []byte("pause")}, {Key: MarkerUnitHeader, Value: []byte("0/1")}}, "", `runtime: marker of unit 0/1: unknown kind "pause" (want watermark, idle, active or end)`},
	} {
		_, ok, err := DecodeMarker(tc.headers, []byte(tc.value))
		if !ok || err == nil || err.Error() != tc.want {
			t.Errorf("DecodeMarker(%v, %q) = %v, %v; want true, %q", tc.headers, tc.value, ok, err, tc.want)
		}
	}
}

// TestMarkerValve drives a valve over three upstream units and asserts
// what it emits after each marker: nothing before every unit was heard
// from, the minimum over the non-idle units, the idle status when all are
// idle, the current watermark again when one is active after that, and a
// restore from its checkpoint state that continues exactly where it was.
func TestMarkerValve(t *testing.T) {
	units := []string{"0/0", "0/1", "0/2"}
	type step struct {
		kind MarkerKind
		unit string
		at   int64  // watermark ms
		want string // emitted elements: "wm:<ms>" or "idle", comma-separated
	}
	steps := []step{
		{MarkerWatermark, "0/0", 100, ""},       // 0/1 and 0/2 not heard from
		{MarkerWatermark, "0/1", 50, ""},        // 0/2 not heard from
		{MarkerIdle, "0/2", 0, "wm:50"},         // heard from all: min(100, 50)
		{MarkerWatermark, "0/1", 120, "wm:100"}, // min(100, 120)
		{MarkerWatermark, "0/1", 110, ""},       // a unit never goes back
		{MarkerWatermark, "0/0", 200, "wm:120"}, // min(200, 120)
		{MarkerIdle, "0/0", 0, ""},              // min over non-idle {0/1: 120}
		{MarkerIdle, "0/1", 0, "wm:200,idle"},   // all idle: the largest, then idle
		{MarkerIdle, "0/1", 0, ""},              // reported once
		{MarkerActive, "0/1", 0, "wm:200"},      // active again (at 120 < 200): receivers count it again
		{MarkerWatermark, "0/1", 150, ""},       // below the emitted 200: no regression
		{MarkerWatermark, "0/2", 300, ""},       // 0/2 active at 300: min(150, 300) = 150
		{MarkerWatermark, "0/1", 250, "wm:250"}, // min(250, 300)
		{MarkerEnd, "0/1", 0, "wm:300"},         // an ended unit leaves the minimum
		{MarkerWatermark, "0/0", 310, ""},       // 0/0 active again: min(310, 300) = 300
		{MarkerIdle, "0/0", 0, ""},              // 0/2 still active at 300
		{MarkerIdle, "0/2", 0, "wm:310,idle"},   // all idle or ended: the largest (0/0's 310), then idle
		{MarkerWatermark, "0/2", 320, "wm:320"}, // a watermark is activity too
	}
	render := func(els []Element) string {
		var parts []string
		for _, el := range els {
			if el.Idle {
				parts = append(parts, "idle")
			} else {
				parts = append(parts, fmt.Sprintf("wm:%d", el.Watermark.UnixMilli()))
			}
		}
		return strings.Join(parts, ",")
	}
	v := NewMarkerValve(units)
	states := make([]MarkerValveState, len(steps))
	for i, s := range steps {
		els, err := v.Apply(Marker{Kind: s.kind, Unit: s.unit, Watermark: time.UnixMilli(s.at)})
		if err != nil {
			t.Fatalf("step %d %+v: %v", i, s, err)
		}
		if got := render(els); got != s.want {
			t.Fatalf("step %d %+v: emitted %q, want %q", i, s, got, s.want)
		}
		states[i] = v.State()
	}

	// The state of a few steps, exactly, through JSON as in a checkpoint.
	for _, tc := range []struct {
		after int
		want  string
	}{
		{0, `{"units":[{"unit":"0/0","watermark":100}]}`},
		{2, `{"current":50,"units":[{"unit":"0/0","watermark":100},{"unit":"0/1","watermark":50},{"unit":"0/2","idle":true}]}`},
		{7, `{"current":200,"idle":true,"units":[{"unit":"0/0","watermark":200,"idle":true},{"unit":"0/1","watermark":120,"idle":true},{"unit":"0/2","idle":true}]}`},
		{13, `{"current":300,"units":[{"unit":"0/0","watermark":200,"idle":true},{"unit":"0/1","watermark":250,"ended":true},{"unit":"0/2","watermark":300}]}`},
	} {
		raw, err := json.Marshal(states[tc.after])
		if err != nil || string(raw) != tc.want {
			t.Errorf("state after step %d: %s (%v), want %s", tc.after, raw, err, tc.want)
		}
	}

	// A valve restored from the state after step k emits what Restored
	// says, then continues as the original did from step k+1.
	for k := range steps {
		raw, _ := json.Marshal(states[k])
		var st MarkerValveState
		if err := json.Unmarshal(raw, &st); err != nil {
			t.Fatal(err)
		}
		r := NewMarkerValve(units)
		if err := r.Restore(st); err != nil {
			t.Fatalf("restore after step %d: %v", k, err)
		}
		wantRestored := ""
		if st.Current != nil {
			wantRestored = fmt.Sprintf("wm:%d", *st.Current)
		}
		if st.Idle {
			wantRestored = strings.TrimPrefix(wantRestored+",idle", ",")
		}
		if got := render(r.Restored()); got != wantRestored {
			t.Errorf("restored after step %d emits %q first, want %q", k, got, wantRestored)
		}
		for i := k + 1; i < len(steps); i++ {
			s := steps[i]
			els, err := r.Apply(Marker{Kind: s.kind, Unit: s.unit, Watermark: time.UnixMilli(s.at)})
			if err != nil {
				t.Fatalf("restored after step %d, step %d: %v", k, i, err)
			}
			if got := render(els); got != s.want {
				t.Fatalf("restored after step %d, step %d %+v: emitted %q, want %q", k, i, s, got, s.want)
			}
		}
	}

	// A fresh valve emits nothing on restore; units it does not expect are
	// refused naming them.
	if got := render(NewMarkerValve(units).Restored()); got != "" {
		t.Errorf("fresh valve emits %q on restore", got)
	}
	if _, err := NewMarkerValve(units).Apply(Marker{Kind: MarkerIdle, Unit: "0/3"}); err == nil ||
		err.Error() != "runtime: idle marker of unit 0/3, which is not one of the 3 upstream units expected (0/0..0/2)" {
		t.Errorf("unexpected unit: %v", err)
	}
	if err := NewMarkerValve(units).Restore(MarkerValveState{Units: []UpstreamStatus{{Unit: "0/7", Idle: true}}}); err == nil ||
		err.Error() != "runtime: restored state of upstream unit 0/7, which is not one of the 3 upstream units expected (0/0..0/2)" {
		t.Errorf("restore of an unexpected unit: %v", err)
	}
}

// TestMarkerValveAllIdleFromStart: units that only ever say idle are heard
// from but give no time: the valve emits the idle status, no watermark.
func TestMarkerValveAllIdleFromStart(t *testing.T) {
	v := NewMarkerValve([]string{"0/0", "0/1"})
	if els, _ := v.Apply(Marker{Kind: MarkerIdle, Unit: "0/0"}); len(els) != 0 {
		t.Fatalf("one of two idle: emitted %+v", els)
	}
	els, _ := v.Apply(Marker{Kind: MarkerIdle, Unit: "0/1"})
	if len(els) != 1 || !els[0].Idle {
		t.Fatalf("both idle: emitted %+v, want the idle status only", els)
	}
	if els, _ := v.Apply(Marker{Kind: MarkerActive, Unit: "0/1"}); len(els) != 0 {
		t.Fatalf("active without any time: emitted %+v, want nothing (its records reactivate the receivers)", els)
	}
	els, _ = v.Apply(Marker{Kind: MarkerWatermark, Unit: "0/1", Watermark: time.UnixMilli(7)})
	if len(els) != 1 || els[0].Idle || els[0].Watermark.UnixMilli() != 7 {
		t.Fatalf("first watermark: emitted %+v, want wm 7", els)
	}
}

// idleSink is a sink Operator (no output) that logs the watermarks and idle
// statuses the task hands it.
type idleSink struct {
	recorder
	log []string
}

func (o *idleSink) ProcessWatermark(_ context.Context, wm time.Time) error {
	o.log = append(o.log, fmt.Sprintf("wm:%d", wm.UnixMilli()))
	return nil
}
func (o *idleSink) ProcessIdle(context.Context) error { o.log = append(o.log, "idle"); return nil }

// TestOperatorTaskIdleHandler: a task without output hands an IdleHandler
// the idle status each time every channel turned idle, after the watermark
// the idle status flushed (the largest any channel reached).
func TestOperatorTaskIdleHandler(t *testing.T) {
	a, b := NewChannel(1), NewChannel(1)
	wm := func(ms int64) Element { return Element{Kind: KindWatermark, Watermark: time.UnixMilli(ms)} }
	idle := Element{Kind: KindWatermark, Idle: true}
	op := &idleSink{}
	task := NewOperatorTask(OperatorTaskConfig{ID: TaskID{"repartition.1", 0}, Gate: NewInputGate([]InputChannel{{Ch: a}, {Ch: b}}), Operator: op, BootstrapInput: -1})
	done := make(chan error, 1)
	go func() { done <- task.Run(context.Background(), nil) }()
	// One element at a time: the next is sent once the task took the last.
	for i, s := range []struct {
		ch Channel
		el Element
	}{
		{b, wm(50)},
		{a, wm(10)}, // min(10, 50)
		{b, idle},   // min over a: 10
		{a, idle},   // all idle: flush to 50, then idle
		{a, rec("x")},
		{a, wm(30)}, // active again; 30 < 50
		{a, idle},   // all idle again: nothing to flush
		{a, Element{Kind: KindEndOfInput}},
		{b, Element{Kind: KindEndOfInput}},
	} {
		s.ch <- s.el
		deadline := time.Now().Add(time.Minute)
		for len(s.ch) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("step %d not taken", i)
			}
			time.Sleep(time.Millisecond)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if want := []string{"wm:10", "wm:50", "idle", "idle"}; !slices.Equal(op.log, want) {
		t.Errorf("handed %q, want %q", op.log, want)
	}
}
