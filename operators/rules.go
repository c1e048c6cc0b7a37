package operators

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kstreamd/kstreamd/expression"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// RulesType is the pipeline name of the rules operator.
const RulesType = "rules"

// RulesRouteSuffix names the routing stage of a rules operator: operator
// "fraud" runs as the vertices "fraud.route" and "fraud".
const RulesRouteSuffix = ".route"

// RulesExportOutput is the rules operator's side output of exported rules
// (control record export), read as "<operator>.rules".
const RulesExportOutput = "rules"

// RulesWindowState is the rules operator's keyed state of the earlier
// layout: per key (rule id and group values), record time in ms since the
// epoch to the window bucket of that millisecond, as JSON. Read only to
// migrate a restored checkpoint into RulesSliceState and RulesAggState
// (RulesEvaluator.Open); nothing writes it.
var RulesWindowState = state.MapStateDescriptor[int64, RuleBucket]{
	Name:            "rules-window",
	KeySerializer:   state.Int64Serializer{},
	ValueSerializer: state.JSONSerializer[RuleBucket]{},
}

// RuleBucket is what one key kept, in the earlier layout
// (RulesWindowState), for the records of one millisecond: the
// rule shape it was written under, the window length then (ms), the number
// of records and, for every fn but count, their aggregate inputs (JSON).
type RuleBucket struct {
	Shape    string            `json:"shape"`
	WindowMs int64             `json:"window_ms"`
	N        int64             `json:"n"`
	In       []json.RawMessage `json:"in,omitempty"`
}

// RuleTime is the rule_time param of the rules operator.
type RuleTime string

// The rule times.
const (
	// RuleTimeProcessing applies a rule change to the records routed after
	// it arrives (Flink's behaviour; the default).
	RuleTimeProcessing RuleTime = "processing"
	// RuleTimeEvent applies a rule change to the records whose timestamp is
	// at or after the rule record's own timestamp.
	RuleTimeEvent RuleTime = "event"
)

// UnmarshalText implements encoding.TextUnmarshaler.
func (t *RuleTime) UnmarshalText(text []byte) error {
	return setEnum(t, text, RuleTimeProcessing, RuleTimeEvent)
}

// RulesParams are the params of the rules operator:
//
//	params:
//	  rule_time: processing        # or event
//	  max_waiting: 100000          # rule_time event: records held per routing subtask
//	  max_expression_length: 1024  # bytes of one rule expression
//	  max_expression_nodes: 200    # syntax nodes of one rule expression
//	  max_expression_cost: 10000   # CEL cost units of one evaluation
type RulesParams struct {
	// RuleTime says from which records on a rule change applies; default
	// RuleTimeProcessing.
	RuleTime RuleTime `yaml:"rule_time" doc:"processing (default: a rule change applies to the records routed after it arrives, as in Flink) or event (to the records at or after the rule record's timestamp, so a replay gives the same alerts; the routing stage holds each record until the rules source's watermark passes it, and the rules source must set watermark.idleness)."`
	// MaxWaiting bounds the records one routing subtask holds for the
	// rules watermark with rule_time event; beyond it the earliest tenth
	// is routed at once. Default DefaultRulesMaxWaiting; >= 1.
	MaxWaiting int `yaml:"max_waiting" doc:"rule_time event: the most records one routing subtask holds until the rules watermark passes them (default 100000); beyond it the earliest tenth is routed at once with the rules known, counted in kstreamd_rules_wait_overflow_total."`
	// MaxExpressionLength, MaxExpressionNodes and MaxExpressionCost are
	// the limits every rule expression (filter, group_by, aggregate.of)
	// compiles under (expression.Limits): source bytes, syntax nodes and
	// CEL cost units per evaluation; defaults DefaultRuleMaxLength,
	// DefaultRuleMaxNodes, DefaultRuleMaxCost; each >= 1.
	MaxExpressionLength int `yaml:"max_expression_length" doc:"the longest rule expression (filter, group_by entry, aggregate.of) accepted, in bytes (default 1024); a rule with a longer one is refused (the rules source's on_error, reason invalid)."`
	MaxExpressionNodes  int `yaml:"max_expression_nodes" doc:"the most syntax nodes of one rule expression, counted after macro expansion (default 200); a rule over it is refused."`
	MaxExpressionCost   int `yaml:"max_expression_cost" doc:"the most CEL cost units one evaluation of a rule expression may take (default 10000): a rule whose estimated minimum cost exceeds it is refused; an evaluation that reaches it fails (that record does not match the rule), counted in the rule's errors and kstreamd_rule_evaluation_errors_total."`
}

// limits returns the expression limits p sets.
func (p *RulesParams) limits() expression.Limits {
	return expression.Limits{MaxLength: p.MaxExpressionLength, MaxNodes: p.MaxExpressionNodes, MaxCost: uint64(max(p.MaxExpressionCost, 0))}
}

// DefaultRulesMaxWaiting is the default of RulesParams.MaxWaiting.
const DefaultRulesMaxWaiting = 100_000

// CheckParams implements ParamsChecker.
func (p *RulesParams) CheckParams(report func(field, msg string)) {
	if p.MaxWaiting < 1 {
		report("max_waiting", fmt.Sprintf("must be at least 1, got %d", p.MaxWaiting))
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"max_expression_length", p.MaxExpressionLength}, {"max_expression_nodes", p.MaxExpressionNodes}, {"max_expression_cost", p.MaxExpressionCost}} {
		if f.v < 1 {
			report(f.name, fmt.Sprintf("must be at least 1, got %d", f.v))
		}
	}
}

// UsesBroadcastTime implements BroadcastTimeParams: true with rule_time
// event.
func (p *RulesParams) UsesBroadcastTime() bool { return p.RuleTime == RuleTimeEvent }

// rulesFactory registers RulesType and, as its Router, the routing stage.
func rulesFactory() Factory {
	params := func() any {
		return &RulesParams{RuleTime: RuleTimeProcessing, MaxWaiting: DefaultRulesMaxWaiting,
			MaxExpressionLength: DefaultRuleMaxLength, MaxExpressionNodes: DefaultRuleMaxNodes, MaxExpressionCost: DefaultRuleMaxCost}
	}
	limitsOf := func(p any) expression.Limits {
		if rp, ok := p.(*RulesParams); ok {
			return rp.limits()
		}
		return DefaultRuleLimits()
	}
	config := func(ctx FactoryContext) RulesConfig {
		c := RulesConfig{RuleTime: RuleTimeProcessing, MaxWaiting: DefaultRulesMaxWaiting, Limits: limitsOf(ctx.Params), Operator: ctx.Operator, Metrics: ctx.Metrics, Logger: ctx.Logger, SourceSubtask: ctx.SourceSubtask}
		if rp, ok := ctx.Params.(*RulesParams); ok {
			c.RuleTime, c.MaxWaiting = rp.RuleTime, rp.MaxWaiting
		}
		return c
	}
	router := &Factory{
		Type:   RulesType + RulesRouteSuffix,
		Doc:    "The routing stage of rules: one copy of each record per matching rule, keyed by rule id and group.",
		Traits: Traits{Broadcast: true},
		Params: params,
		New: func(ctx FactoryContext) (any, error) {
			return NewRulesRouter(config(ctx)), nil
		},
	}
	return Factory{
		Type:        RulesType,
		Doc:         "Dynamic rules from a broadcast topic (Flink's fraud-detection pattern): per rule a filter, group_by, windowed aggregate and limit; alerts at once.",
		Traits:      Traits{Keyed: true, Broadcast: true},
		Params:      params,
		State:       []string{RulesSliceState.Name, RulesPageState.Name, RulesAggState.Name, RulesDistinctState.Name, state.TimersStateName, "rules (broadcast)"},
		SideOutputs: []string{RulesExportOutput},
		CheckBroadcast: func(key, value []byte) error {
			_, err := DecodeRuleRecord(key, value)
			return err
		},
		NewCheckBroadcast: func(params any) func(key, value []byte) error {
			lim := limitsOf(params)
			return func(key, value []byte) error {
				_, err := DecodeRuleRecordLimits(key, value, lim)
				return err
			}
		},
		Router: router,
		New: func(ctx FactoryContext) (any, error) {
			return NewRulesEvaluator(config(ctx)), nil
		},
	}
}

// RulesConfig configures both stages of the rules operator.
type RulesConfig struct {
	RuleTime RuleTime
	// MaxWaiting bounds the records a routing subtask holds with
	// RuleTimeEvent; 0 means DefaultRulesMaxWaiting.
	MaxWaiting int
	// Limits bound every rule expression; the zero value means
	// DefaultRuleLimits (NewRulesRouter, NewRulesEvaluator).
	Limits expression.Limits
	// Operator is the operator's configured name (the evaluator's vertex).
	Operator string
	// Metrics may be nil.
	Metrics *Metrics
	// Logger may be nil.
	Logger *slog.Logger
	// SourceSubtask is FactoryContext.SourceSubtask: after a restore a
	// routing subtask keeps the waiting records of the partitions the
	// source subtask it reads (forward edge) reads; nil, or a partition
	// it does not know: partition modulo parallelism.
	SourceSubtask func(topic string, partition int32) (int, bool)
}

