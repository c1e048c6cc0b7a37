package sink

import (
	"sort"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the sink metrics shared by every sink subtask.
type Metrics struct {
	txns          *prometheus.CounterVec
	inFlight      *prometheus.GaugeVec
	commitLatency prometheus.Histogram
	e2eLatency    *bulkHistogram
}

// NewMetrics registers with reg:
//
//	kstreamd_sink_transactions_total{sink,result}         transactions committed, aborted, lost; transactional ids fenced at a start
//	kstreamd_sink_transactions_in_flight{sink,subtask}     open plus pre-committed transactions
//	kstreamd_sink_commit_latency_seconds                   time to commit a pre-committed transaction
//	kstreamd_sink_end_to_end_latency_seconds               record timestamp (source) to commit, per record
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		txns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kstreamd_sink_transactions_total", Help: "Kafka transactions of exactly-once sinks by result (committed, aborted, lost; fenced: transactional ids fenced at a start, whose open transactions count as aborted).",
		}, []string{"sink", "result"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kstreamd_sink_transactions_in_flight", Help: "Open and pre-committed, not yet committed, transactions of a sink subtask.",
		}, []string{"sink", "subtask"}),
		commitLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "kstreamd_sink_commit_latency_seconds", Help: "Time to commit a pre-committed transaction once its checkpoint completed.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		e2eLatency: newBulkHistogram(prometheus.NewDesc("kstreamd_sink_end_to_end_latency_seconds",
			"Time from a record's source timestamp to the commit of the transaction holding its output.", nil, nil),
			prometheus.ExponentialBuckets(0.01, 2, 14)),
	}
	for _, c := range []prometheus.Collector{m.txns, m.inFlight, m.commitLatency, m.e2eLatency} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) transaction(sink, result string) {
	if m != nil {
		m.txns.WithLabelValues(sink, result).Inc()
	}
}

func (m *Metrics) setInFlight(sink string, subtask, n int) {
	if m != nil {
		m.inFlight.WithLabelValues(sink, strconv.Itoa(subtask)).Set(float64(n))
	}
}

// Init creates the transaction series of an exactly-once sink at 0 (results
// committed, aborted, lost, fenced), so dashboards see them before the
// first one.
func (m *Metrics) Init(sink string) {
	for _, r := range []string{"committed", "aborted", "lost", "fenced"} {
		m.txns.WithLabelValues(sink, r)
	}
}

// bulkHistogram is a Prometheus histogram that takes its samples a
// transaction at a time (ObserveSince): a commit's up to millions of
// end-to-end latencies are counted into the buckets on the committing
// goroutine without atomics and added under one lock, where
// prometheus.Histogram.Observe costs several atomic operations per sample
// (about a quarter of a second per 5M records, with the sink task waiting
// in the commit). Collect exposes it as a constant histogram: the same
// series, buckets (upper bounds inclusive), count and sum.
type bulkHistogram struct {
	desc  *prometheus.Desc
	upper []float64 // bucket upper bounds, increasing; +Inf implicit

	mu     sync.Mutex
	counts []uint64 // per bucket, not cumulative; the last is +Inf
	count  uint64
	sum    float64
}

func newBulkHistogram(desc *prometheus.Desc, upper []float64) *bulkHistogram {
	return &bulkHistogram{desc: desc, upper: upper, counts: make([]uint64, len(upper)+1)}
}

// ObserveSince adds one sample per timestamp of ts (Unix nanoseconds): the
// seconds from it to now (Unix nanoseconds).
func (h *bulkHistogram) ObserveSince(now int64, ts []int64) {
	if len(ts) == 0 {
		return
	}
	counts := make([]uint64, len(h.counts))
	var sum float64
	for _, t := range ts {
		v := float64(now-t) / 1e9
		sum += v
		counts[sort.SearchFloat64s(h.upper, v)]++
	}
	h.mu.Lock()
	for i, c := range counts {
		h.counts[i] += c
	}
	h.count += uint64(len(ts))
	h.sum += sum
	h.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (h *bulkHistogram) Describe(ch chan<- *prometheus.Desc) { ch <- h.desc }

// Collect implements prometheus.Collector.
func (h *bulkHistogram) Collect(ch chan<- prometheus.Metric) {
	h.mu.Lock()
	buckets := make(map[float64]uint64, len(h.upper))
	var cum uint64
	for i, u := range h.upper {
		cum += h.counts[i]
		buckets[u] = cum
	}
	count, sum := h.count, h.sum
	h.mu.Unlock()
	ch <- prometheus.MustNewConstHistogram(h.desc, count, sum, buckets)
}
