package operators

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the metrics of the built-in operators, shared by every subtask.
type Metrics struct {
	rulesHeld      *prometheus.GaugeVec
	lastRuleUpdate *prometheus.GaugeVec
	rulesRejected  *prometheus.CounterVec
	pendingExpired *prometheus.CounterVec

	rulesMatched    *prometheus.CounterVec
	rulesAlerts     *prometheus.CounterVec
	rulesEvalErrors *prometheus.CounterVec
	rulesEntries    *prometheus.GaugeVec
	rulesWaiting    *prometheus.GaugeVec
	rulesOverflow   *prometheus.CounterVec

	lateRouted     *prometheus.CounterVec
	lateDropped    *prometheus.CounterVec
	windowsFired   *prometheus.CounterVec
	windowsOpen    *prometheus.GaugeVec
	joinRows       *prometheus.GaugeVec
	ruleEvalErrors *prometheus.CounterVec
	mu             sync.Mutex                     // guards ruleLabels
	ruleLabels     map[string]map[string]struct{} // operator -> rule ids with their own label
}

// MaxRuleMetricLabels is the most distinct rule ids one rules operator
// gives their own rule label in kstreamd_rule_evaluation_errors_total;
// the errors of every further rule are counted under rule="other" (the
// first ids to fail keep their label for the process's life). Rule ids are
// user input, so the label set is bounded; GET /api/v1/rules has every
// rule's own count.
const MaxRuleMetricLabels = 100

// OtherRuleLabel is the rule label of the rules beyond MaxRuleMetricLabels.
const OtherRuleLabel = "other"

