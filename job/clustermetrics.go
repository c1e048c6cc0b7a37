package job

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of a unit leaving a daemon, the values of
// kstreamd_cluster_unit_stops_total's outcome label.
const (
	StopFinalCheckpoint = "final_checkpoint" // revoked: its final checkpoint committed
	StopTimedOut        = "timed_out"        // revoked: revoke_timeout passed first, no commit
	StopFailed          = "failed"           // revoked: the final checkpoint failed, no commit
	StopLost            = "lost"             // lost (session expired): stopped at once, no commit
)

// clusterMetrics are the per-unit metrics of cluster mode
// (docs/scale-out.md); the labels stage and unit are bounded by the
// stages and cluster.units:
//
//	kstreamd_cluster_units{stage}                       units of the stage this daemon holds
//	kstreamd_cluster_unit_checkpoints_total{stage,unit} checkpoints of the unit this daemon committed (HEAD created)
//	kstreamd_cluster_unit_head{stage,unit}              k of the newest HEAD-k this daemon created for the unit (claim or checkpoint)
//	kstreamd_cluster_unit_takeovers_total{stage,unit}   times this daemon took the unit over (claimed its next HEAD)
//	kstreamd_cluster_unit_restores_total{stage,unit}    takeovers that restored a checkpoint (the HEAD named one)
//	kstreamd_cluster_unit_stops_total{outcome}          units that left this daemon, by outcome
//	kstreamd_cluster_repartition_start_offset{stage,unit,topic} log start offset of the unit's partition of an input repartition topic after its last purge
type clusterMetrics struct {
	units       *prometheus.GaugeVec
	checkpoints *prometheus.CounterVec
	head        *prometheus.GaugeVec
	takeovers   *prometheus.CounterVec
	restores    *prometheus.CounterVec
	stops       *prometheus.CounterVec
	purged      *prometheus.GaugeVec
}

func newClusterMetrics(reg prometheus.Registerer) (*clusterMetrics, error) {
	su := []string{"stage", "unit"}
	m := &clusterMetrics{
		units: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kstreamd_cluster_units", Help: "Work units of a stage this daemon holds (cluster mode).",
		}, []string{"stage"}),
		checkpoints: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kstreamd_cluster_unit_checkpoints_total", Help: "Checkpoints of a unit this daemon committed (its HEAD created).",
		}, su),
		head: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kstreamd_cluster_unit_head", Help: "Sequence k of the newest HEAD-k this daemon created for a unit (claim or checkpoint).",
		}, su),
		takeovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kstreamd_cluster_unit_takeovers_total", Help: "Times this daemon took a unit over (claimed its next HEAD).",
		}, su),
		restores: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kstreamd_cluster_unit_restores_total", Help: "Takeovers of a unit that restored a checkpoint.",
		}, su),
		stops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kstreamd_cluster_unit_stops_total", Help: "Units that left this daemon, by outcome (final_checkpoint, timed_out, failed, lost).",
		}, []string{"outcome"}),
		purged: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kstreamd_cluster_repartition_start_offset", Help: "Log start offset of a unit's partition of an input repartition topic after its last purge (DeleteRecords); a unit of a two-input operator reads two topics.",
		}, []string{"stage", "unit", "topic"}),
	}
	for _, c := range []prometheus.Collector{m.units, m.checkpoints, m.head, m.takeovers, m.restores, m.stops, m.purged} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, o := range []string{StopFinalCheckpoint, StopTimedOut, StopFailed, StopLost} {
		m.stops.WithLabelValues(o)
	}
	return m, nil
}

// unitLabels are the stage and unit label values of u.
func unitLabels(u *Unit) []string { return []string{strconv.Itoa(u.Stage), strconv.Itoa(u.Index)} }
