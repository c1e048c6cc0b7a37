package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/kstreamd/kstreamd/sdk"
	"github.com/kstreamd/kstreamd/state"
)

// sessionTotalType is the operators[].type that names the operator.
const sessionTotalType = "session_total"

// sessionTotalParams are the operator's params: mapping. The pipeline
// decodes it strictly (an unknown field, a wrong type or a bad duration is a
// config error at its FILE:LINE:COL) into the struct Params returned, which
// holds the defaults.
type sessionTotalParams struct {
	// Field is the numeric JSON field summed. Default "amount".
	Field string `yaml:"field"`
	// TTL is how long a key's total lives after its last update: a key
	// with no record for that long starts again from zero. Default "1h".
	TTL time.Duration `yaml:"ttl"`
}

// CheckParams implements sdk.ParamsChecker: the rules beyond types.
func (p *sessionTotalParams) CheckParams(report func(field, msg string)) {
	if p.Field == "" {
		report("field", "must not be empty")
	}
	if p.TTL < time.Millisecond {
		report("ttl", fmt.Sprintf("%v is below the 1ms minimum", p.TTL))
	}
}

// sessionTotalFactory declares session_total: keyed (it needs key_by and
// gets keyed state), with an async state version (async_state: true).
func sessionTotalFactory() sdk.Factory {
	return sdk.Factory{
		Type:   sessionTotalType,
		Doc:    "Per key, the running total of a numeric field (params field, ttl); emits {\"key\", \"total\"} with every record.",
		Traits: sdk.Traits{Keyed: true, AsyncState: true},
		Params: func() any { return &sessionTotalParams{Field: "amount", TTL: time.Hour} },
		State:  []string{"total"}, // keyed state ids derive from it: keep it stable
		New: func(ctx sdk.FactoryContext) (any, error) {
			p := ctx.Params.(*sessionTotalParams)
			desc := state.ValueStateDescriptor[float64]{
				Name:       "total",
				Serializer: state.Float64Serializer{},
				TTL:        &state.StateTtlConfig{TTL: p.TTL, UpdateType: state.OnCreateAndWrite},
			}
			if ctx.AsyncState {
				return &asyncSessionTotal{field: p.Field, desc: desc}, nil
			}
			return &sessionTotal{field: p.Field, desc: desc}, nil
		},
	}
}

// sessionTotal is session_total's sdk.KeyedProcessFunction: one ValueState
// per key holds the running total.
type sessionTotal struct {
	field string
	desc  state.ValueStateDescriptor[float64]
	total state.ValueState[float64]
}

// Open implements sdk.KeyedProcessFunction: it gets the state once; the
// handle acts on the current record's key.
func (s *sessionTotal) Open(ctx sdk.OpenContext) error {
	var err error
	s.total, err = state.GetValueState(ctx.Backend, s.desc)
	return err
}

// ProcessElement implements sdk.KeyedProcessFunction.
func (s *sessionTotal) ProcessElement(_ context.Context, rec sdk.Record, out sdk.Collector) error {
	amount, err := numberField(rec, s.field)
	if err != nil {
		return err // a *sdk.RecordError: the record meets the source's on_error policy
	}
	cur, _, err := s.total.Value() // 0 when the key has no total (or it expired)
	if err != nil {
		return err // any other error fails the job
	}
	if err := s.total.Update(cur + amount); err != nil {
		return err
	}
	return out.Collect(totalRecord(rec, cur+amount))
}

// asyncSessionTotal is the same function through async state
// (sdk.AsyncKeyedProcessFunction): it chains state futures instead of
// blocking on reads.
type asyncSessionTotal struct {
	field string
	desc  state.ValueStateDescriptor[float64]
	total state.AsyncValueState[float64]
}

// Open implements sdk.AsyncKeyedProcessFunction.
func (s *asyncSessionTotal) Open(ctx sdk.AsyncOpenContext) error {
	var err error
	s.total, err = state.GetAsyncValueState(ctx.AEC, s.desc)
	return err
}

// ProcessElement implements sdk.AsyncKeyedProcessFunction.
func (s *asyncSessionTotal) ProcessElement(_ context.Context, rec sdk.Record, out sdk.Collector) error {
	amount, err := numberField(rec, s.field)
	if err != nil {
		return err
	}
	state.ThenCompose(s.total.AsyncValue(), func(cur state.Optional[float64]) (state.StateFuture[state.Void], error) {
		t := cur.Value + amount
		return s.total.AsyncUpdate(t).ThenAccept(func(state.Void) error {
			return out.Collect(totalRecord(rec, t))
		}), nil
	})
	return nil // a failed chain fails the job
}

// numberField returns the JSON number in field of the record's value, or a
// *sdk.RecordError with reason invalid when the value is not a JSON object
// with a number there.
func numberField(rec sdk.Record, field string) (float64, error) {
	var obj map[string]any
	if err := json.Unmarshal(rec.Value, &obj); err != nil || obj == nil {
		return 0, &sdk.RecordError{Reason: sdk.ReasonInvalid, Detail: sessionTotalType + ": the value is not a JSON object"}
	}
	n, ok := obj[field].(float64)
	if !ok {
		return 0, &sdk.RecordError{Reason: sdk.ReasonInvalid, Detail: fmt.Sprintf("%s: %q must be a number", sessionTotalType, field)}
	}
	return n, nil
}

// totalRecord is the output for rec: {"key": <key>, "total": <total>}, with
// the record's key, timestamp and headers.
func totalRecord(rec sdk.Record, total float64) sdk.Record {
	v, _ := json.Marshal(struct {
		Key   string  `json:"key"`
		Total float64 `json:"total"`
	}{string(rec.Key), total})
	return sdk.Record{Key: rec.Key, Value: v, Timestamp: rec.Timestamp, Headers: rec.Headers}
}
