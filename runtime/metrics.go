package runtime

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the per-operator, per-subtask record counters every task
// reports. Labels: operator (the configured name) and subtask (its index).
type Metrics struct {
	recordsIn    *prometheus.CounterVec
	recordsOut   *prometheus.CounterVec
	backPressure *prometheus.CounterVec
}

// NewMetrics registers the runtime metrics with reg:
//
//	kstreamd_operator_records_in_total{operator,subtask}   records received
//	kstreamd_operator_records_out_total{operator,subtask}  records emitted
//	kstreamd_operator_backpressured_seconds_total{operator,subtask}
//	    time the subtask waited to emit because a downstream channel was
//	    full; its rate is the share of time back-pressured (Flink's
//	    backPressuredTimeMsPerSecond / 1000)
//
// It returns an error if they are already registered.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		recordsIn: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kstreamd_operator_records_in_total",
			Help: "Records received by an operator subtask (sources: records read from Kafka, malformed ones included).",
		}, []string{"operator", "subtask"}),
		recordsOut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kstreamd_operator_records_out_total",
			Help: "Records emitted by an operator subtask (sinks: records written to Kafka).",
		}, []string{"operator", "subtask"}),
	}
	m.backPressure = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kstreamd_operator_backpressured_seconds_total",
		Help: "Seconds an operator subtask waited to emit because a downstream channel was full (its rate is the back-pressured share of time).",
	}, []string{"operator", "subtask"})
	for _, c := range []prometheus.Collector{m.recordsIn, m.recordsOut, m.backPressure} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// RecordsIn returns the records-in counter of one subtask.
func (m *Metrics) RecordsIn(operator string, subtask int) prometheus.Counter {
	return m.recordsIn.WithLabelValues(operator, strconv.Itoa(subtask))
}

// RecordsOut returns the records-out counter of one subtask.
func (m *Metrics) RecordsOut(operator string, subtask int) prometheus.Counter {
	return m.recordsOut.WithLabelValues(operator, strconv.Itoa(subtask))
}

// BackPressure returns the back-pressured-seconds counter of one subtask.
func (m *Metrics) BackPressure(operator string, subtask int) prometheus.Counter {
	return m.backPressure.WithLabelValues(operator, strconv.Itoa(subtask))
}