// ruleVersion is where a rule record was read: its partition and offset
// in the rules topic. The records of one rule id share a partition (the
// key is the id), so their offsets order them.
type ruleVersion struct {
	P int32 `json:"p"`
	O int64 `json:"o"`
}

func (v ruleVersion) String() string { return fmt.Sprintf("%d:%d", v.P, v.O) }

// RuleStatus is one rule as a subtask holds it, for GET /api/v1/rules.
// The counts start at zero when the subtask starts (they are not part of
// checkpoints).
type RuleStatus struct {
	ID string `json:"id"`
	// State is active or paused.
	State RuleState `json:"state"`
	// Version is the rule record's partition:offset.
	Version string `json:"version"`
	// Since is the rule record's timestamp (from when it applies with
	// rule_time: event).
	Since time.Time `json:"since"`
	// Updated is when the subtask applied the rule (wall clock).
	Updated time.Time `json:"updated"`
	// RecordsMatched counts the records routed for the rule (routing
	// stage).
	RecordsMatched int64 `json:"records_matched"`
	// Alerts counts the alerts emitted, StateEntries the window slices
	// (one per key and millisecond with records) held (keyed stage).
	Alerts       int64 `json:"alerts"`
	StateEntries int64 `json:"state_entries"`
	// Errors counts the records on which one of the rule's expressions
	// (filter, group_by, aggregate.of) failed to evaluate, the cost limit
	// included (routing stage); such a record does not match the rule.
	// LastError is the last of those errors, empty while there is none.
	Errors    int64  `json:"errors"`
	LastError string `json:"last_error,omitempty"`
	// Rule is the rule's JSON.
	Rule json.RawMessage `json:"rule"`
}

// RulesReporter is implemented by the functions of both rules stages:
// RuleStatuses lists the rules the subtask holds, sorted by id. It is safe
// to call from any goroutine.
type RulesReporter interface {
	RuleStatuses() []RuleStatus
}

// ruleCounters are the per-rule counts, updated on the subtask goroutine
// with atomics and read by RuleStatuses from others.
type ruleCounters struct {
	matched, alerts, entries, errors atomic.Int64
	lastError                        atomic.Pointer[string]

	// errMetric is the rule's kstreamd_rule_evaluation_errors_total
	// counter, looked up at the first error; only the subtask goroutine
	// touches it.
	errMetric prometheus.Counter
}

// ruleView is what RuleStatuses shows of one rule; immutable once
// published.
type ruleView struct {
	rule    *CompiledRule
	version ruleVersion
	since   time.Time
	updated time.Time
	counts  *ruleCounters
}

// ruleStatusBoard publishes a subtask's rules to RuleStatuses
// (copy-on-write: the subtask goroutine replaces the map, readers load it).
type ruleStatusBoard struct {
	views  atomic.Pointer[map[string]ruleView]
	mu     sync.Mutex // guards counts (written on the subtask goroutine, read by publish)
	counts map[string]*ruleCounters
}

// counter returns the counters of rule id, kept across updates of the rule
// and dropped with it.
func (b *ruleStatusBoard) counter(id string) *ruleCounters {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.counts == nil {
		b.counts = map[string]*ruleCounters{}
	}
	c := b.counts[id]
	if c == nil {
		c = &ruleCounters{}
		b.counts[id] = c
	}
	return c
}

func (b *ruleStatusBoard) publish(views map[string]ruleView) {
	b.mu.Lock()
	for id := range b.counts {
		if _, ok := views[id]; !ok {
			delete(b.counts, id)
		}
	}
	b.mu.Unlock()
	b.views.Store(&views)
}