// NewMetrics registers with reg:
//
//	kstreamd_broadcast_rules{operator,subtask}                          rules held in broadcast state
//	kstreamd_broadcast_last_update_timestamp_seconds{operator,subtask}  Unix time of the last rule put or delete
//	kstreamd_broadcast_rules_rejected_total{operator}                   rule records that could not be decoded
//	kstreamd_rules_records_matched_total{operator}                      copies the rules operator routed (record x matching rule)
//	kstreamd_rules_alerts_total{operator}                               alerts the rules operator emitted
//	kstreamd_rules_eval_errors_total{operator}                          rule expressions that failed on a record (no match)
//	kstreamd_rule_evaluation_errors_total{operator,rule}                the same per rule: at most MaxRuleMetricLabels rules, the rest rule="other"
//	kstreamd_rules_window_entries{operator,subtask}                     window slices the rules operator holds
//	kstreamd_rules_waiting_records{operator,subtask}                    records the routing stage holds for the rules watermark (rule_time: event)
//	kstreamd_rules_wait_overflow_total{operator}                        records routed before the rules watermark passed them: the hold was full
//	kstreamd_operator_late_records_routed_total{operator}               late records an event-time operator wrote to its late side output
//	kstreamd_operator_late_records_dropped_total{operator}              late records an event-time operator dropped: no vertex reads its late side output
//	kstreamd_window_fired_total{operator}                               window results emitted when the watermark (or the clock) passed a window's end
//	kstreamd_window_open_windows{operator,subtask}                      windows (of every key) a window operator subtask holds in keyed state
//
// Per-rule counts are not metrics, as a rule id is unbounded (STYLE.md
// section 9): they are in GET /api/v1/rules. The one exception, evaluation
// errors, bounds its rule label with MaxRuleMetricLabels.
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
		rulesMatched: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kstreamd_rules_records_matched_total",
			Help: "Copies of records the rules operator routed: one per record and matching active rule.",
		}, []string{"operator"}),
		rulesAlerts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kstreamd_rules_alerts_total",
			Help: "Alerts the rules operator emitted.",
		}, []string{"operator"}),
		rulesEvalErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kstreamd_rules_eval_errors_total",
			Help: "Evaluations of a rule's filter, group_by or aggregate.of that failed on a record; the record does not match that rule.",
		}, []string{"operator"}),
		rulesEntries: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kstreamd_rules_window_entries",
			Help: "Window buckets (one per key and millisecond) the rules operator subtask holds in keyed state.",
		}, []string{"operator", "subtask"}),
		rulesWaiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kstreamd_rules_waiting_records",
			Help: "Records the rules routing stage subtask holds until the rules input's watermark passes them (rule_time: event).",
		}, []string{"operator", "subtask"}),
		rulesOverflow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kstreamd_rules_wait_overflow_total",
			Help: "Records the rules routing stage routed before the rules watermark passed them because max_waiting records were held (rule_time: event).",
		}, []string{"operator"}),
		lateRouted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kstreamd_operator_late_records_routed_total",
			Help: "Records an event-time operator judged late (behind the watermark by more than its allowed lateness) and wrote to its late side output <operator>.late.",
		}, []string{"operator"}),
		lateDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kstreamd_operator_late_records_dropped_total",
			Help: "Records an event-time operator judged late and dropped because no sink or operator reads its late side output <operator>.late.",
		}, []string{"operator"}),
		windowsFired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kstreamd_window_fired_total",
			Help: "Windows a window operator fired: on-time results emitted when the watermark (processing time: the clock) passed a window's end. Updates by late records within allowed_lateness and early firings are not counted.",
		}, []string{"operator"}),
		windowsOpen: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kstreamd_window_open_windows",
			Help: "Windows (over every key) a window operator subtask holds in keyed state: open ones and fired ones kept for their allowed lateness.",
		}, []string{"operator", "subtask"}),
		joinRows: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kstreamd_join_buffered_rows",
			Help: "Rows (both sides, every key) a join operator subtask holds in keyed state, waiting for the watermark to pass their interval.",
		}, []string{"operator", "subtask"}),
		ruleEvalErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kstreamd_rule_evaluation_errors_total",
			Help: "Records on which one of a rule's expressions (filter, group_by, aggregate.of) failed, the cost limit included, by rule: at most 100 rule ids per operator, the rest under rule=\"other\".",
		}, []string{"operator", "rule"}),
		ruleLabels: map[string]map[string]struct{}{},
	}
	for _, c := range []prometheus.Collector{m.ruleEvalErrors, m.rulesHeld, m.lastRuleUpdate, m.rulesRejected, m.pendingExpired, m.rulesMatched, m.rulesAlerts, m.rulesEvalErrors, m.rulesEntries, m.rulesWaiting, m.rulesOverflow,
		m.lateRouted, m.lateDropped, m.windowsFired, m.windowsOpen, m.joinRows} {
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

// LateRouted returns the counter of late records one operator wrote to
// its late side output.
func (m *Metrics) LateRouted(operator string) prometheus.Counter {
	return m.lateRouted.WithLabelValues(operator)
}

// LateDropped returns the counter of late records one operator dropped
// because nothing reads its late side output.
func (m *Metrics) LateDropped(operator string) prometheus.Counter {
	return m.lateDropped.WithLabelValues(operator)
}

// WindowsFired returns the fired-windows counter of one window operator.
func (m *Metrics) WindowsFired(operator string) prometheus.Counter {
	return m.windowsFired.WithLabelValues(operator)
}

// WindowsOpen returns the open-windows gauge of one window operator
// subtask.
func (m *Metrics) WindowsOpen(operator string, subtask int) prometheus.Gauge {
	return m.windowsOpen.WithLabelValues(operator, strconv.Itoa(subtask))
}

// JoinRows returns the buffered-rows gauge of one join operator subtask.
func (m *Metrics) JoinRows(operator string, subtask int) prometheus.Gauge {
	return m.joinRows.WithLabelValues(operator, strconv.Itoa(subtask))
}

// RuleEvaluationErrors returns the evaluation-error counter of rule id of
// one rules operator: its own series for the first MaxRuleMetricLabels ids
// that ask, the OtherRuleLabel series for the rest. Safe for concurrent use.
func (m *Metrics) RuleEvaluationErrors(operator, id string) prometheus.Counter {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := m.ruleLabels[operator]
	if seen == nil {
		seen = map[string]struct{}{}
		m.ruleLabels[operator] = seen
	}
	if _, ok := seen[id]; !ok {
		if len(seen) >= MaxRuleMetricLabels || id == OtherRuleLabel {
			id = OtherRuleLabel
		} else {
			seen[id] = struct{}{}
		}
	}
	return m.ruleEvalErrors.WithLabelValues(operator, id)
}
