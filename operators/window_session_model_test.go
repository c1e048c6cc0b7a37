package operators

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/state"
)

// sessionModel is a reference of Flink's WindowOperator over session
// windows (MergingWindowSet, EventTimeTrigger, a count aggregate) for one
// key, kept as plainly as possible: a record's [t, t+gap) merges with
// every session it overlaps or touches (Flink's TimeWindow.intersects); the
// record is late when the merged session's end - 1ms + lateness is at or
// before the watermark (isWindowLate(mergedWindow)); a session whose end the
// watermark passed fires at once with its updated result; the watermark
// fires due sessions in start order and removes those past the lateness.
type sessionModel struct {
	gap, late int64
	wm        int64
	sessions  []modelSession
	fired     int
}

type modelSession struct {
	start, end, n int64
	fired         bool
}

func (m *sessionModel) result(s modelSession) string {
	f := func(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano) }
	return fmt.Sprintf(`{"key":"a","window_start":"%s","window_end":"%s","n":%d}`, f(s.start), f(s.end), s.n)
}

// record returns what a record at t emits and whether it is late.
func (m *sessionModel) record(t int64) (emitted []string, late bool) {
	start, end := t, t+m.gap
	var keep, parts []modelSession
	for _, s := range m.sessions {
		if s.start <= t+m.gap && s.end >= t {
			parts = append(parts, s)
			start, end = min(start, s.start), max(end, s.end)
		} else {
			keep = append(keep, s)
		}
	}
	if end-1+m.late <= m.wm {
		return nil, true
	}
	merged := modelSession{start: start, end: end, n: 1}
	for _, p := range parts {
		merged.n += p.n
		if len(parts) == 1 && p.start == start && p.end == end {
			merged.fired = p.fired
		}
	}
	if end-1 <= m.wm {
		if !merged.fired {
			m.fired++
		}
		merged.fired = true
		emitted = append(emitted, m.result(merged))
	}
	m.sessions = append(keep, merged)
	return emitted, false
}

// watermark advances the watermark to wm and returns what fires.
func (m *sessionModel) watermark(wm int64) []string {
	m.wm = wm
	slices.SortFunc(m.sessions, func(a, b modelSession) int { return int(a.start - b.start) })
	var out []string
	var keep []modelSession
	for _, s := range m.sessions {
		if s.end-1 <= wm && !s.fired {
			out = append(out, m.result(s))
			s.fired = true
			m.fired++
		}
		if s.end-1+m.late > wm {
			keep = append(keep, s)
		}
	}
	m.sessions = keep
	return out
}

// TestSessionWindowModel drives the session window with random records
// (in order, out of order, late, extending, bridging and falling inside
// fired sessions) and watermarks, and compares every emitted result, every
// late record, the windows-fired counter and the open-windows gauge with
// sessionModel after every step; after a final watermark past everything,
// no entry (window or timer) is left in state. Both backends.
func TestSessionWindowModel(t *testing.T) {
	const gap, lateness = 30 * sec, 20 * sec
	for _, kind := range []string{state.KindHashmap, state.KindPebble} {
		for seed := uint64(1); seed <= 6; seed++ {
			t.Run(fmt.Sprintf("%s/seed%d", kind, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 22))
				p := WindowParams{Kind: Session, Gap: gap * time.Millisecond, Time: WindowEventTime, AllowedLateness: lateness * time.Millisecond,
					Aggregates: []AggregateSpec{{Name: "n", Fn: AggCount}}}
				o := newObservedWindow(t, p)
				h := newWindowHarnessOf(t, kind, t.TempDir(), nil, o.w, true)
				m := &sessionModel{gap: gap, late: lateness, wm: -1 << 62}
				wm := int64(1000 * sec)
				if got, want := h.wm(wm), m.watermark(wm); !slices.Equal(got, want) {
					t.Fatalf("first watermark: %q, want %q", got, want)
				}
				lateWant := 0
				for step := range 300 {
					if rng.IntN(3) == 0 {
						wm += rng.Int64N(40 * sec)
						if got, want := h.wm(wm), m.watermark(wm); !slices.Equal(got, want) {
							t.Fatalf("step %d: watermark %d emitted\n%q\nwant\n%q", step, wm, got, want)
						}
					} else {
						ts := wm - 120*sec + rng.Int64N(320*sec)
						if rng.IntN(2) == 0 {
							ts -= ts % sec // whole seconds: sessions that touch
						}
						h.process(ev("a", ts))
						want, late := m.record(ts)
						if got := values(h.emitted()); !slices.Equal(got, want) {
							t.Fatalf("step %d: record at %d (watermark %d) emitted\n%q\nwant\n%q", step, ts, wm, got, want)
						}
						if late {
							lateWant++
						}
						if got := len(h.lateValues()); got != btoi(late) {
							t.Fatalf("step %d: record at %d (watermark %d): %d late records, want late=%v", step, ts, wm, got, late)
						}
					}
					if f, n := metricOf(t, o.m.WindowsFired("w")), metricOf(t, o.m.WindowsOpen("w", 0)); f != float64(m.fired) || n != float64(len(m.sessions)) {
						t.Fatalf("step %d: fired %v, open %v; want %d and %d", step, f, n, m.fired, len(m.sessions))
					}
				}
				if lateWant == 0 || m.fired == 0 {
					t.Fatalf("the run had %d late records and %d fired sessions: not a test of either", lateWant, m.fired)
				}
				wm += 1000 * sec
				if got, want := h.wm(wm), m.watermark(wm); !slices.Equal(got, want) {
					t.Fatalf("final watermark emitted\n%q\nwant\n%q", got, want)
				}
				if n, g := h.entries(), metricOf(t, o.m.WindowsOpen("w", 0)); n != 0 || g != 0 {
					t.Fatalf("%d entries (windows and timers), open windows %v after the final watermark; want 0 and 0", n, g)
				}
				h.finish()
			})
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