// statuses implements RuleStatuses.
func (b *ruleStatusBoard) statuses() []RuleStatus {
	p := b.views.Load()
	if p == nil {
		return []RuleStatus{}
	}
	out := make([]RuleStatus, 0, len(*p))
	for id, v := range *p {
		s := RuleStatus{ID: id, Version: v.version.String(), Since: v.since, Updated: v.updated, Rule: v.rule.JSON, State: v.rule.Spec.State}
		if v.counts != nil {
			s.RecordsMatched, s.Alerts, s.StateEntries = v.counts.matched.Load(), v.counts.alerts.Load(), v.counts.entries.Load()
			s.Errors = v.counts.errors.Load()
			if e := v.counts.lastError.Load(); e != nil {
				s.LastError = *e
			}
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b RuleStatus) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// routerRule is one version of a rule at the routing stage: nil rule for a
// deletion.
type routerRule struct {
	At      int64         // the rule record's timestamp, ms
	Version ruleVersion   // where it was read
	Rule    *CompiledRule // nil: deleted
	Updated time.Time
	head    []byte  // the envelope head of this version, built at its first copy
	keyHead []byte  // the routing key's start, `[` and the id as JSON, built at its first copy
	eq      *ruleEq // the filter as operand == constant, found at its first record
}

// ruleEq is a rule filter of the form operand == constant
// (expression.Program.EqualsConstant), op nil when it is not: the routing
// stage evaluates each distinct operand once per record for every rule
// comparing it (rules keyed by one field, or by amount % 10 as the bench's
// rules), and a rule whose constant differs from an int or string operand
// value is not matched without evaluating its filter.
type ruleEq struct {
	op *expression.Program // interned by source (RulesRouter.operands)
	c  any                 // int64 or string
}

// operandValue is an operand's value on the record being routed.
type operandValue struct {
	op  *expression.Program
	v   any
	err error
}

// maxRuleHistory bounds the versions the routing stage keeps per rule id
// with rule_time: event (a record older than all of them sees the oldest).
const maxRuleHistory = 16

// RulesRouter is the routing stage of the rules operator (Flink's
// DynamicKeyFunction): a BroadcastProcessFunction that holds the rules,
// compiled once when they arrive, and routes one copy of every record per
// active rule whose filter it passes, keyed by the JSON array [rule id,
// group values...], its value an envelope carrying what the keyed stage
// needs: the rule's id, version, shape, fn, window, limit and emit, the
// group, the aggregate input and the record. Because the envelope carries
// the rule's evaluation part, the keyed stage never misses the rule a copy
// was routed for, whatever the timing of the two stages' broadcast inputs,
// also across restores.
//
// A filter, group_by or of that fails on a record (a missing field, a sum
// over a string, the expression cost limit reached) only means the record
// does not match that rule; it is counted in the rule's status (errors,
// last_error in GET /api/v1/rules), in kstreamd_rules_eval_errors_total and
// kstreamd_rule_evaluation_errors_total{operator,rule} (bounded: see
// MaxRuleMetricLabels), and logged at most once per 10 s per subtask.
//
// Broadcast state "rules": the rule versions by id, as JSON (the last one;
// with rule_time: event up to maxRuleHistory, by timestamp).
//
// With rule_time: event a record waits until the rules input's watermark
// passes its timestamp (every rule record at or before it has arrived,
// whatever the timing of the two inputs), then it is routed, the waiting
// records in timestamp order (ties by partition and offset); while every
// rules channel is idle nothing waits. At most MaxWaiting records wait
// per subtask: beyond that the earliest tenth is routed at once with the
// rules known (kstreamd_rules_wait_overflow_total). The waiting records are
// operator state "rules-waiting" (union), so checkpoints cover them; a
// restored subtask keeps those of the partitions its input subtask reads
// (RulesConfig.SourceSubtask), so one partition's records still leave one
// subtask in order, also after a restore at another parallelism.
type RulesRouter struct {
	cfg     RulesConfig
	history map[string][]routerRule
	ids     []string // sorted ids in history
	env     RecordEnv
	board   ruleStatusBoard
	logger  *slog.Logger

	// rulesWM is the rules input's watermark, ms (math.MaxInt64 while it
	// is idle); waiting the records held for it (RuleTimeEvent only),
	// sorted lazily (unsorted after an append).
	rulesWM  int64
	waiting  []runtime.Record
	unsorted bool
	waitList *state.OperatorListState[waitingRecord]
	name     string // this stage's operator name (OpenContext.Operator)
	subtask  int
	parallel int

	matched, evalErrors, bad, overflow prometheus.Counter
	held, updated, waitingGauge        prometheus.Gauge
	buf                                []byte

	// operands interns the filters' equality operands by source; memo
	// holds those evaluated on the record being routed.
	operands map[string]*expression.Program
	memo     []operandValue

	// now is the clock of the error log's rate limit; lastErrLog when it
	// last logged, errsUnlogged the failures since.
	now          func() time.Time
	lastErrLog   time.Time
	errsUnlogged int64
}

// RulesWaitingState is the routing stage's operator state with rule_time
// event: the records waiting for the rules watermark. Part of the
// checkpoint format.
var RulesWaitingState = state.ListStateDescriptor[waitingRecord]{
	Name:       "rules-waiting",
	Serializer: state.JSONSerializer[waitingRecord]{},
}

// waitingRecord is a waiting record in RulesWaitingState.
type waitingRecord struct {
	Key     []byte           `json:"key,omitempty"`
	Value   []byte           `json:"value"`
	TS      int64            `json:"ts"`
	Headers []runtime.Header `json:"headers,omitempty"`
	Topic   string           `json:"topic,omitempty"`
	P       int32            `json:"p"`
	O       int64            `json:"o"`
	Format  runtime.Format   `json:"format,omitempty"`
}

// NewRulesRouter returns the routing function of one subtask.
func NewRulesRouter(cfg RulesConfig) *RulesRouter {
	if cfg.MaxWaiting <= 0 {
		cfg.MaxWaiting = DefaultRulesMaxWaiting
	}
	if cfg.Limits == (expression.Limits{}) {
		cfg.Limits = DefaultRuleLimits()
	}
	return &RulesRouter{cfg: cfg, history: map[string][]routerRule{}, rulesWM: math.MinInt64, now: time.Now}
}

// Open implements ProcessFunction.
func (r *RulesRouter) Open(ctx OpenContext) error {
	r.logger = r.cfg.Logger
	if r.logger == nil {
		r.logger = slog.New(slog.DiscardHandler)
	}
	r.name, r.subtask, r.parallel = ctx.Operator, ctx.Subtask, ctx.Parallelism
	if m := r.cfg.Metrics; m != nil {
		r.matched = m.rulesMatched.WithLabelValues(r.cfg.Operator)
		r.evalErrors = m.rulesEvalErrors.WithLabelValues(r.cfg.Operator)
		r.bad = m.RulesRejected(ctx.Operator)
		r.held = m.RulesHeld(ctx.Operator, ctx.Subtask)
		r.updated = m.LastRuleUpdate(ctx.Operator, ctx.Subtask)
		r.overflow = m.rulesOverflow.WithLabelValues(ctx.Operator)
	}
	r.publish()
	return nil
}

// BroadcastWatermarks implements BroadcastWatermarkFunction: true with
// rule_time event.
func (r *RulesRouter) BroadcastWatermarks() bool { return r.cfg.RuleTime == RuleTimeEvent }

// ProcessBroadcastWatermark implements BroadcastWatermarkFunction: the
// waiting records the rules watermark wm passed are routed, in timestamp
// order.
func (r *RulesRouter) ProcessBroadcastWatermark(_ context.Context, wm time.Time, out Collector) error {
	r.rulesWM = wm.UnixMilli()
	if wm.Equal(runtime.MaxWatermark) {
		r.rulesWM = math.MaxInt64
	}
	if len(r.waiting) == 0 {
		return nil
	}
	r.sortWaiting()
	n := 0
	for n < len(r.waiting) && r.waiting[n].Timestamp.UnixMilli() <= r.rulesWM {
		if err := r.route(r.waiting[n], out); err != nil {
			return err
		}
		n++
	}
	r.waiting = slices.Delete(r.waiting, 0, n)
	r.setWaiting()
	return nil
}

// sortWaiting sorts the waiting records by timestamp, partition and offset.
func (r *RulesRouter) sortWaiting() {
	if !r.unsorted {
		return
	}
	slices.SortStableFunc(r.waiting, waitingOrder)
	r.unsorted = false
}

// waitingOrder orders waiting records by timestamp, then where they were
// read (topic, partition, offset).
func waitingOrder(a, b runtime.Record) int {
	if c := a.Timestamp.Compare(b.Timestamp); c != 0 {
		return c
	}
	if c := strings.Compare(a.Origin.Topic, b.Origin.Topic); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Origin.Partition, b.Origin.Partition); c != 0 {
		return c
	}
	return cmp.Compare(a.Origin.Offset, b.Origin.Offset)
}

func (r *RulesRouter) setWaiting() {
	if r.waitingGauge != nil {
		r.waitingGauge.Set(float64(len(r.waiting)))
	}
}

// InitializeState implements CheckpointedFunction: of a restore's waiting
// records (union: every subtask sees all) it keeps those of the partitions
// its input subtask reads.
func (r *RulesRouter) InitializeState(ctx FunctionInitializationContext) error {
	l, err := state.GetUnionListState(ctx.OperatorStateStore, RulesWaitingState)
	if err != nil {
		return fmt.Errorf("operators: %s: %w", r.cfg.Operator, err)
	}
	r.waitList = l
	ws, err := l.Get()
	if err != nil {
		return fmt.Errorf("operators: %s: restore waiting records: %w", r.cfg.Operator, err)
	}
	n := max(1, r.parallel)
	owner := func(topic string, p int32) int {
		if r.cfg.SourceSubtask != nil {
			if sub, ok := r.cfg.SourceSubtask(topic, p); ok {
				return sub % n
			}
		}
		return int(p) % n
	}
	r.waiting = r.waiting[:0]
	for _, w := range ws {
		if owner(w.Topic, w.P) != r.subtask {
			continue
		}
		r.waiting = append(r.waiting, runtime.Record{Key: w.Key, Value: w.Value, Timestamp: time.UnixMilli(w.TS), Headers: w.Headers,
			Origin: runtime.Origin{Topic: w.Topic, Partition: w.P, Offset: w.O}, Format: w.Format})
	}
	r.unsorted = len(r.waiting) > 1
	// The gauge's series appears only now, with the restored count: made
	// in Open, it read 0 while a restore still decoded the waiting
	// records (union state: every subtask decodes all of them), and a
	// reader waiting for "every subtask's series is 0" (nothing waits)
	// took that for a release (cmd/kstreamd TestRulesKillRestore read
	// its alerts before any was routed).
	if m := r.cfg.Metrics; m != nil && r.waitingGauge == nil {
		r.waitingGauge = m.rulesWaiting.WithLabelValues(r.name, strconv.Itoa(r.subtask))
	}
	r.setWaiting()
	return nil
}

// SnapshotState implements CheckpointedFunction: the waiting records go to
// RulesWaitingState.
func (r *RulesRouter) SnapshotState(FunctionSnapshotContext) error {
	ws := make([]waitingRecord, len(r.waiting))
	for i, rec := range r.waiting {
		ws[i] = waitingRecord{Key: rec.Key, Value: rec.Value, TS: rec.Timestamp.UnixMilli(), Headers: rec.Headers,
			Topic: rec.Origin.Topic, P: rec.Origin.Partition, O: rec.Origin.Offset, Format: rec.Format}
	}
	return r.waitList.Update(ws)
}

// RuleStatuses implements RulesReporter.
func (r *RulesRouter) RuleStatuses() []RuleStatus { return r.board.statuses() }

// current returns the version of rule id that applies to a record at ts
// (ms): the last with processing rule time; the last at or before ts with
// event rule time. Nil when none.
func (r *RulesRouter) current(id string, ts int64) *routerRule {
	h := r.history[id]
	if len(h) == 0 {
		return nil
	}
	if r.cfg.RuleTime != RuleTimeEvent {
		return &h[len(h)-1]
	}
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].At <= ts {
			return &h[i]
		}
	}
	return nil
}

// ProcessElement implements ProcessFunction: route rec once per matching
// rule, in rule id order; with rule_time event, once the rules watermark
// passed its timestamp.
func (r *RulesRouter) ProcessElement(_ context.Context, rec runtime.Record, out Collector) error {
	if r.cfg.RuleTime == RuleTimeEvent && rec.Timestamp.UnixMilli() > r.rulesWM {
		if n := len(r.waiting); n > 0 && waitingOrder(rec, r.waiting[n-1]) < 0 {
			r.unsorted = true
		}
		r.waiting = append(r.waiting, rec)
		if len(r.waiting) > r.cfg.MaxWaiting {
			// Full: the earliest tenth goes at once (a tenth, not one, so a
			// full hold does not move the rest for every record).
			r.sortWaiting()
			n := max(1, r.cfg.MaxWaiting/10)
			for _, w := range r.waiting[:n] {
				if err := r.route(w, out); err != nil {
					return err
				}
			}
			r.waiting = slices.Delete(r.waiting, 0, n)
			if r.overflow != nil {
				r.overflow.Add(float64(n))
			}
		}
		r.setWaiting()
		return nil
	}
	return r.route(rec, out)
}

// route routes rec once per matching rule, in rule id order.
func (r *RulesRouter) route(rec runtime.Record, out Collector) error {
	if len(r.ids) == 0 {
		return nil
	}
	env := r.env.Reset(&rec)
	ts := rec.Timestamp.UnixMilli()
	var recJSON []byte
	r.memo = r.memo[:0]
	for _, id := range r.ids {
		v := r.current(id, ts)
		if v == nil || v.Rule == nil || v.Rule.Spec.State != RuleActive {
			continue
		}
		cr := v.Rule
		passed := false
		if v.eq == nil {
			v.eq = r.equality(cr)
		}
		if v.eq.op != nil {
			ov := r.operand(v.eq.op, env)
			switch ov.v.(type) {
			case int64, string:
				if ov.err == nil {
					if ov.v != v.eq.c {
						continue // the filter is false
					}
					passed = true
				}
			}
		}
		group, in, ok, err := r.match(cr, env, passed)
		if err != nil {
			r.evalFailed(id, r.board.counter(id), &rec, err)
		}
		if !ok {
			continue
		}
		if recJSON == nil {
			recJSON = recordJSON(&rec, env)
		}
		if v.head == nil {
			v.head = appendEnvelopeHead(nil, cr, v.Version)
			v.keyHead = appendRuleKeyHead(nil, id)
		}
		key := appendRuleKeyGroup(v.keyHead, group)
		r.buf = appendEnvelope(r.buf[:0], v.head, group, in, recJSON)
		val := slices.Clone(r.buf)
		if err := out.Collect(runtime.Record{Key: key, Value: val, Timestamp: rec.Timestamp, Headers: rec.Headers, Origin: rec.Origin}); err != nil {
			return err
		}
		r.board.counter(id).matched.Add(1)
		if r.matched != nil {
			r.matched.Inc()
		}
	}
	return nil
}

