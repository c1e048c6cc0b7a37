package operators

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/kstreamd/kstreamd/expression"
)

// This file is the rules operator's rule schema: decoding a record of the
// rules topic (DecodeRuleRecord) and compiling a rule (CompileRule). Rules
// are untrusted input: they come from whoever may write the topic, so their
// expressions compile under the operator's limits (DefaultRuleLimits
// unless its params say otherwise) and a rule that does not decode or
// compile is refused with a reason, never reaching state.

// ErrBadRuleRecord is wrapped by every error DecodeRuleRecord and
// CompileRule return.
var ErrBadRuleRecord = errors.New("operators: bad rule")

// The defaults of the rules operator's expression limits (RulesParams
// max_expression_length, max_expression_nodes, max_expression_cost):
// tighter than the pipeline's (expression.DefaultMaxLength and so on),
// since rules are untrusted.
const (
	// DefaultRuleMaxLength is the longest expression source, in bytes.
	DefaultRuleMaxLength = 1024
	// DefaultRuleMaxNodes is the most syntax nodes of one expression.
	DefaultRuleMaxNodes = 200
	// DefaultRuleMaxCost bounds one evaluation, in CEL cost units.
	DefaultRuleMaxCost = 10_000
)

// DefaultRuleLimits returns the limits every expression of a rule (filter,
// group_by, aggregate.of) compiles under by default: 1 KiB of source, 200
// syntax nodes, 10,000 cost units per evaluation.
func DefaultRuleLimits() expression.Limits {
	return expression.Limits{MaxLength: DefaultRuleMaxLength, MaxNodes: DefaultRuleMaxNodes, MaxCost: DefaultRuleMaxCost}
}

// MaxRuleWindow is the longest window a rule may ask for.
const MaxRuleWindow = 31 * 24 * time.Hour

// MaxRuleGroupBy is the most group_by entries a rule may have.
const MaxRuleGroupBy = 8

// RuleState is a rule's state field.
type RuleState string

// The rule states.
const (
	// RuleActive rules match records and alert (the default).
	RuleActive RuleState = "active"
	// RulePaused rules match nothing and alert never; their window state
	// is kept (and still cleaned by its timers).
	RulePaused RuleState = "paused"
)

// RuleControl is the control field of a control record of the rules topic
// (Flink's fraud-detection ControlType).
type RuleControl string

// The control records.
const (
	// ControlDeleteAll deletes every rule and its state.
	ControlDeleteAll RuleControl = "delete_all"
	// ControlClearState removes the window state of every rule; the rules
	// stay.
	ControlClearState RuleControl = "clear_state"
	// ControlExport writes the current rules, one record each (key the id,
	// value the rule's JSON), to the operator's side output "rules".
	ControlExport RuleControl = "export"
)

// RuleSpec is one rule as JSON on the rules topic:
//
//	{"id": "big-spender", "state": "active", "filter": "value.method == 'card'",
//	 "group_by": ["payee_id", "currency"], "aggregate": {"fn": "sum", "of": "amount"},
//	 "window": "20m", "alert_when": "> 500", "emit": {"note": "..."}}
type RuleSpec struct {
	// ID names the rule; required, and equal to the Kafka key when that is
	// not empty.
	ID string `json:"id"`
	// State is active (the default) or paused.
	State RuleState `json:"state,omitempty"`
	// Filter selects the records the rule applies to: a bool expression
	// over the record (as filter's condition); default true.
	Filter string `json:"filter,omitempty"`
	// GroupBy are the fields or expressions a record's group is made of;
	// none: one group for the whole rule. At most MaxRuleGroupBy.
	GroupBy []string `json:"group_by,omitempty"`
	// Aggregate is what is computed over the window.
	Aggregate RuleAggregate `json:"aggregate"`
	// Window is the sliding window's length, a Go duration ("20m"):
	// every record's window is [ts - window, ts] in event time. Required,
	// in (0, MaxRuleWindow].
	Window string `json:"window"`
	// Slice, when set, makes the window a hopping one in panes of this
	// width (a Go duration, whole milliseconds, dividing window; Flink's
	// HOP window with slide Slice and size Window, whose panes are the
	// slices): a record at ts is evaluated over the window
	// [p + slice - window, p + slice) that ends with its pane
	// p = ts - ts mod slice (every record of that pane counts, the
	// later ones that arrived before it too), so a key keeps one slice
	// per pane, not one per millisecond. Slice equal to window is a
	// tumbling window. Empty or "1ms": panes of 1 ms, the sliding window
	// [ts - window, ts] (so "1ms" is the rule without a slice exactly:
	// the same alerts, shape and state).
	Slice string `json:"slice,omitempty"`
	// AlertWhen is the limit: a comparison operator (>, >=, <, <=, ==, !=)
	// and a number, as "> 500".
	AlertWhen string `json:"alert_when"`
	// Emit is copied into every alert of the rule; optional JSON object.
	Emit json.RawMessage `json:"emit,omitempty"`
}

