package operators

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kstreamd/kstreamd/runtime"
)

// SideOutputReader is implemented by a Collector that knows whether a side
// output has readers (the Collector a KeyedOperator gives its function).
// An operator that must not lose what it writes to a side output asks it
// first: a side output no vertex reads drops every record
// (runtime.Output.HasSideWriters).
type SideOutputReader interface {
	// SideOutputRead reports whether a sink or an operator reads side
	// output output of this operator (input: "<operator>.<output>").
	SideOutputRead(output string) bool
}

// sideOutputRead reports whether out delivers records collected to side
// output output: out is a SideCollector and, when it can tell
// (SideOutputReader), a vertex reads that output.
func sideOutputRead(out Collector, output string) bool {
	if _, ok := out.(SideCollector); !ok {
		return false
	}
	if r, ok := out.(SideOutputReader); ok {
		return r.SideOutputRead(output)
	}
	return true
}

// lateLogEvery is the least time between two log lines of one subtask about
// dropped late records; the lines in between are counted in the next one.
const lateLogEvery = 10 * time.Second

// lateRecords disposes of the records an event-time operator subtask judges
// late (Flink's WindowOperator.sideOutput and its numLateRecordsDropped), so
// that none vanishes: each goes to the late side output when a vertex reads
// it, counted in kstreamd_operator_late_records_routed_total, or else is
// counted in kstreamd_operator_late_records_dropped_total and logged, at
// most one line per lateLogEvery (with the record's time, the watermark and
// how many were dropped since the last line). Used on the subtask
// goroutine only.
type lateRecords struct {
	operator string
	output   string // the side output tag, e.g. LateOutput
	routed   prometheus.Counter
	dropped  prometheus.Counter
	logger   *slog.Logger
	now      func() time.Time

	logged     time.Time // when the last line was written; zero: never
	suppressed int64     // drops since the last line that wrote none
}

// newLateRecords returns the late-record handler of one subtask of
// operator; m and logger may be nil (no metrics, no log), now is the
// clock that rate-limits the log. The counters start at 0, so the series
// exist before the first late record.
func newLateRecords(operator, output string, m *Metrics, logger *slog.Logger, now func() time.Time) *lateRecords {
	l := &lateRecords{operator: operator, output: output, logger: logger, now: now}
	if l.logger == nil {
		l.logger = slog.New(slog.DiscardHandler)
	}
	if m != nil {
		l.routed, l.dropped = m.LateRouted(operator), m.LateDropped(operator)
	}
	return l
}

// handle routes the late record rec to the side output or drops it,
// counting and logging as the type says; wm is the watermark it was judged
// against. It fails only when emitting fails (the job is cancelled).
func (l *lateRecords) handle(rec runtime.Record, wm time.Time, out Collector) error {
	if sideOutputRead(out, l.output) {
		if err := out.(SideCollector).CollectSide(l.output, rec); err != nil {
			return err
		}
		if l.routed != nil {
			l.routed.Inc()
		}
		return nil
	}
	if l.dropped != nil {
		l.dropped.Inc()
	}
	now := l.now()
	if !l.logged.IsZero() && now.Sub(l.logged) < lateLogEvery {
		l.suppressed++
		return nil
	}
	l.logger.Warn("dropped a late record: no sink or operator reads the late side output",
		"side_output", l.operator+"."+l.output, "record_time", rec.Timestamp.UTC(), "watermark", wm.UTC(),
		"origin", rec.Origin.String(), "dropped_since_last_line", l.suppressed)
	l.logged, l.suppressed = now, 0
	return nil
}