// equality returns cr's filter as operand == constant, its operand
// interned (op nil when the filter is not of that form).
func (r *RulesRouter) equality(cr *CompiledRule) *ruleEq {
	if !cr.filter.IsSet() {
		return &ruleEq{}
	}
	op, c, ok := cr.filter.Program().EqualsConstant()
	if !ok {
		return &ruleEq{}
	}
	if r.operands == nil {
		r.operands = map[string]*expression.Program{}
	}
	if known, ok := r.operands[op.Source()]; ok {
		op = known
	} else {
		r.operands[op.Source()] = op
	}
	return &ruleEq{op: op, c: c}
}

// operand returns op's value on the record of env, evaluated once per
// record (memo, reset by route).
func (r *RulesRouter) operand(op *expression.Program, env *expression.Env) operandValue {
	for _, m := range r.memo {
		if m.op == op {
			return m
		}
	}
	v, err := op.Eval(env)
	m := operandValue{op: op, v: v, err: err}
	r.memo = append(r.memo, m)
	return m
}

// match evaluates cr's filter (unless passed: known true), group_by and
// of on env; ok is false when the record does not match: the filter is
// false, or an evaluation failed, err then saying which expression and
// why.
func (r *RulesRouter) match(cr *CompiledRule, env *expression.Env, passed bool) (group []json.RawMessage, in json.RawMessage, ok bool, err error) {
	fail := func(field string, err error) ([]json.RawMessage, json.RawMessage, bool, error) {
		return nil, nil, false, fmt.Errorf("%s: %w", field, err)
	}
	if cr.filter.IsSet() && !passed {
		res, err := cr.filter.Program().Eval(env)
		if err != nil {
			return fail("filter", err)
		}
		if b, isBool := res.(bool); !isBool {
			return fail("filter", fmt.Errorf("result %T is not a bool", res))
		} else if !b {
			return nil, nil, false, nil
		}
	}
	group = make([]json.RawMessage, len(cr.groupBy))
	for i, g := range cr.groupBy {
		v, err := g.Program().Eval(env)
		if err != nil {
			return fail(fmt.Sprintf("group_by[%d]", i), err)
		}
		raw, err := expression.EncodeJSON(v)
		if err != nil {
			return fail(fmt.Sprintf("group_by[%d]", i), err)
		}
		group[i] = raw
	}
	switch AggregateFn(cr.Spec.Aggregate.Fn) {
	case AggCount:
	case AggCountDistinct:
		v, err := cr.of.Program().Eval(env)
		if err != nil {
			return fail("aggregate.of", err)
		}
		if in, err = expression.EncodeJSON(v); err != nil {
			return fail("aggregate.of", err)
		}
	default:
		v, err := cr.of.Program().Eval(env)
		if err != nil {
			return fail("aggregate.of", err)
		}
		n, isNum := toNumber(v)
		if !isNum {
			return fail("aggregate.of", fmt.Errorf("result %T is not a number", v))
		}
		in = n.appendJSON(nil)
	}
	return group, in, true, nil
}

// evalFailed counts a failed evaluation of rule id (err) in the rule's
// status, in kstreamd_rules_eval_errors_total and, bounded,
// kstreamd_rule_evaluation_errors_total, and logs it at most once per
// ruleErrorLogInterval per subtask, the line counting the failures since
// the previous line, its own included.
func (r *RulesRouter) evalFailed(id string, c *ruleCounters, rec *runtime.Record, err error) {
	msg := err.Error()
	c.errors.Add(1)
	c.lastError.Store(&msg)
	if r.evalErrors != nil {
		r.evalErrors.Inc()
	}
	if m := r.cfg.Metrics; m != nil {
		if c.errMetric == nil {
			c.errMetric = m.RuleEvaluationErrors(r.cfg.Operator, id)
		}
		c.errMetric.Inc()
	}
	r.errsUnlogged++
	now := r.now()
	if !r.lastErrLog.IsZero() && now.Sub(r.lastErrLog) < ruleErrorLogInterval {
		return
	}
	r.logger.Warn("rule evaluation failed; the record does not match the rule", "rule", id, "err", msg,
		"topic", rec.Origin.Topic, "partition", rec.Origin.Partition, "offset", rec.Origin.Offset,
		"errors_since_last_log", r.errsUnlogged)
	r.lastErrLog, r.errsUnlogged = now, 0
}

// ruleErrorLogInterval is the least time between two "rule evaluation
// failed" log lines of one routing subtask.
const ruleErrorLogInterval = 10 * time.Second

// recordJSON is rec's value as JSON: as it is when it is JSON, else a JSON
// string of its bytes. JSON the source or env's expressions already
// checked (rec.CheckedJSON, the Doc env read the fields from) is not
// checked again.
func recordJSON(rec *runtime.Record, env *expression.Env) []byte {
	if rec.Format == runtime.FormatJSON && (rec.CheckedJSON() || env.Doc() != nil && env.Doc().CheckedJSON() || json.Valid(rec.Value)) {
		return rec.Value
	}
	b, _ := json.Marshal(string(rec.Value)) // a string: cannot fail
	return b
}

// appendRuleKey appends the routing key: the JSON array [id, group...].
func appendRuleKey(b []byte, id string, group []json.RawMessage) []byte {
	return appendRuleKeyGroup(appendRuleKeyHead(b, id), group)
}

// appendRuleKeyHead appends the start of id's routing keys: '[' and the id
// as JSON.
func appendRuleKeyHead(b []byte, id string) []byte {
	idj, _ := json.Marshal(id)
	return append(append(b, '['), idj...)
}

// appendRuleKeyGroup returns a new routing key: head (appendRuleKeyHead),
// the group values and ']', in one allocation of its size.
func appendRuleKeyGroup(head []byte, group []json.RawMessage) []byte {
	n := len(head) + 1
	for _, g := range group {
		n += 1 + len(g)
	}
	b := append(make([]byte, 0, n), head...)
	for _, g := range group {
		b = append(append(b, ','), g...)
	}
	return append(b, ']')
}

// ruleOfKey returns the rule id of a routing key.
func ruleOfKey(key []byte) string {
	var parts []json.RawMessage
	if json.Unmarshal(key, &parts) != nil || len(parts) == 0 {
		return ""
	}
	var id string
	_ = json.Unmarshal(parts[0], &id)
	return id
}

// ruleEnvelope is the value of a routed record: what the keyed stage
// needs to evaluate one rule on one record. It travels in the binary form
// appendEnvelope writes; the JSON tags are the earlier form's, which the
// keyed stage still reads (decodeEnvelope).
type ruleEnvelope struct {
	Rule      string            `json:"rule"`
	Version   ruleVersion       `json:"version"`
	Shape     string            `json:"shape"`
	Fn        AggregateFn       `json:"fn"`
	WindowMs  int64             `json:"window_ms"`
	SliceMs   int64             `json:"-"` // binary form only
	AlertWhen string            `json:"alert_when"`
	Op        string            `json:"op"`
	Limit     float64           `json:"limit"`
	GroupBy   []string          `json:"group_by"`
	Group     []json.RawMessage `json:"group"`
	In        json.RawMessage   `json:"in,omitempty"`
	Emit      json.RawMessage   `json:"emit,omitempty"`
	Record    json.RawMessage   `json:"record"`

	head *envelopeHead // the decoded binary head; nil for the JSON form
}

// envelopeMagic is the first byte of a binary envelope (a JSON envelope
// starts with '{').
const envelopeMagic = 0xB1

// appendEnvelopeHead appends the part of an envelope that is the same for
// every copy routed for one version of a rule: id, version, shape, fn,
// window (ms), alert_when, op, limit (IEEE 754 bits), group_by and emit,
// each length-prefixed (uvarint) or varint, and for a rule with a slice
// (RuleSpec.Slice) its width in ms (varint).
func appendEnvelopeHead(b []byte, cr *CompiledRule, v ruleVersion) []byte {
	b = appendBytes(b, []byte(cr.Spec.ID))
	b = binary.AppendVarint(b, int64(v.P))
	b = binary.AppendVarint(b, v.O)
	b = appendBytes(b, []byte(cr.Shape))
	b = appendBytes(b, []byte(cr.Spec.Aggregate.Fn))
	b = binary.AppendVarint(b, cr.Window.Milliseconds())
	b = appendBytes(b, []byte(cr.Spec.AlertWhen))
	b = appendBytes(b, []byte(cr.Op))
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(cr.Limit))
	b = binary.AppendUvarint(b, uint64(len(cr.Spec.GroupBy)))
	for _, g := range cr.Spec.GroupBy {
		b = appendBytes(b, []byte(g))
	}
	b = appendBytes(b, cr.Spec.Emit)
	if cr.Slice > 0 {
		// Only for a hopping rule (a head without it is the earlier
		// one, byte for byte; an earlier decoder ignores it).
		b = binary.AppendVarint(b, cr.Slice.Milliseconds())
	}
	return b
}

