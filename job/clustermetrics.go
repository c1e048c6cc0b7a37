package job

import (
	"strconv"

	"github.com/kstreamd/kstreamd/checkpoint"

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
//	kstreamd_cluster_unit_up{stage,unit}                1 while the unit's attempt runs here, 0 while it is assigned here but not running (starting, restarting, taken over)
//	kstreamd_cluster_unit_fenced_total{stage,unit}      times the unit found another claim's HEAD here (ErrHeadExists) or its transactional ids fenced by one (sink.ErrFenced) and stopped
//	kstreamd_cluster_output_unstable_offsets{topic,partition} high watermark minus last stable offset of an output partition (user Kafka sinks, repartition topics): records behind an open transaction; a growing value is a stuck one
//	kstreamd_cluster_group_sessions_lost_total          group sessions the member's client gave up (units lost; kept running while it rejoins)
//	kstreamd_cluster_lost_units_kept_total              lost units the rejoin assigned here again: kept running, neither restored nor moved
//	kstreamd_cluster_head_unknown_outcomes_total{outcome} HEAD creates whose outcome was unknown, by how the read-back resolved them (own, adopted, other, unknown)
type clusterMetrics struct {
	units       *prometheus.GaugeVec
	checkpoints *prometheus.CounterVec
	head        *prometheus.GaugeVec
	takeovers   *prometheus.CounterVec
	restores    *prometheus.CounterVec
	stops       *prometheus.CounterVec
	purged      *prometheus.GaugeVec
	up          *prometheus.GaugeVec
	fenced      *prometheus.CounterVec
	outcomes    *prometheus.CounterVec
	// sessionsLost and keptLost count group sessions the client gave up
	// and lost units the rejoin assigned here again (kept running).
	unstable     *prometheus.GaugeVec
	sessionsLost prometheus.Counter
	keptLost     prometheus.Counter
}

// headResolved is checkpoint.Namespace.Resolved.
func (m *clusterMetrics) headResolved(outcome string) { m.outcomes.WithLabelValues(outcome).Inc() }

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
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kstreamd_cluster_unit_up", Help: "1 while a unit's attempt runs on this daemon, 0 while the group assigns it here but it does not run (starting, restarting after a failure, taken over and waiting for the group to confirm the assignment).",
		}, su),
		fenced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kstreamd_cluster_unit_fenced_total", Help: "Times a unit on this daemon found another claim's HEAD (HEAD exists), or its transactional ids fenced by another claim, and stopped.",
		}, su),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kstreamd_cluster_head_unknown_outcomes_total", Help: "HEAD creates whose outcome was unknown (an error, or exists on a retry), by how reading the HEAD back resolved them: own (created, the answer was lost), adopted (an earlier HEAD of the owner), other (another claim's: takeover), unknown (unreadable).",
		}, []string{"outcome"}),
		unstable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kstreamd_cluster_output_unstable_offsets", Help: "High watermark minus last stable offset of a partition of the job's output topics (Kafka sinks and repartition topics), measured by each member every output watch interval: records read_committed readers cannot see yet; one that keeps growing is held by a stuck transaction.",
		}, []string{"topic", "partition"}),
		sessionsLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kstreamd_cluster_group_sessions_lost_total", Help: "Group sessions this member's client gave up (its units lost, e.g. in a broker outage); the units keep running while it rejoins.",
		}),
		keptLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kstreamd_cluster_lost_units_kept_total", Help: "Lost units the member's rejoin assigned here again: they kept running, neither restored nor moved.",
		}),
	}
	for _, c := range []prometheus.Collector{m.unstable, m.sessionsLost, m.keptLost, m.units, m.checkpoints, m.head, m.takeovers, m.restores, m.stops, m.purged, m.up, m.fenced, m.outcomes} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, o := range []string{StopFinalCheckpoint, StopTimedOut, StopFailed, StopLost} {
		m.stops.WithLabelValues(o)
	}
	for _, o := range []string{checkpoint.HeadOwn, checkpoint.HeadAdopted, checkpoint.HeadOther, checkpoint.HeadUnknown} {
		m.outcomes.WithLabelValues(o)
	}
	return m, nil
}

// unitLabels are the stage and unit label values of u.
func unitLabels(u *Unit) []string { return []string{strconv.Itoa(u.Stage), strconv.Itoa(u.Index)} }
