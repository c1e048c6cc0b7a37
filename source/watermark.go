package source

import (
	"math"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
)

// WatermarkConfig configures a source's watermarks (Flink's
// WatermarkStrategy.forBoundedOutOfOrderness(...).withIdleness(...)).
type WatermarkConfig struct {
	// OutOfOrderness is how late a record may be, in event time, behind the
	// partition's largest timestamp: the partition's watermark is that
	// timestamp minus OutOfOrderness minus 1ms. Default 0.
	OutOfOrderness time.Duration
	// Idleness is how long a partition may go without a record before it
	// stops holding the subtask's watermark back; 0 means never.
	Idleness time.Duration
}

// noTimestamp marks a partition that has seen no record (and restored no
// timestamp).
const noTimestamp = math.MinInt64

// watermarks tracks the per-partition event time of one source subtask
// and computes its watermark: the minimum over its active partitions.
// Only the subtask goroutine uses it.
type watermarks struct {
	cfg WatermarkConfig
	// maxTs is the largest record timestamp per partition, in ms
	// (noTimestamp before any); lastSeen when the partition last had a
	// record (or was assigned), processing time.
	maxTs    map[int32]int64
	lastSeen map[int32]time.Time
	// seen are the partitions observed since the last seenAt, each once
	// per run of its records (a fetch hands them partition by partition):
	// their lastSeen is stamped once per fetch, not with a clock read per
	// record.
	seen    []int32
	emitted int64 // last watermark emitted, ms; noTimestamp before
	idle    bool  // the idle status was emitted last
}

func newWatermarks(cfg WatermarkConfig) *watermarks {
	return &watermarks{cfg: cfg, maxTs: map[int32]int64{}, lastSeen: map[int32]time.Time{}, emitted: noTimestamp}
}

// assign adds partition p with a restored max timestamp (noTimestamp for
// none) at processing time now.
func (w *watermarks) assign(p int32, maxTs int64, now time.Time) {
	w.maxTs[p] = maxTs
	w.lastSeen[p] = now
}

// observe records a record of partition p with timestamp ts; seenAt gives
// its processing time.
func (w *watermarks) observe(p int32, ts time.Time) {
	if ms := ts.UnixMilli(); ms > w.maxTs[p] {
		w.maxTs[p] = ms
	}
	if n := len(w.seen); n == 0 || w.seen[n-1] != p {
		w.seen = append(w.seen, p)
	}
}

// seenAt sets the processing time of the partitions observed since the
// last call to now: the source calls it after the records of one fetch,
// before next.
func (w *watermarks) seenAt(now time.Time) {
	for _, p := range w.seen {
		w.lastSeen[p] = now
	}
	w.seen = w.seen[:0]
}

// next returns the element to emit at processing time now, if any: a
// watermark when the minimum over the active partitions advanced, the idle
// status when every partition is idle (or there is none) and it was not
// emitted yet. A partition that has seen no record holds the watermark at
// its minimum until it goes idle.
func (w *watermarks) next(now time.Time) (runtime.Element, bool) {
	lowest, active := int64(math.MaxInt64), false
	for p, ts := range w.maxTs {
		if w.cfg.Idleness > 0 && now.Sub(w.lastSeen[p]) >= w.cfg.Idleness {
			continue
		}
		active = true
		wm := int64(noTimestamp)
		if ts != noTimestamp {
			wm = ts - w.cfg.OutOfOrderness.Milliseconds() - 1
		}
		lowest = min(lowest, wm)
	}
	if !active {
		if w.idle {
			return runtime.Element{}, false
		}
		w.idle = true
		return runtime.Element{Kind: runtime.KindWatermark, Idle: true}, true
	}
	if lowest == noTimestamp || lowest <= w.emitted {
		if w.idle && w.emitted != noTimestamp {
			// Active again with no new time: repeat the last watermark so
			// receivers count this channel again.
			w.idle = false
			return runtime.Element{Kind: runtime.KindWatermark, Watermark: time.UnixMilli(w.emitted)}, true
		}
		return runtime.Element{}, false
	}
	w.emitted, w.idle = lowest, false
	return runtime.Element{Kind: runtime.KindWatermark, Watermark: time.UnixMilli(lowest)}, true
}