// appendEnvelope appends the binary envelope of one routed copy: the magic
// byte, the head (appendEnvelopeHead) length-prefixed, the group values
// (JSON) counted and length-prefixed, the aggregate input (a flag byte,
// then the JSON) and the record's JSON as the rest.
func appendEnvelope(b, head []byte, group []json.RawMessage, in, rec []byte) []byte {
	b = appendBytes(append(b, envelopeMagic), head)
	b = binary.AppendUvarint(b, uint64(len(group)))
	for _, g := range group {
		b = appendBytes(b, g)
	}
	if in != nil {
		b = appendBytes(append(b, 1), in)
	} else {
		b = append(b, 0)
	}
	return append(b, rec...)
}

// envelopeHead is a decoded envelope head, cached by the keyed stage.
type envelopeHead struct {
	Rule    string
	Version ruleVersion
	Shape   string
	Fn      AggregateFn
	// WindowMs is the windows' reach below their newest slice
	// (CompiledRule.windowMs): the rule's window less SliceMs.
	WindowMs  int64
	SliceMs   int64
	AlertWhen string
	Op        string
	Limit     float64
	GroupBy   []string
	Emit      json.RawMessage

	// The alert's parts that are the same for every copy of the head
	// (appendAlert): `{"rule":<id>,"group":{`, each group_by name as a
	// JSON string and ':', `},"aggregate":<fn>,"value":` and
	// `,"alert_when":<alert_when>`.
	alertHead, alertMid, alertWhen []byte
	alertNames                     [][]byte
}

// setAlertParts computes h's alert parts (appendAlert) from its fields.
func (h *envelopeHead) setAlertParts() {
	h.alertHead = append(append([]byte(`{"rule":`), jsonString(h.Rule)...), `,"group":{`...)
	h.alertNames = make([][]byte, len(h.GroupBy))
	for i, name := range h.GroupBy {
		h.alertNames[i] = append(jsonString(name), ':')
	}
	h.alertMid = append(append([]byte(`},"aggregate":`), jsonString(string(h.Fn))...), `,"value":`...)
	h.alertWhen = append([]byte(`,"alert_when":`), jsonString(h.AlertWhen)...)
}

// decodeEnvelopeHead decodes what appendEnvelopeHead wrote.
func decodeEnvelopeHead(b []byte) (*envelopeHead, error) {
	r := binReader{b: b}
	h := &envelopeHead{}
	h.Rule = string(r.bytes())
	h.Version.P = int32(r.varint())
	h.Version.O = r.varint()
	h.Shape = string(r.bytes())
	h.Fn = AggregateFn(r.bytes())
	h.WindowMs = r.varint()
	h.AlertWhen = string(r.bytes())
	h.Op = string(r.bytes())
	if r.err == nil && len(r.b) < 8 {
		r.err = errShort
	}
	if r.err == nil {
		h.Limit = math.Float64frombits(binary.BigEndian.Uint64(r.b))
		r.b = r.b[8:]
	}
	n := r.uvarint()
	if n > uint64(len(b)) {
		r.err = errShort
	}
	for range n {
		if r.err != nil {
			break
		}
		h.GroupBy = append(h.GroupBy, string(r.bytes()))
	}
	if emit := r.bytes(); len(emit) > 0 {
		h.Emit = slices.Clone(emit)
	}
	if r.err == nil && len(r.b) > 0 {
		h.SliceMs = r.varint()
		if r.err == nil && (h.SliceMs < 1 || h.SliceMs > h.WindowMs) {
			r.err = fmt.Errorf("slice %d ms outside (0, window %d ms]", h.SliceMs, h.WindowMs)
		}
		h.WindowMs -= h.SliceMs
	}
	if r.err != nil {
		return nil, r.err
	}
	h.setAlertParts()
	return h, nil
}

// maxEnvelopeHeads bounds the keyed stage's cache of decoded envelope
// heads (one per rule version seen); when full it starts afresh.
const maxEnvelopeHeads = 4096

// decodeEnvelope decodes a routed copy's value into e: the binary form,
// its head from the cache when seen before, or the earlier JSON form. The
// group values, input and record share value's memory.
func (f *RulesEvaluator) decodeEnvelope(value []byte, e *ruleEnvelope) error {
	if len(value) > 0 && value[0] == '{' {
		*e = ruleEnvelope{}
		return json.Unmarshal(value, e)
	}
	e.head = nil
	if len(value) == 0 || value[0] != envelopeMagic {
		return errors.New("not a rules envelope")
	}
	r := binReader{b: value[1:]}
	hb := r.bytes()
	if r.err != nil {
		return r.err
	}
	h, ok := f.heads[string(hb)]
	if !ok {
		var err error
		if h, err = decodeEnvelopeHead(hb); err != nil {
			return fmt.Errorf("envelope head: %w", err)
		}
		if len(f.heads) >= maxEnvelopeHeads {
			clear(f.heads)
		}
		f.heads[string(hb)] = h
	}
	e.Rule, e.Version, e.Shape, e.Fn, e.WindowMs, e.SliceMs = h.Rule, h.Version, h.Shape, h.Fn, h.WindowMs, h.SliceMs
	e.AlertWhen, e.Op, e.Limit, e.GroupBy, e.Emit = h.AlertWhen, h.Op, h.Limit, h.GroupBy, h.Emit
	e.head = h
	n := r.uvarint()
	if n > uint64(len(value)) {
		return errShort
	}
	e.Group = e.Group[:0]
	for range n {
		e.Group = append(e.Group, r.bytes())
	}
	e.In = nil
	if r.byte() == 1 {
		e.In = r.bytes()
	}
	if r.err != nil {
		return r.err
	}
	e.Record = r.b
	return nil
}

// ProcessBroadcastElement implements BroadcastProcessFunction: apply one
// rule record. Records the source's check refused never arrive; one that
// does not decode here (it cannot, unless the check was bypassed) is
// counted and skipped.
func (r *RulesRouter) ProcessBroadcastElement(_ context.Context, rec runtime.Record, _ Collector) error {
	rr, err := DecodeRuleRecordLimits(rec.Key, rec.Value, r.cfg.Limits)
	if err != nil {
		if r.bad != nil {
			r.bad.Inc()
		}
		r.logger.Warn("rejected rule", "topic", rec.Origin.Topic, "partition", rec.Origin.Partition, "offset", rec.Origin.Offset, "err", err)
		return nil
	}
	at := rec.Timestamp.UnixMilli()
	v := ruleVersion{P: rec.Origin.Partition, O: rec.Origin.Offset}
	now := time.Now()
	switch {
	case rr.Control == ControlDeleteAll:
		for _, id := range slices.Clone(r.ids) {
			r.put(id, routerRule{At: at, Version: v, Updated: now})
		}
	case rr.Control != "":
		// clear_state and export act on the keyed stage only.
	default:
		r.put(rr.ID, routerRule{At: at, Version: v, Rule: rr.Rule, Updated: now})
	}
	r.publish()
	if r.updated != nil {
		r.updated.Set(float64(now.UnixNano()) / 1e9)
	}
	return nil
}

// put records a new version of rule id (a nil Rule deletes it).
func (r *RulesRouter) put(id string, rr routerRule) {
	if r.cfg.RuleTime != RuleTimeEvent {
		if rr.Rule == nil {
			delete(r.history, id)
		} else {
			r.history[id] = []routerRule{rr}
		}
	} else {
		h := r.history[id]
		i := len(h)
		for i > 0 && h[i-1].At > rr.At {
			i--
		}
		h = slices.Insert(h, i, rr)
		if len(h) > maxRuleHistory {
			h = h[len(h)-maxRuleHistory:]
		}
		r.history[id] = h
	}
	r.ids = r.ids[:0]
	for id := range r.history {
		r.ids = append(r.ids, id)
	}
	slices.Sort(r.ids)
}

// publish shows the latest version of every live rule to RuleStatuses.
func (r *RulesRouter) publish() {
	views := map[string]ruleView{}
	for id, h := range r.history {
		last := h[len(h)-1]
		if last.Rule == nil {
			continue
		}
		views[id] = ruleView{rule: last.Rule, version: last.Version, since: time.UnixMilli(last.At).UTC(), updated: last.Updated, counts: r.board.counter(id)}
	}
	r.board.publish(views)
	if r.held != nil {
		r.held.Set(float64(len(views)))
	}
}

// routerSnapshot is one rule version in the routing stage's broadcast
// state.
type routerSnapshot struct {
	ID      string          `json:"id"`
	At      int64           `json:"at"`
	Version ruleVersion     `json:"version"`
	Rule    json.RawMessage `json:"rule"` // null: deleted
}

// SnapshotBroadcastState implements BroadcastStateful: "rules", a JSON
// list of rule versions (id, at, version, rule or null).
func (r *RulesRouter) SnapshotBroadcastState() (map[string]json.RawMessage, error) {
	list := []routerSnapshot{}
	for _, id := range r.ids {
		for _, h := range r.history[id] {
			s := routerSnapshot{ID: id, At: h.At, Version: h.Version}
			if h.Rule != nil {
				s.Rule = h.Rule.JSON
			}
			list = append(list, s)
		}
	}
	b, err := json.Marshal(list)
	if err != nil {
		return nil, err
	}
	return map[string]json.RawMessage{"rules": b}, nil
}

