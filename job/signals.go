package job

import (
	"context"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/runtime"
)

// DefaultSignalWindow is the sliding window the per-second signals
// (busy, back-pressured and idle time, records in and out) are computed
// over when Deps.SignalWindow is 0.
const DefaultSignalWindow = 5 * time.Second

// signalSamples is the number of samples a window holds: the signals are
// sampled every window/signalSamples, and a figure is the change from the
// oldest sample kept to now (between window*(1-1/signalSamples) and
// window).
const signalSamples = 5

// signalMetrics are the per-subtask time signals of NewMetrics:
//
//	kstreamd_operator_busy_time_ms_per_second{operator,subtask}           Flink's busyTimeMsPerSecond over the sliding window
//	kstreamd_operator_backpressured_time_ms_per_second{operator,subtask}  Flink's backPressuredTimeMsPerSecond
//	kstreamd_operator_idle_time_ms_per_second{operator,subtask}           Flink's idleTimeMsPerSecond
//	kstreamd_operator_idle_seconds_total{operator,subtask}                seconds the subtask waited for input
//	kstreamd_operator_busy_seconds_total{operator,subtask}                seconds it was neither idle nor back-pressured
//
// (kstreamd_operator_backpressured_seconds_total is runtime.Metrics'.)
// A chained operator runs in its chain head's task: its figures are the
// task's.
type signalMetrics struct {
	busy, bp, idle *prometheus.Desc
	idleSecs       *prometheus.CounterVec
	busySecs       *prometheus.CounterVec

	mu      sync.Mutex
	current []*signals // the running attempts' (several units of a cluster member)
}

func newSignalMetrics(reg prometheus.Registerer) (*signalMetrics, error) {
	labels := []string{"operator", "subtask"}
	m := &signalMetrics{
		busy: prometheus.NewDesc("kstreamd_operator_busy_time_ms_per_second",
			"Milliseconds per second an operator subtask was busy (neither idle nor back-pressured), over a sliding window of a few seconds (Flink's busyTimeMsPerSecond).", labels, nil),
		bp: prometheus.NewDesc("kstreamd_operator_backpressured_time_ms_per_second",
			"Milliseconds per second an operator subtask waited to emit on a full downstream channel, over a sliding window (Flink's backPressuredTimeMsPerSecond).", labels, nil),
		idle: prometheus.NewDesc("kstreamd_operator_idle_time_ms_per_second",
			"Milliseconds per second an operator subtask waited for input, over a sliding window (Flink's idleTimeMsPerSecond).", labels, nil),
		idleSecs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kstreamd_operator_idle_seconds_total",
			Help: "Seconds an operator subtask waited for input (its input channels empty; a source: waiting for records from Kafka).",
		}, labels),
		busySecs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kstreamd_operator_busy_seconds_total",
			Help: "Seconds an operator subtask was busy: running, neither idle nor back-pressured.",
		}, labels),
	}
	for _, c := range []prometheus.Collector{m, m.idleSecs, m.busySecs} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// ioTimes returns a new meter of one subtask counting into its counters.
func (m *Metrics) ioTimes(vertex string, sub int) *runtime.IOTimes {
	s := strconv.Itoa(sub)
	return runtime.NewIOTimes(m.signals.idleSecs.WithLabelValues(vertex, s), m.runtime.BackPressure(vertex, sub))
}

func (m *signalMetrics) add(s *signals) {
	m.mu.Lock()
	m.current = append(m.current, s)
	m.mu.Unlock()
}

func (m *signalMetrics) remove(s *signals) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, c := range m.current {
		if c == s {
			m.current = append(m.current[:i], m.current[i+1:]...)
			return
		}
	}
}

// Describe implements prometheus.Collector.
func (m *signalMetrics) Describe(ch chan<- *prometheus.Desc) { ch <- m.busy; ch <- m.bp; ch <- m.idle }

// Collect implements prometheus.Collector. Cluster-mode units of one
// stage running in the process have the same operator and subtask labels
// (each unit is a job of parallelism 1): their series are merged, the
// highest busy and back-pressured time and the lowest idle time, so that
// a scrape never sees a label set twice.
func (m *signalMetrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	current := append([]*signals(nil), m.current...)
	m.mu.Unlock()
	type key struct {
		vertex string
		sub    int
	}
	merged := map[key]SubtaskStatus{}
	var order []key
	for _, s := range current {
		for _, st := range s.read() {
			k := key{st.vertex, st.sub.Index}
			prev, seen := merged[k]
			if !seen {
				order = append(order, k)
				merged[k] = st.sub
				continue
			}
			prev.BusyMsPerS = max(prev.BusyMsPerS, st.sub.BusyMsPerS)
			prev.BackPressuredMsPerS = max(prev.BackPressuredMsPerS, st.sub.BackPressuredMsPerS)
			prev.IdleMsPerS = min(prev.IdleMsPerS, st.sub.IdleMsPerS)
			merged[k] = prev
		}
	}
	for _, k := range order {
		st, sub := merged[k], strconv.Itoa(k.sub)
		ch <- prometheus.MustNewConstMetric(m.busy, prometheus.GaugeValue, st.BusyMsPerS, k.vertex, sub)
		ch <- prometheus.MustNewConstMetric(m.bp, prometheus.GaugeValue, st.BackPressuredMsPerS, k.vertex, sub)
		ch <- prometheus.MustNewConstMetric(m.idle, prometheus.GaugeValue, st.IdleMsPerS, k.vertex, sub)
	}
}

