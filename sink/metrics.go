package sink

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the sink metrics shared by every sink subtask.
type Metrics struct {
	txns          *prometheus.CounterVec
	inFlight      *prometheus.GaugeVec
	commitLatency prometheus.Histogram
	e2eLatency    prometheus.Histogram
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
		e2eLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "kstreamd_sink_end_to_end_latency_seconds", Help: "Time from a record's source timestamp to the commit of the transaction holding its output.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
		}),
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