// RestoreBroadcastState implements BroadcastStateful, compiling every rule
// again.
func (r *RulesRouter) RestoreBroadcastState(states map[string]json.RawMessage) error {
	raw, ok := states["rules"]
	if !ok {
		return nil
	}
	var list []routerSnapshot
	if err := json.Unmarshal(raw, &list); err != nil {
		return fmt.Errorf("operators: %s: restore broadcast state rules: %w", r.cfg.Operator, err)
	}
	r.history = map[string][]routerRule{}
	for _, s := range list {
		rr := routerRule{At: s.At, Version: s.Version, Updated: time.Now()}
		if len(s.Rule) > 0 && string(s.Rule) != "null" {
			c, err := compileStored(s.Rule, r.cfg.Limits)
			switch {
			case errors.Is(err, ErrBadRuleRecord):
				// Refused by lowered limits: restored as deleted.
				refusedAtRestore(r.cfg, s.ID, err)
			case err != nil:
				return fmt.Errorf("operators: %s: restore rule %q: %w", r.cfg.Operator, s.ID, err)
			default:
				rr.Rule = c
			}
		}
		r.history[s.ID] = append(r.history[s.ID], rr)
	}
	r.ids = r.ids[:0]
	for id := range r.history {
		r.ids = append(r.ids, id)
	}
	slices.Sort(r.ids)
	r.publish()
	return nil
}

// refusedAtRestore logs and counts a stored rule the operator's expression
// limits (lowered since the checkpoint) refuse: it is restored as deleted.
func refusedAtRestore(cfg RulesConfig, id string, err error) {
	if cfg.Metrics != nil {
		cfg.Metrics.RulesRejected(cfg.Operator).Inc()
	}
	if cfg.Logger != nil {
		cfg.Logger.Warn("restored rule refused by the expression limits; it is dropped as if deleted", "operator", cfg.Operator, "rule", id, "err", err)
	}
}

// compileStored compiles a rule's canonical JSON again, under lim.
func compileStored(b []byte, lim expression.Limits) (*CompiledRule, error) {
	var spec RuleSpec
	if err := strictJSON(b, &spec); err != nil {
		return nil, err
	}
	return CompileRuleLimits(spec, lim)
}

// evalRule is a rule as the keyed stage knows it from its broadcast input:
// for lifecycle (deletion, export, the API), never for evaluation, which
// uses the routed envelope.
type evalRule struct {
	Rule    *CompiledRule
	Version ruleVersion
	At      int64
	Updated time.Time
}

// RulesEvaluator is the keyed stage of the rules operator (Flink's
// DynamicAlertFunction): a KeyedBroadcastProcessFunction keyed by [rule id,
// group values...]. For every routed copy it adds the record's aggregate
// input to the key's window state (RulesSliceState, one slice per
// millisecond, and the running aggregate in RulesAggState; see
// rules_window.go), takes the rule's aggregate over the slices in [ts -
// window, ts] (for a copy in time order from the running aggregate, at a
// cost that does not grow with the window's contents) and, when it meets
// alert_when, emits an alert at once:
//
//	{"rule": "big-spender", "group": {"payee_id": "p7", "currency": "EUR"},
//	 "aggregate": "sum", "value": 612.5, "alert_when": "> 500",
//	 "window_start": 1700000000000, "window_end": 1700001200000,
//	 "record": {...}, "emit": {...}}
//
// keyed by the routing key, with the record's timestamp. Slices are removed
// by an event-time timer once the watermark passes their time plus the
// window (later records cannot need them), oldest first; a key keeps one
// pending timer, at or before its oldest slice's end (registered by the
// key's first or a new oldest slice, by OnTimer for the oldest left, and
// for every key of a rule whose window shrinks: rearmTimers), not one per
// slice. Sums and
// averages over doubles are the exact sum of the window's inputs rounded
// once, whatever the order the records came in.
//
// Its broadcast input carries the lifecycle: deleting a rule (a null value,
// or control delete_all) removes its slices and its timers under every
// key (applyToKeyedState) and, with processing rule time, drops copies a
// routing subtask that had not seen the deletion yet still sends; an update
// that changes the rule's shape (fn, of or group_by) removes the slices
// of the old shape under every key at once, with the timers of the keys
// (old groups) it empties, and with processing rule time drops copies
// still routed under the old shape (with event rule time such a copy, of a
// record before the update, starts a slice its timer removes); control
// clear_state removes every slice and timer; control export makes
// subtask 0 write every rule to the side output "rules". Broadcast state
// "rules": the rules and deletions it knows, as JSON.
type RulesEvaluator struct {
	cfg     RulesConfig
	rules   map[string]evalRule
	deleted map[string]ruleVersion // processing rule time: deleted id -> its last version
	win     ruleWin
	timers  TimerService
	backend state.KeyedStateBackend
	subtask int
	board   ruleStatusBoard
	logger  *slog.Logger
	entries int64 // slices held by the subtask
	heads   map[string]*envelopeHead
	env     ruleEnvelope

	alerts, bad   prometheus.Counter
	held, updated prometheus.Gauge
	entriesGauge  prometheus.Gauge
}

// NewRulesEvaluator returns the keyed function of one subtask.
func NewRulesEvaluator(cfg RulesConfig) *RulesEvaluator {
	if cfg.Limits == (expression.Limits{}) {
		cfg.Limits = DefaultRuleLimits()
	}
	return &RulesEvaluator{cfg: cfg, rules: map[string]evalRule{}, deleted: map[string]ruleVersion{}, heads: map[string]*envelopeHead{}}
}

// Open implements KeyedBroadcastProcessFunction: it registers the window
// state, migrates state of the earlier layout (migrateBuckets), counts
// the slices a restore brought and builds the key hint from the keys that
// hold a summary (ruleKeyHint: a copy to any other key reads no state).
func (f *RulesEvaluator) Open(ctx OpenContext) error {
	f.logger = f.cfg.Logger
	if f.logger == nil {
		f.logger = slog.New(slog.DiscardHandler)
	}
	fail := func(err error) error { return fmt.Errorf("operators: %s %s: %w", RulesType, ctx.Operator, err) }
	sl, err := state.GetMapState(ctx.Backend, RulesSliceState)
	if err != nil {
		return fail(err)
	}
	agg, err := state.GetValueState(ctx.Backend, RulesAggState)
	if err != nil {
		return fail(err)
	}
	dist, err := state.GetMapState(ctx.Backend, RulesDistinctState)
	if err != nil {
		return fail(err)
	}
	pg, err := state.GetMapState(ctx.Backend, RulesPageState)
	if err != nil {
		return fail(err)
	}
	f.win = ruleWin{slices: sl, pages: pg, agg: agg, distinct: dist}
	f.backend, f.subtask = ctx.Backend, ctx.Subtask
	if f.timers = ctx.TimerService(); f.timers == nil {
		return fmt.Errorf("operators: %s %s: needs the timer service", RulesType, ctx.Operator)
	}
	if m := f.cfg.Metrics; m != nil {
		f.alerts = m.rulesAlerts.WithLabelValues(ctx.Operator)
		f.bad = m.RulesRejected(ctx.Operator)
		f.held = m.RulesHeld(ctx.Operator, ctx.Subtask)
		f.updated = m.LastRuleUpdate(ctx.Operator, ctx.Subtask)
		f.entriesGauge = m.rulesEntries.WithLabelValues(ctx.Operator, strconv.Itoa(ctx.Subtask))
	}
	if err := f.migrateBuckets(); err != nil {
		return fail(err)
	}
	f.entries = 0
	err = f.rebuildHint(func(key []byte, w ruleWindow) {
		f.board.counter(ruleOfKey(key)).entries.Add(w.Slices)
		f.entries += w.Slices
	})
	if err != nil {
		return err
	}
	f.setEntries(0)
	f.publish()
	return nil
}

// RuleStatuses implements RulesReporter.
func (f *RulesEvaluator) RuleStatuses() []RuleStatus { return f.board.statuses() }

func (f *RulesEvaluator) setEntries(delta int64) {
	f.entries += delta
	if f.entriesGauge != nil {
		f.entriesGauge.Set(float64(f.entries))
	}
}

