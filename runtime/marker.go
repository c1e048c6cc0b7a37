package runtime

import (
	"fmt"
	"strconv"
	"time"
)

// Marker headers (docs/scale-out.md, "Markers"): a record of a cluster-mode
// repartition topic that carries MarkerHeader is a marker, never a data
// record; MarkerUnitHeader names the upstream unit that wrote it.
const (
	// MarkerHeader's value is the MarkerKind: "watermark", "idle", "active"
	// or "end".
	MarkerHeader = "kstreamd-marker"
	// MarkerUnitHeader's value is the writing unit, "<stage>/<unit>"
	// (decimal, e.g. "0/3").
	MarkerUnitHeader = "kstreamd-unit"
)

// MarkerKind is what a marker says of its upstream unit's event time.
type MarkerKind string

// Marker kinds.
const (
	// MarkerWatermark carries the unit's watermark: no later record of the
	// unit on this partition has an event time at or before it. The
	// record's value is the watermark in ms since the epoch as decimal
	// text (an int64, e.g. "1700000000000").
	MarkerWatermark MarkerKind = "watermark"
	// MarkerIdle says every input of the unit is idle (Flink's
	// WatermarkStatus.IDLE): it must not hold the receiver back.
	MarkerIdle MarkerKind = "idle"
	// MarkerActive says an input of the unit is active again after
	// MarkerIdle; its last watermark holds the receiver back again.
	MarkerActive MarkerKind = "active"
	// MarkerEnd says the unit will write nothing more (end of input). The
	// Kafka sources are unbounded, so no unit writes it today; a receiver
	// drops the unit from its minimum.
	MarkerEnd MarkerKind = "end"
)

// Marker is one marker of a repartition topic: what upstream unit Unit
// ("<stage>/<unit>") says of its event time. Watermark is meaningful for
// MarkerWatermark only.
type Marker struct {
	Kind      MarkerKind
	Unit      string
	Watermark time.Time
}

// MarkerUnit returns the name of unit index of stage: "<stage>/<index>".
func MarkerUnit(stage, index int) string {
	return strconv.Itoa(stage) + "/" + strconv.Itoa(index)
}

// Record encodes m as a record: no key, the value (the watermark's ms as
// decimal text for MarkerWatermark, empty otherwise), the headers
// MarkerHeader and MarkerUnitHeader in that order, and the Timestamp the
// watermark (else the zero time: the producer's clock).
func (m Marker) Record() Record {
	rec := Record{Headers: []Header{{Key: MarkerHeader, Value: []byte(m.Kind)}, {Key: MarkerUnitHeader, Value: []byte(m.Unit)}}, Value: []byte{}}
	if m.Kind == MarkerWatermark {
		rec.Value = strconv.AppendInt(nil, m.Watermark.UnixMilli(), 10)
		rec.Timestamp = m.Watermark
	}
	return rec
}

// DecodeMarker returns the marker rec is and true, or false when rec is a
// data record (no MarkerHeader). A record with MarkerHeader that is not a
// valid marker (unknown kind, no or empty MarkerUnitHeader, a watermark
// value that is not a decimal int64) is an error naming what is wrong: a
// repartition topic holds nothing else, so it is never passed on as data.
func DecodeMarker(headers []Header, value []byte) (Marker, bool, error) {
	var kind, unit []byte
	found, hasUnit := false, false
	for _, h := range headers {
		switch h.Key {
		case MarkerHeader:
			kind, found = h.Value, true
		case MarkerUnitHeader:
			unit, hasUnit = h.Value, true
		}
	}
	if !found {
		return Marker{}, false, nil
	}
	m := Marker{Kind: MarkerKind(kind), Unit: string(unit)}
	if !hasUnit || len(unit) == 0 {
		return m, true, fmt.Errorf("runtime: %s marker without a %s header", kind, MarkerUnitHeader)
	}
	switch m.Kind {
	case MarkerWatermark:
		ms, err := strconv.ParseInt(string(value), 10, 64)
		if err != nil {
			return m, true, fmt.Errorf("runtime: watermark marker of unit %s: value %q is not an int64 of ms", unit, value)
		}
		m.Watermark = time.UnixMilli(ms)
	case MarkerIdle, MarkerActive, MarkerEnd:
	default:
		return m, true, fmt.Errorf("runtime: marker of unit %s: unknown kind %q (want watermark, idle, active or end)", unit, kind)
	}
	return m, true, nil
}

// UpstreamStatus is what a MarkerValve knows of one upstream unit, as
// stored in a checkpoint (JSON).
type UpstreamStatus struct {
	// Unit is "<stage>/<unit>".
	Unit string `json:"unit"`
	// Watermark is the unit's last watermark, ms since the epoch; absent
	// before its first.
	Watermark *int64 `json:"watermark,omitempty"`
	// Idle: the unit's last status marker was MarkerIdle.
	Idle bool `json:"idle,omitempty"`
	// Ended: the unit wrote MarkerEnd.
	Ended bool `json:"ended,omitempty"`
}

// MarkerValveState is a MarkerValve's state in a checkpoint (JSON): every
// upstream unit heard from (a unit absent was not heard from yet), the
// watermark last emitted and whether the idle status was emitted last.
type MarkerValveState struct {
	// Current is the last watermark emitted, ms; absent before the first.
	Current *int64 `json:"current,omitempty"`
	// Idle: the idle status was emitted last.
	Idle bool `json:"idle,omitempty"`
	// Units are in the valve's order of upstream units.
	Units []UpstreamStatus `json:"units,omitempty"`
}

