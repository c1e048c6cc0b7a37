package runtime

import (
	"context"
	"errors"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// MinWatermark is the watermark before any: every timestamp is after it.
var MinWatermark = time.UnixMilli(math.MinInt64)

// MaxWatermark is the watermark of an input that holds nothing back (every
// channel of it idle or finished): every timestamp is at or before it.
var MaxWatermark = time.UnixMilli(math.MaxInt64)

// WatermarkHandler is implemented by operators that act on event time
// (Flink's StreamOperator.processWatermark): ProcessWatermark runs on the
// subtask goroutine when the task's input watermark advanced to wm, before
// wm is forwarded downstream, so records it emits (fired event-time timers,
// closed windows) precede the watermark.
type WatermarkHandler interface {
	ProcessWatermark(ctx context.Context, wm time.Time) error
}

// ErrWatermarkHeld is returned by a WatermarkHandler's ProcessWatermark
// that holds wm back (the aggregate's mini_batch with allow_latency, as
// Flink's MiniBatchAssigner forwards watermarks only at mini-batch
// boundaries): the task (or chain) does not forward wm; the operator
// forwards it itself later, through the Output it emits to, after the
// records that end its batch and before any later control element it
// lets through. The task's watermark gauge still moves to wm.
var ErrWatermarkHeld = errors.New("runtime: watermark held by the operator until the end of its batch")

// IdleHandler is implemented by operators that act on their input's idle
// status (a cluster-mode repartition sink writes it to the exchange as a
// marker): ProcessIdle runs on the subtask goroutine each time every input
// channel of the task turned idle (or finished), when the task forwards
// the idle status, after the watermark that status flushed (if any) was
// handed to ProcessWatermark. The input is active again with the next
// record or watermark the operator receives (Flink's WatermarkStatus).
type IdleHandler interface {
	ProcessIdle(ctx context.Context) error
}

// BroadcastWatermarkHandler is implemented by two-input operators that act
// on the event time of their broadcast input, which the task otherwise
// ignores for event time (the rules routing stage with rule_time: event
// holds records until the rules input's watermark passes them). When
// BroadcastWatermarks returns true (NewOperatorTask asks once), the task
// combines the broadcast channels' watermarks in a valve of their own:
// ProcessBroadcastWatermark runs on the subtask goroutine each time that
// watermark changes, with MaxWatermark while no broadcast channel is
// active (all idle or finished; the value drops back to the last watermark
// when one is active again), and the watermark the task forwards is the
// minimum of the main input's and that one, as a Flink two-input operator
// forwards the minimum of its inputs. Records the operator emits in
// ProcessBroadcastWatermark precede the forwarded watermark.
type BroadcastWatermarkHandler interface {
	BroadcastWatermarks() bool
	ProcessBroadcastWatermark(ctx context.Context, wm time.Time) error
}

// MailboxAware is implemented by operators that post work to their task's
// mailbox (processing-time timers); NewOperatorTask hands them the mailbox
// before Open.
type MailboxAware interface {
	SetMailbox(m *Mailbox)
}

// StatusWatermarkValve combines the watermarks of a task's input channels
// (Flink's StatusWatermarkValve): the input watermark is the minimum over
// the channels that take part and are active (not idle, not finished). A
// channel that never sent a watermark holds the minimum at MinWatermark
// until it does or goes idle. Channels that do not take part (a broadcast
// input) are ignored. Not safe for concurrent use: it belongs to the subtask
// goroutine.
type StatusWatermarkValve struct {
	wm      []time.Time // per channel; MinWatermark until the first
	idle    []bool
	done    []bool
	ignored []bool
	current time.Time // last input watermark returned; MinWatermark before
	allIdle bool      // the idle status was last reported
}

// NewStatusWatermarkValve returns a valve over n channels; ignored[i] (may
// be shorter than n) excludes channel i.
func NewStatusWatermarkValve(n int, ignored []bool) *StatusWatermarkValve {
	v := &StatusWatermarkValve{wm: make([]time.Time, n), idle: make([]bool, n), done: make([]bool, n), ignored: make([]bool, n), current: MinWatermark}
	for i := range v.wm {
		v.wm[i] = MinWatermark
		if i < len(ignored) {
			v.ignored[i] = ignored[i]
		}
	}
	return v
}

// Current returns the last input watermark, MinWatermark before the first.
func (v *StatusWatermarkValve) Current() time.Time { return v.current }

// Watermark records watermark wm of channel ch (which becomes active) and
// returns the new input watermark and true when it advanced.
func (v *StatusWatermarkValve) Watermark(ch int, wm time.Time) (time.Time, bool) {
	if v.ignored[ch] {
		return v.current, false
	}
	v.idle[ch] = false
	if wm.After(v.wm[ch]) {
		v.wm[ch] = wm
	}
	return v.advance()
}

// Active marks channel ch active (it sent a record).
func (v *StatusWatermarkValve) Active(ch int) {
	if !v.ignored[ch] && v.idle[ch] {
		v.idle[ch] = false
		v.allIdle = false
	}
}

// Idle marks channel ch idle. It returns the new input watermark and true
// when excluding ch advanced it, and allIdle true the first time every
// taking part channel is idle or finished (the idle status is then to be
// forwarded). When no channel is active any more, the input watermark
// becomes the largest watermark any channel reached, as Flink's
// StatusWatermarkValve flushes it (findAndOutputMaxWatermarkAcrossAllChannels):
// otherwise the channel that went idle last would hold time back at its
// own watermark for as long as every input stays quiet, whichever order
// they fell quiet in.
func (v *StatusWatermarkValve) Idle(ch int) (wm time.Time, advanced, allIdle bool) {
	if v.ignored[ch] {
		return v.current, false, false
	}
	v.idle[ch] = true
	wm, advanced = v.advance()
	if !v.anyActive() {
		if top, ok := v.maxAcrossChannels(); ok && top.After(v.current) {
			v.current, wm, advanced = top, top, true
		}
	}
	if !v.anyActive() && !v.allIdle {
		v.allIdle = true
		return wm, advanced, true
	}
	return wm, advanced, false
}

// Finish excludes channel ch, which delivered end-of-input, and returns the
// new input watermark and true when that advanced it.
func (v *StatusWatermarkValve) Finish(ch int) (time.Time, bool) {
	v.done[ch] = true
	return v.advance()
}

// maxAcrossChannels returns the largest watermark of the channels taking
// part (idle and finished ones included), false when none sent one.
func (v *StatusWatermarkValve) maxAcrossChannels() (time.Time, bool) {
	top, found := MinWatermark, false
	for i, wm := range v.wm {
		if v.ignored[i] || wm.Equal(MinWatermark) {
			continue
		}
		if !found || wm.After(top) {
			top, found = wm, true
		}
	}
	return top, found
}

func (v *StatusWatermarkValve) anyActive() bool {
	for i := range v.wm {
		if !v.ignored[i] && !v.idle[i] && !v.done[i] {
			return true
		}
	}
	return false
}

func (v *StatusWatermarkValve) advance() (time.Time, bool) {
	var lowest time.Time
	found := false
	for i, wm := range v.wm {
		if v.ignored[i] || v.idle[i] || v.done[i] {
			continue
		}
		if !found || wm.Before(lowest) {
			lowest, found = wm, true
		}
	}
	if !found || !lowest.After(v.current) {
		return v.current, false
	}
	v.current = lowest
	v.allIdle = false
	return lowest, true
}

// WatermarkMetrics export the watermark of every subtask (sources,
// operators and sinks) at scrape time:
//
//	kstreamd_operator_watermark_seconds{operator,subtask}      the last watermark the subtask emitted (or, for a sink, received), Unix seconds
//	kstreamd_operator_watermark_lag_seconds{operator,subtask}  wall clock minus that watermark, seconds
//
// A subtask has no series before its first watermark. Flink's
// currentOutputWatermark and watermarkLag.
type WatermarkMetrics struct {
	mu    sync.Mutex // guards subs
	subs  map[TaskID]*atomic.Int64
	wm    *prometheus.Desc
	lag   *prometheus.Desc
	clock func() time.Time
}

// NewWatermarkMetrics registers the watermark metrics with reg.
func NewWatermarkMetrics(reg prometheus.Registerer) (*WatermarkMetrics, error) {
	m := &WatermarkMetrics{
		subs:  map[TaskID]*atomic.Int64{},
		wm:    prometheus.NewDesc("kstreamd_operator_watermark_seconds", "The last watermark a subtask emitted (sinks: received), in Unix seconds.", []string{"operator", "subtask"}, nil),
		lag:   prometheus.NewDesc("kstreamd_operator_watermark_lag_seconds", "Wall clock minus the subtask's last watermark, in seconds.", []string{"operator", "subtask"}, nil),
		clock: time.Now,
	}
	if err := reg.Register(m); err != nil {
		return nil, err
	}
	return m, nil
}

// Gauge returns the watermark cell of one subtask; its Set is safe for
// concurrent use.
func (m *WatermarkMetrics) Gauge(id TaskID) *WatermarkGauge {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.subs[id]
	if !ok {
		c = &atomic.Int64{}
		c.Store(math.MinInt64)
		m.subs[id] = c
	}
	return &WatermarkGauge{c: c}
}

// WatermarkGauge is one subtask's watermark cell; a nil gauge ignores Set.
type WatermarkGauge struct{ c *atomic.Int64 }

// Set records watermark wm.
func (g *WatermarkGauge) Set(wm time.Time) {
	if g != nil {
		g.c.Store(wm.UnixMilli())
	}
}

// Value returns the last watermark set, in Unix milliseconds, and false
// when none was set yet (or g is nil).
func (g *WatermarkGauge) Value() (int64, bool) {
	if g == nil {
		return 0, false
	}
	ms := g.c.Load()
	return ms, ms != math.MinInt64
}

// Describe implements prometheus.Collector.
func (m *WatermarkMetrics) Describe(ch chan<- *prometheus.Desc) { ch <- m.wm; ch <- m.lag }

// Collect implements prometheus.Collector.
func (m *WatermarkMetrics) Collect(ch chan<- prometheus.Metric) {
	now := m.clock()
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, c := range m.subs {
		ms := c.Load()
		if ms == math.MinInt64 {
			continue
		}
		sub := strconv.Itoa(id.Subtask)
		ch <- prometheus.MustNewConstMetric(m.wm, prometheus.GaugeValue, float64(ms)/1000, id.Operator, sub)
		ch <- prometheus.MustNewConstMetric(m.lag, prometheus.GaugeValue, now.Sub(time.UnixMilli(ms)).Seconds(), id.Operator, sub)
	}
}