// ProcessElement implements KeyedBroadcastProcessFunction: the copy's
// input joins the slice of its millisecond (of its pane, for a rule with
// a slice) and the key's running aggregate; the aggregate over
// [ts - window, ts] (the hopping window ending with the pane) is
// compared with the limit.
func (f *RulesEvaluator) ProcessElement(_ context.Context, rec runtime.Record, out Collector) error {
	e := &f.env
	if err := f.decodeEnvelope(rec.Value, e); err != nil {
		return fmt.Errorf("operators: %s: routed record: %w", RulesType, err)
	}
	if d, ok := f.deleted[e.Rule]; ok && f.cfg.RuleTime != RuleTimeEvent && d.P == e.Version.P && e.Version.O <= d.O {
		return nil // routed by a subtask that had not seen the deletion yet
	}
	if r, ok := f.rules[e.Rule]; ok && f.cfg.RuleTime != RuleTimeEvent && r.Rule.Shape != e.Shape && r.Version.P == e.Version.P && e.Version.O < r.Version.O {
		return nil // routed under a shape the keyed stage already replaced (its slices are gone)
	}
	ts := rec.Timestamp.UnixMilli()
	if e.SliceMs > 0 {
		// A hopping rule's slice (pane) is its start.
		ts -= ((ts % e.SliceMs) + e.SliceMs) % e.SliceMs
	}
	counts := f.board.counter(e.Rule)
	rw := &f.win
	if err := rw.load(); err != nil {
		return err
	}
	if rw.has && rw.w.Shape != e.Shape {
		// Written under another shape: those slices go.
		n := rw.w.Slices
		if err := rw.clearKey(); err != nil {
			return err
		}
		counts.entries.Add(-n)
		f.setEntries(-n)
	}
	w := &rw.w
	if !rw.has {
		*w = ruleWindow{Shape: e.Shape, Fn: e.Fn, WindowMs: e.WindowMs, DInline: e.Fn == AggCountDistinct}
	} else if w.WindowMs != e.WindowMs {
		if err := rw.rebuild(e.WindowMs); err != nil {
			return err
		}
	}
	// A new slice that is the key's first or its new oldest needs the
	// key's timer (OnTimer keeps one for the oldest slice left; a later
	// slice ends no earlier than the oldest under the same window).
	oldest := w.Slices == 0 || ts < w.Head
	var s *ruleSlice
	if w.Slices > 0 && ts >= w.Head && ts <= w.Tail {
		// Only here can the slice exist: in time order it is new.
		var err error
		if s, err = rw.lookup(ts); err != nil {
			return err
		}
	}
	newSlice := s == nil
	if newSlice {
		s = &ruleSlice{}
		if err := rw.link(ts, s); err != nil {
			return err
		}
		counts.entries.Add(1)
		f.setEntries(1)
	}
	s.WindowMs = max(s.WindowMs, e.WindowMs)
	s.N++
	val := e.In // the value the running aggregate takes (accValue)
	if e.In != nil {
		val = s.fold(w.Fn, e.In)
	}
	rw.touch(ts)
	if newSlice && oldest {
		if err := f.timers.RegisterEventTimeTimer(time.UnixMilli(sliceEnd(ts, f.ruleWindowMs(e.Rule), s) + 1)); err != nil {
			return err
		}
	}
	if ts >= w.Tail-w.WindowMs {
		// In the running aggregate's window.
		if w.N == 0 || ts < w.First {
			w.First = ts
		}
		w.N++
		if w.Fn != AggCount && val != nil {
			if err := rw.accValue(val, 1); err != nil {
				return err
			}
		}
		if w.minMax() {
			if err := rw.dqInsert(ts, s); err != nil {
				return err
			}
		}
	}
	var (
		res ruleResult
		err error
	)
	if ts == w.Tail {
		if err := rw.evictBelow(ts - w.WindowMs); err != nil {
			return err
		}
		res, err = rw.current()
	} else {
		res, err = rw.resultAt(ts, e.WindowMs)
	}
	if err != nil {
		return err
	}
	if err := rw.flush(); err != nil {
		return err
	}
	_, num := res.value(e.Fn, false)
	cr := CompiledRule{Op: e.Op, Limit: e.Limit}
	if !cr.meets(num) {
		return nil
	}
	value, _ := res.value(e.Fn, true)
	counts.alerts.Add(1)
	if f.alerts != nil {
		f.alerts.Inc()
	}
	return out.Collect(runtime.Record{Key: rec.Key, Value: appendAlert(nil, e, value, ts), Timestamp: rec.Timestamp, Origin: rec.Origin})
}

// appendAlert appends the alert JSON of envelope e: from its head's
// cached parts (envelopeHead.setAlertParts) for the binary form, the
// same bytes as appendAlertJSON writes.
func appendAlert(b []byte, e *ruleEnvelope, value []byte, ts int64) []byte {
	h := e.head
	if h == nil || len(h.alertNames) < len(e.Group) {
		return appendAlertJSON(b, e, value, ts)
	}
	n := len(h.alertHead) + len(h.alertMid) + len(value) + len(h.alertWhen) + len(e.Record) + len(e.Emit) + 96
	for i, g := range e.Group {
		n += len(h.alertNames[i]) + len(g) + 1
	}
	b = slices.Grow(b, n)
	b = append(b, h.alertHead...)
	for i, g := range e.Group {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(append(b, h.alertNames[i]...), g...)
	}
	b = append(append(append(append(b, h.alertMid...), value...), h.alertWhen...), `,"window_start":`...)
	end := ts // inclusive
	if e.SliceMs > 0 {
		end = ts + e.SliceMs - 1 // ts is the pane's start
	}
	b = strconv.AppendInt(b, ts-e.WindowMs, 10)
	b = strconv.AppendInt(append(b, `,"window_end":`...), end, 10)
	b = append(append(b, `,"record":`...), e.Record...)
	if len(e.Emit) > 0 {
		b = append(append(b, `,"emit":`...), e.Emit...)
	}
	return append(b, '}')
}

// appendAlertJSON appends the alert JSON of envelope e, computing every
// part (an envelope of the earlier JSON form).
func appendAlertJSON(b []byte, e *ruleEnvelope, value []byte, ts int64) []byte {
	str := jsonString
	b = append(append(b, `{"rule":`...), str(e.Rule)...)
	b = append(b, `,"group":{`...)
	for i, g := range e.Group {
		if i > 0 {
			b = append(b, ',')
		}
		name := ""
		if i < len(e.GroupBy) {
			name = e.GroupBy[i]
		}
		b = append(append(append(b, str(name)...), ':'), g...)
	}
	b = append(append(b, `},"aggregate":`...), str(string(e.Fn))...)
	b = append(append(append(b, `,"value":`...), value...), `,"alert_when":`...)
	b = append(b, str(e.AlertWhen)...)
	end := ts // inclusive
	if e.SliceMs > 0 {
		end = ts + e.SliceMs - 1 // ts is the pane's start
	}
	b = fmt.Appendf(b, `,"window_start":%d,"window_end":%d,"record":`, ts-e.WindowMs, end)
	b = append(b, e.Record...)
	if len(e.Emit) > 0 {
		b = append(append(b, `,"emit":`...), e.Emit...)
	}
	return append(b, '}')
}

// parseNumber parses a number the routing stage wrote (number.appendJSON).
func parseNumber(raw []byte) number {
	if !bytes.ContainsAny(raw, ".eE") {
		if i, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
			return number{Int: i}
		}
	}
	f, _ := strconv.ParseFloat(string(raw), 64)
	return number{Float: f, IsFloat: true}
}

// OnTimer implements TimerFunction: the key's slices the watermark passed
// by more than their window (sliceEnd) are removed, oldest first (leaving
// the running aggregate if they are in it), and the key's timer is set for
// the oldest left.
func (f *RulesEvaluator) OnTimer(_ context.Context, _ time.Time, tc TimerContext, _ Collector) error {
	wm := f.timers.CurrentWatermark().UnixMilli()
	id := ruleOfKey(tc.Key)
	win := f.ruleWindowMs(id)
	rw := &f.win
	if err := rw.load(); err != nil {
		return err
	}
	if !rw.has {
		return nil
	}
	w := &rw.w
	var expired int64
	next := int64(-1)
	for w.Slices > 0 {
		k := w.Head
		s, err := rw.slice(k)
		if err != nil {
			return err
		}
		if end := sliceEnd(k, win, s); end >= wm {
			next = end + 1
			break
		}
		if w.N > 0 && k >= w.First {
			if err := rw.accSlice(s, -1); err != nil {
				return err
			}
			if s.InDeque {
				if err := rw.dqUnlink(k, s); err != nil {
					return err
				}
			}
			if w.N > 0 {
				w.First = s.Next
			}
		}
		if s.HasNext {
			n, err := rw.slice(s.Next)
			if err != nil {
				return err
			}
			n.Prev, n.HasPrev = 0, false
			rw.touch(s.Next)
		}
		w.Head = s.Next
		w.Slices--
		delete(rw.cache, k)
		rw.dirty[k] = false
		expired++
	}
	if err := rw.flush(); err != nil {
		return err
	}
	if expired > 0 {
		f.board.counter(id).entries.Add(-expired)
		f.setEntries(-expired)
	}
	if next >= 0 {
		return f.timers.RegisterEventTimeTimer(time.UnixMilli(next))
	}
	return nil
}

