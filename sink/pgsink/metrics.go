package pgsink

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kstreamd/kstreamd/connector"
)

// Metrics are the PostgreSQL sinks' metrics of a process, labelled by sink
// name (a bounded set: the job's sinks):
//
//	kstreamd_postgres_sink_retries_total{sink}  database operations that failed because the database was unreachable and are retried with back-off
//	kstreamd_postgres_sink_up{sink}             1 while the database answers, 0 while it is unreachable
//
// A nil *Metrics counts nothing.
type Metrics struct {
	retries *prometheus.CounterVec
	upGauge *prometheus.GaugeVec
}

// NewMetrics registers Metrics with reg (nil: unregistered). Collectors
// reg already holds (a job built again after a restart) are reused.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kstreamd_postgres_sink_retries_total",
			Help: "PostgreSQL sink operations that failed because the database was unreachable and are retried with back-off."}, []string{"sink"}),
		upGauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kstreamd_postgres_sink_up",
			Help: "1 while a PostgreSQL sink's database answers, 0 while it is unreachable."}, []string{"sink"}),
	}
	if reg != nil {
		m.retries = register(reg, m.retries)
		m.upGauge = register(reg, m.upGauge)
	}
	return m
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}

func (m *Metrics) up(sink string, up bool) {
	if m == nil {
		return
	}
	v := 0.0
	if up {
		v = 1
	}
	m.upGauge.WithLabelValues(sink).Set(v)
}

func (m *Metrics) retried(sink string) {
	if m != nil {
		m.retries.WithLabelValues(sink).Inc()
	}
}

type metricsKey struct{}

// SetMetrics makes m the metrics of the postgres sinks built with res (the
// job registers them once per process).
func SetMetrics(res *connector.Resources, m *Metrics) {
	if res != nil && m != nil {
		res.Set(metricsKey{}, m)
	}
}

// metricsOf returns the metrics SetMetrics put in res; nil when none.
func metricsOf(res *connector.Resources) *Metrics {
	if res == nil {
		return nil
	}
	v, err := res.Get(metricsKey{}, func() (any, error) { return nil, errors.New("none set") })
	if err != nil {
		return nil
	}
	return v.(*Metrics)
}