// RuleAggregate is a rule's aggregate: one of the aggregate operator's
// functions count, sum, min, max, avg or count_distinct, and the
// expression it takes (none for count).
type RuleAggregate struct {
	Fn string `json:"fn"`
	Of string `json:"of,omitempty"`
}

// ruleControlRecord is the JSON of a control record.
type ruleControlRecord struct {
	Control RuleControl `json:"control"`
}

// RuleRecord is one decoded record of the rules topic: a rule to put, the
// id of a rule to delete (a null value), or a control record.
type RuleRecord struct {
	// ID is the rule's id (the Kafka key, or the JSON id when the key is
	// empty); empty for a control record.
	ID string
	// Rule is the rule to put, compiled; nil for a deletion or a control
	// record.
	Rule *CompiledRule
	// Control is set for a control record.
	Control RuleControl
}

// DecodeRuleRecord decodes and compiles one record of the rules topic
// under DefaultRuleLimits: DecodeRuleRecordLimits with those.
func DecodeRuleRecord(key, value []byte) (RuleRecord, error) {
	return DecodeRuleRecordLimits(key, value, DefaultRuleLimits())
}

// DecodeRuleRecordLimits decodes and compiles one record of the rules
// topic, the rule's expressions under lim. A null value deletes the rule
// its key names; a JSON object with a "control" field is a control record;
// any other value must be a RuleSpec that CompileRuleLimits accepts. Errors
// wrap ErrBadRuleRecord and say why, as `operators: bad rule "r1":
// aggregate.fn: must be one of ...`.
func DecodeRuleRecordLimits(key, value []byte, lim expression.Limits) (RuleRecord, error) {
	if value == nil {
		if len(key) == 0 {
			return RuleRecord{}, fmt.Errorf("%w: deletion (null value) without a key", ErrBadRuleRecord)
		}
		return RuleRecord{ID: string(key)}, nil
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(value, &probe); err != nil {
		return RuleRecord{}, fmt.Errorf("%w: not a JSON object: %v", ErrBadRuleRecord, err)
	}
	if _, ok := probe["control"]; ok {
		var c ruleControlRecord
		if err := strictJSON(value, &c); err != nil {
			return RuleRecord{}, fmt.Errorf("%w: control record: %v", ErrBadRuleRecord, err)
		}
		switch c.Control {
		case ControlDeleteAll, ControlClearState, ControlExport:
			return RuleRecord{Control: c.Control}, nil
		}
		return RuleRecord{}, fmt.Errorf("%w: control must be one of delete_all, clear_state, export, got %q", ErrBadRuleRecord, c.Control)
	}
	var spec RuleSpec
	if err := strictJSON(value, &spec); err != nil {
		return RuleRecord{}, fmt.Errorf("%w: %v", ErrBadRuleRecord, err)
	}
	if len(key) > 0 && spec.ID != "" && string(key) != spec.ID {
		return RuleRecord{}, fmt.Errorf("%w: key %q differs from id %q", ErrBadRuleRecord, key, spec.ID)
	}
	if spec.ID == "" {
		spec.ID = string(key)
	}
	r, err := CompileRuleLimits(spec, lim)
	if err != nil {
		return RuleRecord{}, err
	}
	return RuleRecord{ID: spec.ID, Rule: r}, nil
}

// strictJSON decodes one JSON object into v, refusing unknown fields and
// trailing data.
func strictJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

// CompiledRule is a rule compiled once per subtask: its expressions
// compiled, its window and limit parsed.
type CompiledRule struct {
	// Spec is the rule as decoded (State defaulted to active).
	Spec RuleSpec
	// JSON is the rule's canonical JSON (json.Marshal of Spec).
	JSON []byte
	// Window is the window length.
	Window time.Duration
	// Slice is the pane width of a hopping window (RuleSpec.Slice); 0:
	// the exact sliding window (RuleSpec.Slice empty or "1ms").
	Slice time.Duration
	// Op and Limit are alert_when's comparison and number.
	Op    string
	Limit float64
	// Shape identifies what the rule's window state means (fn, of,
	// group_by and slice when set): state written under another shape is
	// dropped, so an update that changes them starts the rule's groups
	// afresh, while one changing only the limit, window, filter, state or
	// emit keeps them.
	Shape string

	filter  Expression
	groupBy []Expression
	of      Expression
}

// alertWhenRE matches alert_when: an operator and a JSON-style number.
var alertWhenRE = regexp.MustCompile(`^\s*(>=|<=|==|!=|>|<)\s*(-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)\s*$`)

// CompileRule checks and compiles spec under DefaultRuleLimits.
func CompileRule(spec RuleSpec) (*CompiledRule, error) {
	return CompileRuleLimits(spec, DefaultRuleLimits())
}

// CompileRuleLimits checks and compiles spec, its expressions under lim
// (zero fields: the expression package's defaults). Errors wrap
// ErrBadRuleRecord and name the rule and the field, listing the first
// problem found.
func CompileRuleLimits(spec RuleSpec, lim expression.Limits) (*CompiledRule, error) {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w %q: %s: %s", ErrBadRuleRecord, spec.ID, field, fmt.Sprintf(format, args...))
	}
	if spec.ID == "" {
		return nil, fmt.Errorf("%w: id is empty (and the record has no key)", ErrBadRuleRecord)
	}
	if len(spec.ID) > 200 {
		return nil, bad("id", "%d bytes, at most 200", len(spec.ID))
	}
	r := &CompiledRule{}
	switch spec.State {
	case "":
		spec.State = RuleActive
	case RuleActive, RulePaused:
	default:
		return nil, bad("state", "must be active or paused, got %q", spec.State)
	}
	opts := []expression.Option{expression.WithLimits(lim)}
	if spec.Filter != "" {
		e, err := CompileExpression(spec.Filter, append(opts, expression.ExpectBool())...)
		if err != nil {
			return nil, bad("filter", "%v", err)
		}
		r.filter = e
	}
	if len(spec.GroupBy) > MaxRuleGroupBy {
		return nil, bad("group_by", "%d entries, at most %d", len(spec.GroupBy), MaxRuleGroupBy)
	}
	for i, g := range spec.GroupBy {
		e, err := CompileExpression(g, opts...)
		if err != nil {
			return nil, bad(fmt.Sprintf("group_by[%d]", i), "%v", err)
		}
		r.groupBy = append(r.groupBy, e)
	}
	switch fn := AggregateFn(spec.Aggregate.Fn); fn {
	case AggCount:
		if spec.Aggregate.Of != "" {
			return nil, bad("aggregate.of", "count counts records and takes no of")
		}
	case AggSum, AggMin, AggMax, AggAvg, AggCountDistinct:
		if spec.Aggregate.Of == "" {
			return nil, bad("aggregate.of", "required for fn %s (an expression such as amount)", fn)
		}
		e, err := CompileExpression(spec.Aggregate.Of, opts...)
		if err != nil {
			return nil, bad("aggregate.of", "%v", err)
		}
		r.of = e
	case "":
		return nil, bad("aggregate.fn", "required: one of count, sum, min, max, avg, count_distinct")
	default:
		return nil, bad("aggregate.fn", "unknown aggregate %q: one of count, sum, min, max, avg, count_distinct", fn)
	}
	if spec.Window == "" {
		return nil, bad("window", "required: a duration such as 20m")
	}
	w, err := time.ParseDuration(spec.Window)
	switch {
	case err != nil:
		return nil, bad("window", "not a duration: %q", spec.Window)
	case w <= 0:
		return nil, bad("window", "must be positive, got %s", spec.Window)
	case w < time.Millisecond:
		return nil, bad("window", "must be at least 1ms, got %s", spec.Window)
	case w > MaxRuleWindow:
		return nil, bad("window", "at most %s, got %s", MaxRuleWindow, spec.Window)
	}
	r.Window = w
	if spec.Slice != "" {
		sl, err := time.ParseDuration(spec.Slice)
		switch {
		case err != nil:
			return nil, bad("slice", "not a duration: %q", spec.Slice)
		case sl < time.Millisecond:
			return nil, bad("slice", "must be at least 1ms, got %s", spec.Slice)
		case sl%time.Millisecond != 0:
			return nil, bad("slice", "must be whole milliseconds, got %s", spec.Slice)
		case sl > w || w%sl != 0:
			return nil, bad("slice", "must divide the window (%s), got %s", w, spec.Slice)
		}
		if sl > time.Millisecond {
			// 1 ms panes are the sliding window's own slices: that
			// rule, its window [ts - window, ts] and its state.
			r.Slice = sl
		}
	}
	m := alertWhenRE.FindStringSubmatch(spec.AlertWhen)
	if m == nil {
		return nil, bad("alert_when", "must be a comparison (>, >=, <, <=, ==, !=) and a number, as \"> 500\", got %q", spec.AlertWhen)
	}
	r.Op = m[1]
	r.Limit, _ = strconv.ParseFloat(m[2], 64) // matched: parses
	if len(spec.Emit) > 0 {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(spec.Emit, &obj); err != nil || obj == nil {
			return nil, bad("emit", "must be a JSON object")
		}
		spec.Emit, _ = json.Marshal(obj) // compact, keys sorted
	}
	r.Spec = spec
	r.JSON, _ = json.Marshal(spec) // plain strings and raw JSON: cannot fail
	shapeOf := []any{spec.Aggregate.Fn, spec.Aggregate.Of, spec.GroupBy}
	if r.Slice > 0 {
		// Slices keyed by pane, not by millisecond: another state.
		shapeOf = append(shapeOf, r.Slice.Milliseconds())
	}
	shape, _ := json.Marshal(shapeOf)
	r.Shape = string(shape)
	return r, nil
}

// windowMs is the reach (ms) of the rule's windows below the slice
// (pane) of their newest record: window for the sliding window (its
// slices are milliseconds), window - slice for a hopping one (the panes
// [p - windowMs, p] cover [p + slice - window, p + slice)).
func (r *CompiledRule) windowMs() int64 { return r.Window.Milliseconds() - r.Slice.Milliseconds() }

// meets reports whether value v meets the rule's limit.
func (r *CompiledRule) meets(v float64) bool {
	switch r.Op {
	case ">":
		return v > r.Limit
	case ">=":
		return v >= r.Limit
	case "<":
		return v < r.Limit
	case "<=":
		return v <= r.Limit
	case "==":
		return v == r.Limit
	}
	return v != r.Limit
}