// ProcessBroadcastElement implements KeyedBroadcastProcessFunction: the
// rule lifecycle on the keyed stage.
func (f *RulesEvaluator) ProcessBroadcastElement(_ context.Context, rec runtime.Record, out Collector) error {
	rr, err := DecodeRuleRecordLimits(rec.Key, rec.Value, f.cfg.Limits)
	if err != nil {
		if f.bad != nil {
			f.bad.Inc()
		}
		f.logger.Warn("rejected rule", "topic", rec.Origin.Topic, "partition", rec.Origin.Partition, "offset", rec.Origin.Offset, "err", err)
		return nil
	}
	v := ruleVersion{P: rec.Origin.Partition, O: rec.Origin.Offset}
	now := time.Now()
	switch {
	case rr.Control == ControlDeleteAll:
		for id, r := range f.rules {
			f.deleted[id] = r.Version
		}
		clear(f.rules)
		if err := f.removeState(func(string) bool { return true }, nil); err != nil {
			return err
		}
	case rr.Control == ControlClearState:
		if err := f.removeState(func(string) bool { return true }, nil); err != nil {
			return err
		}
	case rr.Control == ControlExport:
		if f.subtask == 0 {
			if err := f.export(rec, out); err != nil {
				return err
			}
		}
	case rr.Rule == nil:
		if r, ok := f.rules[rr.ID]; ok {
			f.deleted[rr.ID] = r.Version
			delete(f.rules, rr.ID)
		}
		if err := f.removeState(func(id string) bool { return id == rr.ID }, nil); err != nil {
			return err
		}
	default:
		if d, ok := f.deleted[rr.ID]; ok && (d.P != v.P || v.O > d.O) {
			delete(f.deleted, rr.ID)
		}
		old, had := f.rules[rr.ID]
		f.rules[rr.ID] = evalRule{Rule: rr.Rule, Version: v, At: rec.Timestamp.UnixMilli(), Updated: now}
		if (!had || old.Rule.Shape != rr.Rule.Shape) && f.board.counter(rr.ID).entries.Load() > 0 {
			// fn, of or group_by changed: the old groups' slices (and
			// their keys' timers) go at once, not when they expire.
			shape := rr.Rule.Shape
			if err := f.removeState(func(id string) bool { return id == rr.ID }, func(s string) bool { return s != shape }); err != nil {
				return err
			}
		}
		if had && rr.Rule.windowMs() < old.Rule.windowMs() && f.board.counter(rr.ID).entries.Load() > 0 {
			// A shorter window: the oldest slices may end earlier.
			if err := f.rearmTimers(func(id string) bool { return id == rr.ID }); err != nil {
				return err
			}
		}
	}
	f.publish()
	if f.updated != nil {
		f.updated.Set(float64(now.UnixNano()) / 1e9)
	}
	return nil
}

// export writes every rule, sorted by id, to the side output "rules": key
// the id, value the rule's JSON.
func (f *RulesEvaluator) export(rec runtime.Record, out Collector) error {
	sc, ok := out.(SideCollector)
	if !ok {
		return nil
	}
	ids := make([]string, 0, len(f.rules))
	for id := range f.rules {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if err := sc.CollectSide(RulesExportOutput, runtime.Record{Key: []byte(id), Value: f.rules[id].Rule.JSON, Timestamp: rec.Timestamp}); err != nil {
			return err
		}
	}
	return nil
}

// removeState removes the window state (slices, summary, distinct
// counts) of every key whose rule id ids selects and whose shape drop
// selects (nil: all), as Flink's applyToKeyedState, and the timers of the
// keys it empties. Nothing of a removed rule is left for checkpoints.
func (f *RulesEvaluator) removeState(ids func(id string) bool, drop func(shape string) bool) error {
	emptied := map[string]struct{}{}
	err := state.ApplyToAllValueKeys(f.backend, RulesAggState, func(key []byte, s state.ValueState[ruleWindow]) error {
		id := ruleOfKey(key)
		if !ids(id) {
			return nil
		}
		w, ok, err := s.Value()
		if err != nil {
			return err
		}
		if drop != nil && !drop(w.Shape) {
			return nil
		}
		f.board.counter(id).entries.Add(-w.Slices)
		f.setEntries(-w.Slices)
		emptied[string(key)] = struct{}{}
		f.win.stored = ok // clearKey tells the hint
		return f.win.clearKey()
	})
	if err != nil {
		return err
	}
	td, ok := f.timers.(keyTimerDeleter)
	if !ok {
		return nil
	}
	_, err = td.deleteKeyTimers(func(key []byte) bool {
		if drop == nil {
			return ids(ruleOfKey(key))
		}
		_, ok := emptied[string(key)]
		return ok
	})
	return err
}

// migrateBuckets moves window state of the earlier layout
// (RulesWindowState: JSON buckets, one per millisecond, each with its
// shape) into RulesSliceState and RulesAggState, key by key, and clears
// it; nothing happens unless the backend holds that state (a restore of
// an older checkpoint or savepoint). A key keeps the buckets of the shape
// of its newest bucket (the earlier operator dropped the others at the
// key's next record); its running aggregate is built for the window of
// its newest bucket and rebuilt if its next copy brings another.
func (f *RulesEvaluator) migrateBuckets() error {
	if !state.HasState(f.backend, RulesWindowState.Name) {
		return nil
	}
	keys := 0
	err := state.ApplyToAllKeys(f.backend, RulesWindowState, func(_ []byte, old state.MapState[int64, RuleBucket]) error {
		var ts []int64
		buckets := map[int64]RuleBucket{}
		for en, err := range old.Entries() {
			if err != nil {
				return err
			}
			ts = append(ts, en.Key)
			buckets[en.Key] = en.Value
		}
		if len(ts) == 0 {
			return nil
		}
		slices.Sort(ts)
		newest := buckets[ts[len(ts)-1]]
		rw := &f.win
		if err := rw.load(); err != nil {
			return err
		}
		if rw.has {
			return fmt.Errorf("state of both layouts (%s and %s) under one key", RulesWindowState.Name, RulesAggState.Name)
		}
		rw.w = ruleWindow{Shape: newest.Shape, Fn: shapeFn(newest.Shape), WindowMs: newest.WindowMs}
		for _, t := range ts {
			b := buckets[t]
			if b.Shape != newest.Shape {
				continue
			}
			s := &ruleSlice{WindowMs: b.WindowMs, N: b.N}
			for _, in := range b.In {
				s.In = append(s.In, []byte(in))
			}
			if err := rw.link(t, s); err != nil {
				return err
			}
		}
		if err := rw.rebuild(newest.WindowMs); err != nil {
			return err
		}
		if err := rw.flush(); err != nil {
			return err
		}
		keys++
		return old.Clear()
	})
	if err == nil && keys > 0 {
		f.logger.Info("moved rules window state into the sliced layout", "from", RulesWindowState.Name, "to", RulesSliceState.Name, "keys", keys)
	}
	return err
}

// publish shows the rules to RuleStatuses.
func (f *RulesEvaluator) publish() {
	views := map[string]ruleView{}
	for id, r := range f.rules {
		views[id] = ruleView{rule: r.Rule, version: r.Version, since: time.UnixMilli(r.At).UTC(), updated: r.Updated, counts: f.board.counter(id)}
	}
	// Rules whose slices remain (deleted on another path, or not known
	// yet) keep their counters until they go.
	f.board.mu.Lock()
	for id, c := range f.board.counts {
		if _, ok := views[id]; !ok && c.entries.Load() > 0 {
			views[id] = ruleView{rule: &CompiledRule{Spec: RuleSpec{ID: id, State: RulePaused}, JSON: []byte("null")}, counts: c}
		}
	}
	f.board.mu.Unlock()
	f.board.publish(views)
	if f.held != nil {
		f.held.Set(float64(len(f.rules)))
	}
}

// evalSnapshot is the keyed stage's broadcast state.
type evalSnapshot struct {
	Rules   []routerSnapshot       `json:"rules"`
	Deleted map[string]ruleVersion `json:"deleted,omitempty"`
}

// SnapshotBroadcastState implements BroadcastStateful: "rules", the rules
// and the deletions, as JSON.
func (f *RulesEvaluator) SnapshotBroadcastState() (map[string]json.RawMessage, error) {
	s := evalSnapshot{Rules: []routerSnapshot{}, Deleted: f.deleted}
	ids := make([]string, 0, len(f.rules))
	for id := range f.rules {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		r := f.rules[id]
		s.Rules = append(s.Rules, routerSnapshot{ID: id, At: r.At, Version: r.Version, Rule: r.Rule.JSON})
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	return map[string]json.RawMessage{"rules": b}, nil
}

// RestoreBroadcastState implements BroadcastStateful.
func (f *RulesEvaluator) RestoreBroadcastState(states map[string]json.RawMessage) error {
	raw, ok := states["rules"]
	if !ok {
		return nil
	}
	var s evalSnapshot
	if err := json.Unmarshal(raw, &s); err != nil {
		return fmt.Errorf("operators: %s: restore broadcast state rules: %w", f.cfg.Operator, err)
	}
	f.rules = map[string]evalRule{}
	refused := map[string]bool{}
	for _, r := range s.Rules {
		c, err := compileStored(r.Rule, f.cfg.Limits)
		if errors.Is(err, ErrBadRuleRecord) {
			// Refused by lowered limits: restored as deleted (its slices
			// leave as their timers fire).
			refusedAtRestore(f.cfg, r.ID, err)
			refused[r.ID] = true
			if s.Deleted == nil {
				s.Deleted = map[string]ruleVersion{}
			}
			s.Deleted[r.ID] = r.Version
			continue
		}
		if err != nil {
			return fmt.Errorf("operators: %s: restore rule %q: %w", f.cfg.Operator, r.ID, err)
		}
		f.rules[r.ID] = evalRule{Rule: c, Version: r.Version, At: r.At, Updated: time.Now()}
	}
	f.deleted = map[string]ruleVersion{}
	for id, v := range s.Deleted {
		f.deleted[id] = v
	}
	if len(refused) > 0 {
		// Their slices now end by their own windows (no rule window).
		if err := f.rearmTimers(func(id string) bool { return refused[id] }); err != nil {
			return fmt.Errorf("operators: %s: restore: %w", f.cfg.Operator, err)
		}
	}
	f.publish()
	return nil
}

// jsonString is s as a JSON string, without escaping <, > and & (alert
// limits such as "> 500" stay readable).
func jsonString(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string: cannot fail
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}
