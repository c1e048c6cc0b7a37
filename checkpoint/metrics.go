package checkpoint

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the coordinator's metrics.
type Metrics struct {
	duration      prometheus.Histogram
	alignment     prometheus.Histogram
	size          prometheus.Gauge
	lastCompleted prometheus.Gauge
	lastTime      prometheus.Gauge
	total         *prometheus.CounterVec
}

// NewMetrics registers with reg:
//
//	kstreamd_checkpoint_duration_seconds                  histogram of trigger-to-commit time of completed checkpoints
//	kstreamd_checkpoint_alignment_duration_seconds        histogram of barrier alignment time per task
//	kstreamd_checkpoint_size_bytes                        bytes written by the last completed checkpoint
//	kstreamd_checkpoint_last_completed_id                 id of the last completed checkpoint (0: none)
//	kstreamd_checkpoint_last_completed_timestamp_seconds  Unix time of the last completed checkpoint
//	kstreamd_checkpoints_total{kind,result}               checkpoints and savepoints by result (completed, failed)
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "kstreamd_checkpoint_duration_seconds", Help: "Time from trigger to commit of completed checkpoints and savepoints.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
		alignment: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "kstreamd_checkpoint_alignment_duration_seconds", Help: "Time a task waited between the first and the last barrier of a checkpoint.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
		size: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kstreamd_checkpoint_size_bytes", Help: "Bytes written by the last completed checkpoint or savepoint.",
		}),
		lastCompleted: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kstreamd_checkpoint_last_completed_id", Help: "Id of the last completed checkpoint or savepoint; 0 when none completed in this process.",
		}),
		lastTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kstreamd_checkpoint_last_completed_timestamp_seconds", Help: "Unix time the last checkpoint or savepoint completed.",
		}),
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kstreamd_checkpoints_total", Help: "Checkpoints and savepoints by kind (checkpoint, savepoint) and result (completed, failed).",
		}, []string{"kind", "result"}),
	}
	for _, c := range []prometheus.Collector{m.duration, m.alignment, m.size, m.lastCompleted, m.lastTime, m.total} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, k := range []string{"checkpoint", "savepoint"} {
		for _, r := range []string{"completed", "failed"} {
			m.total.WithLabelValues(k, r)
		}
	}
	return m, nil
}
