package sink

import (
	"context"
	"fmt"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
)

// DefaultMarkerInterval is the default of MarkerConfig.Interval
// (cluster.marker_interval).
const DefaultMarkerInterval = 200 * time.Millisecond

// MarkerWriter is implemented by a TwoPhaseCommitter that writes markers
// (runtime.Marker) into every partition of its topic within the open
// transaction: KafkaTxnCommitter of a repartition sink.
type MarkerWriter interface {
	WriteMarker(ctx context.Context, m runtime.Marker) error
}

// MarkerConfig makes a KafkaCommitter the committer of the repartition sink of a
// cluster-mode unit that carries its event time across the exchange
// (invariant 4 of docs/scale-out.md, "Markers").
type MarkerConfig struct {
	// Unit names the writing unit: runtime.MarkerUnit(stage, index).
	Unit string
	// Interval bounds how often a watermark marker is written while the
	// watermark advances: at most one per Interval; the watermark held
	// back is written at the next advance after it, at the next barrier,
	// or before an idle marker. 0 writes every advance.
	Interval time.Duration
	// Clock returns the processing time; nil means time.Now.
	Clock func() time.Time
}

// markerState is what a repartition sink subtask wrote of its input's
// time. Only the subtask goroutine uses it.
type markerState struct {
	cfg     MarkerConfig
	w       MarkerWriter
	wm      time.Time // the input watermark last received; MinWatermark before
	written time.Time // the watermark last written; MinWatermark before
	at      time.Time // when it was written
	idle    bool      // the idle marker was written last
}

// EnableMarkers makes the committer write markers as cfg says; the
// TwoPhaseCommitter it wraps must implement MarkerWriter (else the error
// names the sink). Call it before the task runs.
func (s *KafkaCommitter) EnableMarkers(cfg MarkerConfig) error {
	w, ok := s.k.(MarkerWriter)
	if !ok {
		return fmt.Errorf("sink %s: markers need a committer that writes them (a repartition sink), not %T", s.name, s.k)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	s.markers = &markerState{cfg: cfg, w: w, wm: runtime.MinWatermark, written: runtime.MinWatermark}
	return nil
}

// ProcessWatermark is the sink's runtime.WatermarkHandler (the generic
// sink hands it the watermark): with markers, it writes a watermark marker when wm advanced (at most once per
// MarkerConfig.Interval), after an active marker if the idle marker was
// written last. Without markers it does nothing.
func (s *KafkaCommitter) ProcessWatermark(ctx context.Context, wm time.Time) error {
	m := s.markers
	if m == nil {
		return nil
	}
	if err := m.activate(ctx); err != nil {
		return err
	}
	m.wm = wm
	if now := m.cfg.Clock(); m.at.IsZero() || now.Sub(m.at) >= m.cfg.Interval {
		return m.writeWatermark(ctx, now)
	}
	return nil
}

// ProcessIdle is the sink's runtime.IdleHandler: with markers, it writes
// the watermark not yet written (if any), then an idle marker.
func (s *KafkaCommitter) ProcessIdle(ctx context.Context) error {
	m := s.markers
	if m == nil || m.idle {
		return nil
	}
	if err := m.flush(ctx); err != nil {
		return err
	}
	m.idle = true
	return m.w.WriteMarker(ctx, runtime.Marker{Kind: runtime.MarkerIdle, Unit: m.cfg.Unit})
}

// activate writes an active marker if the idle marker was written last.
func (m *markerState) activate(ctx context.Context) error {
	if !m.idle {
		return nil
	}
	m.idle = false
	return m.w.WriteMarker(ctx, runtime.Marker{Kind: runtime.MarkerActive, Unit: m.cfg.Unit})
}

// barrier writes, before the transaction is pre-committed, the watermark
// the interval held back: every transaction ends with the unit's latest
// watermark. An unchanged watermark is not written again (an earlier
// transaction carries it), so an epoch without input stays empty.
func (m *markerState) barrier(ctx context.Context) error {
	if m.idle {
		return nil
	}
	return m.flush(ctx)
}

// flush writes the last watermark received if it was not written yet.
func (m *markerState) flush(ctx context.Context) error {
	if m.wm.Equal(m.written) {
		return nil
	}
	return m.writeWatermark(ctx, m.cfg.Clock())
}

func (m *markerState) writeWatermark(ctx context.Context, now time.Time) error {
	if m.wm.Equal(m.written) {
		return nil
	}
	m.written, m.at = m.wm, now
	return m.w.WriteMarker(ctx, runtime.Marker{Kind: runtime.MarkerWatermark, Unit: m.cfg.Unit, Watermark: m.wm})
}