// SubtaskStatus is one subtask's signals in GET /api/v1/job (Flink's
// per-subtask metrics of a vertex): the shares of its time busy,
// back-pressured and idle, and its records in and out, per second over a
// sliding window of a few seconds (Deps.SignalWindow), and its current
// input watermark (a source: the watermark it emitted), in Unix
// milliseconds, omitted before its first.
type SubtaskStatus struct {
	Index               int     `json:"index"`
	BusyMsPerS          float64 `json:"busy_ms_per_s"`
	BackPressuredMsPerS float64 `json:"backpressured_ms_per_s"`
	IdleMsPerS          float64 `json:"idle_ms_per_s"`
	RecordsInPerS       float64 `json:"records_in_per_s"`
	RecordsOutPerS      float64 `json:"records_out_per_s"`
	WatermarkMs         *int64  `json:"watermark_ms,omitempty"`
	// StateBytes is the disk space of the subtask's keyed state (Pebble);
	// omitted when not known (hashmap, or not keyed).
	StateBytes *int64 `json:"state_bytes,omitempty"`
}

// EdgeStatus is one edge of the job graph in GET /api/v1/job: from and to
// are vertex ids (uids), kind how records travel: "forward" (subtask i to
// subtask i), "key_by" (by key group), "broadcast", "rebalance" (round
// robin) or "chain" (a forward edge whose downstream operator runs in the
// upstream one's task, no channel between them: Flink's OperatorChain).
// Output is the side output of from the edge reads ("" for the main
// output).
type EdgeStatus struct {
	From   string `json:"from"`
	To     string `json:"to"`
	Kind   string `json:"kind"`
	Output string `json:"output,omitempty"`
}

// edgeKind returns the API kind of e.
func edgeKind(g *graph.Graph, e graph.Edge) string {
	if g.Chained(e) {
		return "chain"
	}
	if e.Kind == graph.Hash {
		return "key_by"
	}
	return string(e.Kind)
}

// signals are the per-subtask signals of one attempt: each subtask's
// meter, counters and watermark cell, sampled every window/signalSamples
// while the attempt runs.
type signals struct {
	interval time.Duration
	metrics  *Metrics
	mu       sync.Mutex // guards every subtaskSignal's ring and lastBusy
	subs     []*subtaskSignal
}

// subtaskSignal is what one subtask's signals are read from.
type subtaskSignal struct {
	vertex   string
	index    int
	times    *runtime.IOTimes
	in, out  prometheus.Counter
	wm       *runtime.WatermarkGauge
	busySecs prometheus.Counter
	ring     []signalSample // oldest first, at most signalSamples
	lastBusy time.Duration
}

type signalSample struct {
	t       runtime.IOTotals
	in, out float64
}

// subtaskFigures is one subtask's figures with the vertex it belongs to.
type subtaskFigures struct {
	vertex string
	sub    SubtaskStatus
}

// newSignals collects the signals of the subtasks b built.
func newSignals(b *build, window time.Duration) *signals {
	if window <= 0 {
		window = DefaultSignalWindow
	}
	s := &signals{interval: window / signalSamples, metrics: b.m}
	add := func(vertex string, sub int, times *runtime.IOTimes) {
		s.subs = append(s.subs, &subtaskSignal{vertex: vertex, index: sub, times: times,
			in: b.m.runtime.RecordsIn(vertex, sub), out: b.m.runtime.RecordsOut(vertex, sub),
			wm:       b.m.watermark.Gauge(runtime.TaskID{Operator: vertex, Subtask: sub}),
			busySecs: b.m.signals.busySecs.WithLabelValues(vertex, strconv.Itoa(sub))})
	}
	for _, src := range b.g.Sources {
		for sub, o := range b.wires.outputs[src.Name] {
			add(src.Name, sub, o.IOTimes())
		}
	}
	for _, op := range b.g.Operators {
		for sub, o := range b.wires.outputs[op.Name] {
			add(op.Name, sub, o.IOTimes()) // a chained operator's: its task's (runtime.ChainedOperator)
		}
	}
	for _, sk := range b.g.Sinks {
		for sub := range len(b.wires.gates[sk.Name]) {
			add(sk.Name, sub, b.sinkTimes[runtime.TaskID{Operator: sk.Name, Subtask: sub}])
		}
	}
	return s
}

