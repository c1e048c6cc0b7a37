package job

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/internal/kafkaretry"
	"github.com/kstreamd/kstreamd/operators"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/sink"
	"github.com/kstreamd/kstreamd/sink/pgsink"
	"github.com/kstreamd/kstreamd/source"
	"github.com/kstreamd/kstreamd/srformat"
	"github.com/kstreamd/kstreamd/state"
)

// Job states, the values of kstreamd_job_state's state label (the part of
// Flink's JobStatus a process has).
const (
	StateRunning    = "running"    // an attempt's tasks run
	StateRestarting = "restarting" // a task failed: waiting for the back-off, or rebuilding from the latest checkpoint
	StateFailed     = "failed"     // the restart strategy gave up
)

// Metrics are every metric of a job: the runtime's, the sources', the
// operators', the checkpoint coordinator's, the sinks' and the job's own.
// They are registered once per process and shared by every attempt of
// the job, so a restart neither registers them again nor resets counters.
type Metrics struct {
	runtime    *runtime.Metrics
	source     *source.Metrics
	operators  *operators.Metrics
	checkpoint *checkpoint.Metrics
	sink       *sink.Metrics
	kafka      *kafkaretry.Metrics
	watermark  *runtime.WatermarkMetrics
	cluster    *clusterMetrics
	registry   *srformat.Metrics
	postgres   *pgsink.Metrics

	restarts  prometheus.Counter
	state     *prometheus.GaugeVec
	stateSize *stateSizes
}

// NewMetrics registers with reg the metrics of every package a job uses
// (kafkaretry's retries and broker connection errors among them) and:
//
//	kstreamd_job_restarts_total       restarts of the job inside the process
//	kstreamd_job_state{state}         1 for the current state (running, restarting, failed), 0 for the others; all 0 before the first attempt runs
//	kstreamd_state_size_bytes{operator,subtask}  disk space of a keyed subtask's Pebble state
//	kstreamd_cluster_*                           cluster mode, per unit (see clusterMetrics)
//	kstreamd_schema_registry_*                   the Schema Registry client of the formats (srformat.Metrics)
//	kstreamd_postgres_sink_*                     the PostgreSQL sinks' database retries and reachability (pgsink.Metrics)
//
// It fails when any is registered already (one Metrics per registry).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	var err error
	m := &Metrics{}
	if m.runtime, err = runtime.NewMetrics(reg); err != nil {
		return nil, err
	}
	if m.source, err = source.NewMetrics(reg); err != nil {
		return nil, err
	}
	if m.operators, err = operators.NewMetrics(reg); err != nil {
		return nil, err
	}
	if m.checkpoint, err = checkpoint.NewMetrics(reg); err != nil {
		return nil, err
	}
	if m.sink, err = sink.NewMetrics(reg); err != nil {
		return nil, err
	}
	if m.watermark, err = runtime.NewWatermarkMetrics(reg); err != nil {
		return nil, err
	}
	if m.kafka, err = kafkaretry.NewMetrics(reg); err != nil {
		return nil, err
	}
	if m.cluster, err = newClusterMetrics(reg); err != nil {
		return nil, err
	}
	m.registry = srformat.NewMetrics(reg)
	m.postgres = pgsink.NewMetrics(reg)
	m.restarts = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kstreamd_job_restarts_total", Help: "Restarts of the job inside the process after a task failure (restart strategy).",
	})
	m.state = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kstreamd_job_state", Help: "1 for the job's current state (running, restarting, failed), 0 for the others.",
	}, []string{"state"})
	m.stateSize = &stateSizes{desc: prometheus.NewDesc("kstreamd_state_size_bytes",
		"Disk space of a keyed operator subtask's Pebble state (SST files, WAL and manifest).", []string{"operator", "subtask"}, nil),
		users: map[[2]string]state.DiskUser{}}
	for _, c := range []prometheus.Collector{m.restarts, m.state, m.stateSize} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, s := range []string{StateRunning, StateRestarting, StateFailed} {
		m.state.WithLabelValues(s)
	}
	return m, nil
}

// setState makes s the current state.
func (m *Metrics) setState(s string) {
	for _, l := range []string{StateRunning, StateRestarting, StateFailed} {
		v := 0.0
		if l == s {
			v = 1
		}
		m.state.WithLabelValues(l).Set(v)
	}
}

// stateSizes is kstreamd_state_size_bytes: the disk usage of the current
// attempt's Pebble backends, one series per keyed subtask.
type stateSizes struct {
	desc  *prometheus.Desc
	mu    sync.Mutex // guards users
	users map[[2]string]state.DiskUser
}

func (s *stateSizes) set(op string, sub int, du state.DiskUser) {
	s.mu.Lock()
	s.users[[2]string{op, strconv.Itoa(sub)}] = du
	s.mu.Unlock()
}

// clear forgets every backend (they are closed when an attempt ends).
func (s *stateSizes) clear() {
	s.mu.Lock()
	clear(s.users)
	s.mu.Unlock()
}

func (s *stateSizes) Describe(ch chan<- *prometheus.Desc) { ch <- s.desc }

func (s *stateSizes) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, du := range s.users {
		n, open := du.DiskSpaceUsage()
		if !open {
			continue
		}
		ch <- prometheus.MustNewConstMetric(s.desc, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
}