// MarkerValve is the per-upstream-unit watermark valve of a repartition
// source (invariant 4 of docs/scale-out.md): each expected upstream unit is
// a channel of a StatusWatermarkValve, so the emitted watermark is the
// minimum over the non-idle upstream units, an upstream unit not heard from
// (no watermark, no idle) holds it at MinWatermark (no watermark is emitted
// before every unit was heard from), and when every unit is idle the
// watermark becomes the largest any reached and the idle status is emitted.
// Not safe for concurrent use: it belongs to the source subtask goroutine.
type MarkerValve struct {
	valve   *StatusWatermarkValve
	units   []string
	index   map[string]int
	idleOut bool // the idle status was emitted last
}

// NewMarkerValve returns a valve over the upstream units named (each
// "<stage>/<unit>", MarkerUnit), none heard from yet.
func NewMarkerValve(units []string) *MarkerValve {
	v := &MarkerValve{valve: NewStatusWatermarkValve(len(units), nil), units: append([]string{}, units...), index: map[string]int{}}
	for i, u := range units {
		v.index[u] = i
	}
	return v
}

// Current returns the last watermark emitted, MinWatermark before any.
func (v *MarkerValve) Current() time.Time { return v.valve.Current() }

// Apply feeds marker m and returns what to emit downstream, in order: a
// watermark when the minimum advanced, the idle status when every upstream
// unit turned idle (or ended), the current watermark again when a unit is
// active again after the idle status was emitted (so receivers count this
// input again). A marker of a unit the valve does not expect is an error
// naming it (the upstream stage has another unit count).
func (v *MarkerValve) Apply(m Marker) ([]Element, error) {
	ch, ok := v.index[m.Unit]
	if !ok {
		return nil, fmt.Errorf("runtime: %s marker of unit %s, which is not one of the %d upstream units expected (%s..%s)", m.Kind, m.Unit, len(v.units), v.units[0], v.units[len(v.units)-1])
	}
	var out []Element
	emit := func(wm time.Time) {
		out = append(out, Element{Kind: KindWatermark, Watermark: wm})
		v.idleOut = false
	}
	reactivate := func() {
		if v.idleOut && v.valve.anyActive() && !v.valve.Current().Equal(MinWatermark) {
			emit(v.valve.Current())
		}
	}
	switch m.Kind {
	case MarkerWatermark:
		if wm, adv := v.valve.Watermark(ch, m.Watermark); adv {
			emit(wm)
		} else {
			reactivate()
		}
	case MarkerActive:
		v.valve.Active(ch)
		reactivate()
	case MarkerIdle:
		wm, adv, _ := v.valve.Idle(ch)
		if adv {
			emit(wm)
		}
	case MarkerEnd:
		if wm, adv := v.valve.Finish(ch); adv {
			emit(wm)
		}
	default:
		return nil, fmt.Errorf("runtime: marker of unit %s: unknown kind %q", m.Unit, m.Kind)
	}
	if !v.idleOut && !v.valve.anyActive() {
		out = append(out, Element{Kind: KindWatermark, Idle: true})
		v.idleOut = true
	}
	return out, nil
}

// State returns the valve's state for a checkpoint.
func (v *MarkerValve) State() MarkerValveState {
	st := MarkerValveState{Idle: v.idleOut}
	if c := v.valve.Current(); !c.Equal(MinWatermark) {
		ms := c.UnixMilli()
		st.Current = &ms
	}
	for i, u := range v.units {
		s := UpstreamStatus{Unit: u, Idle: v.valve.idle[i], Ended: v.valve.done[i]}
		if wm := v.valve.wm[i]; !wm.Equal(MinWatermark) {
			ms := wm.UnixMilli()
			s.Watermark = &ms
		}
		if s.Watermark == nil && !s.Idle && !s.Ended {
			continue // not heard from
		}
		st.Units = append(st.Units, s)
	}
	return st
}

// Restore replaces the valve's state with st (MarkerValve.State of an
// earlier run). A unit in st the valve does not expect is an error naming
// it; expected units absent from st are not heard from.
func (v *MarkerValve) Restore(st MarkerValveState) error {
	fresh := NewMarkerValve(v.units)
	for _, s := range st.Units {
		ch, ok := fresh.index[s.Unit]
		if !ok {
			return fmt.Errorf("runtime: restored state of upstream unit %s, which is not one of the %d upstream units expected (%s..%s)", s.Unit, len(v.units), v.units[0], v.units[len(v.units)-1])
		}
		if s.Watermark != nil {
			fresh.valve.wm[ch] = time.UnixMilli(*s.Watermark)
		}
		fresh.valve.idle[ch], fresh.valve.done[ch] = s.Idle, s.Ended
	}
	if st.Current != nil {
		fresh.valve.current = time.UnixMilli(*st.Current)
	}
	fresh.idleOut = st.Idle
	fresh.valve.allIdle = st.Idle
	*v = *fresh
	return nil
}

// Restored returns what a restored valve emits before anything else: its
// last watermark (if any) and then, if it was emitted last, the idle
// status, so the receivers start where they were.
func (v *MarkerValve) Restored() []Element {
	var out []Element
	if c := v.valve.Current(); !c.Equal(MinWatermark) {
		out = append(out, Element{Kind: KindWatermark, Watermark: c})
	}
	if v.idleOut {
		out = append(out, Element{Kind: KindWatermark, Idle: true})
	}
	return out
}