// run samples every interval until ctx ends, then once more (the busy
// counters get the attempt's last seconds).
func (s *signals) run(ctx context.Context) {
	s.metrics.signals.add(s)
	defer s.metrics.signals.remove(s)
	s.sample()
	tick := time.NewTicker(s.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			s.sample()
			return
		case <-tick.C:
			s.sample()
		}
	}
}

// take reads one subtask's sample now.
func (ss *subtaskSignal) take() signalSample {
	return signalSample{t: ss.times.Read(), in: counterValue(ss.in), out: counterValue(ss.out)}
}

// sample adds a sample to every subtask's ring and its busy seconds to
// the busy counter.
func (s *signals) sample() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ss := range s.subs {
		smp := ss.take()
		if len(ss.ring) == signalSamples {
			copy(ss.ring, ss.ring[1:])
			ss.ring = ss.ring[:signalSamples-1]
		}
		ss.ring = append(ss.ring, smp)
		if busy := smp.t.Busy(); busy > ss.lastBusy {
			ss.busySecs.Add((busy - ss.lastBusy).Seconds())
			ss.lastBusy = busy
		}
	}
}

// read returns every subtask's figures now: the change from the oldest
// sample kept to a sample taken now, per second.
func (s *signals) read() []subtaskFigures {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]subtaskFigures, 0, len(s.subs))
	for _, ss := range s.subs {
		st := SubtaskStatus{Index: ss.index}
		if len(ss.ring) > 0 {
			now, old := ss.take(), ss.ring[0]
			if secs := now.t.At.Sub(old.t.At).Seconds(); secs > 0 {
				perS := func(d time.Duration) float64 { return clampMs(d.Seconds() * 1000 / secs) }
				st.BusyMsPerS = perS(now.t.Busy() - old.t.Busy())
				st.BackPressuredMsPerS = perS(now.t.BackPressured - old.t.BackPressured)
				st.IdleMsPerS = perS(now.t.Idle - old.t.Idle)
				st.RecordsInPerS = round1(max(now.in-old.in, 0) / secs)
				st.RecordsOutPerS = round1(max(now.out-old.out, 0) / secs)
			}
		}
		if wm, ok := ss.wm.Value(); ok {
			st.WatermarkMs = &wm
		}
		if n, ok := s.metrics.stateSize.size(ss.vertex, ss.index); ok {
			st.StateBytes = &n
		}
		out = append(out, subtaskFigures{vertex: ss.vertex, sub: st})
	}
	return out
}

// clampMs rounds a milliseconds-per-second figure to 0.1 within [0, 1000].
func clampMs(v float64) float64 { return round1(min(max(v, 0), 1000)) }

func round1(v float64) float64 { return math.Round(v*10) / 10 }

// counterValue returns c's value (0 for nil).
func counterValue(c prometheus.Counter) float64 {
	if c == nil {
		return 0
	}
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// fillSignals adds to st the vertex ids, each vertex's subtasks with
// their signals and its totals, and the graph's edges.
func (j *Job) fillSignals(st *Status) {
	byVertex := map[string][]SubtaskStatus{}
	if j.signals != nil {
		for _, f := range j.signals.read() {
			byVertex[f.vertex] = append(byVertex[f.vertex], f.sub)
		}
	}
	for i := range st.Operators {
		v := &st.Operators[i]
		v.ID = j.g.UID(v.Name)
		v.Subtasks = byVertex[v.Name]
		if v.Subtasks == nil {
			v.Subtasks = []SubtaskStatus{}
		}
		v.totals()
	}
	st.Edges = []EdgeStatus{}
	for _, e := range j.g.Edges {
		st.Edges = append(st.Edges, EdgeStatus{From: j.g.UID(e.From), To: j.g.UID(e.To), Kind: edgeKind(j.g, e), Output: e.Output})
	}
}

// totals sets v's totals from its subtasks: records summed, busy and
// back-pressure the highest subtask's (the one that limits the vertex),
// the watermark the lowest (omitted unless every subtask has one, as
// Flink shows a vertex's), state bytes summed (omitted when no subtask
// knows its size).
func (v *VertexStatus) totals() {
	var wm *int64
	allWM := len(v.Subtasks) > 0
	for _, s := range v.Subtasks {
		v.RecordsInPerS += s.RecordsInPerS
		v.RecordsOutPerS += s.RecordsOutPerS
		v.BusyMsPerS = max(v.BusyMsPerS, s.BusyMsPerS)
		v.BackPressuredMsPerS = max(v.BackPressuredMsPerS, s.BackPressuredMsPerS)
		if s.WatermarkMs == nil {
			allWM = false
		} else if wm == nil || *s.WatermarkMs < *wm {
			w := *s.WatermarkMs
			wm = &w
		}
		if s.StateBytes != nil {
			n := *s.StateBytes
			if v.StateBytes != nil {
				n += *v.StateBytes
			}
			v.StateBytes = &n
		}
	}
	v.RecordsInPerS, v.RecordsOutPerS = round1(v.RecordsInPerS), round1(v.RecordsOutPerS)
	if allWM {
		v.WatermarkMs = wm
	}
}
