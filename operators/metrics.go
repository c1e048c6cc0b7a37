package operators

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the metrics of the built-in operators, shared by every subtask.
type Metrics struct {
	rulesHeld      *prometheus.GaugeVec
	lastRuleUpdate *prometheus.GaugeVec
	rulesRejected  *prometheus.CounterVec
	pendingExpired *prometheus.CounterVec
}

// NewMetrics registers with reg:
//
//	kstreamd_broadcast_rules{operator,subtask}                          rules held in broadcast state
//	kstreamd_broadcast_last_update_timestamp_seconds{operator,subtask}  Unix time of the last rule put or delete
//	kstreamd_broadcast_rules_rejected_total{operator}                   rule records that could not be decoded
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		rulesHeld: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kstreamd_broadcast_rules",
			Help: "Rules held in the broadcast state of an operator subtask.",
		}, []string{"operator", "subtask"}),
		lastRuleUpdate: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kstreamd_broadcast_last_update_timestamp_seconds",
			Help: "Unix time of the last rule put or delete applied by an operator subtask.",
		}, []string{"operator", "subtask"}),
		rulesRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kstreamd_broadcast_rules_rejected_total",
			Help: "Rule records an operator could not decode; they never reach broadcast state. Counted once per subtask that saw them.",
		}, []string{"operator"}),
		pendingExpired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kstreamd_shape_pair_items_expired_total",
			Help: "Stored items the shape-pair matcher removed unpaired after pending_timeout.",
		}, []string{"operator"}),
	}
	for _, c := range []prometheus.Collector{m.rulesHeld, m.lastRuleUpdate, m.rulesRejected, m.pendingExpired} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// RulesHeld returns the rules gauge of one subtask.
func (m *Metrics) RulesHeld(operator string, subtask int) prometheus.Gauge {
	return m.rulesHeld.WithLabelValues(operator, strconv.Itoa(subtask))
}

// LastRuleUpdate returns the last-rule-update gauge of one subtask.
func (m *Metrics) LastRuleUpdate(operator string, subtask int) prometheus.Gauge {
	return m.lastRuleUpdate.WithLabelValues(operator, strconv.Itoa(subtask))
}

// PendingExpired returns the expired-items counter of one shape-pair
// matcher.
func (m *Metrics) PendingExpired(operator string) prometheus.Counter {
	return m.pendingExpired.WithLabelValues(operator)
}

// RulesRejected returns the rejected-rules counter of one operator.
func (m *Metrics) RulesRejected(operator string) prometheus.Counter {
	return m.rulesRejected.WithLabelValues(operator)
}
