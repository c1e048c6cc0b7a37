package main

import (
	"context"
	"fmt"
	"time"

	"github.com/kstreamd/kstreamd/sdk"
	"github.com/kstreamd/kstreamd/state"
)

// orderShipmentType is the operators[].type of the two-input operator.
const orderShipmentType = "order_shipment"

// orderShipmentParams are order_shipment's params: mapping.
type orderShipmentParams struct {
	// Timeout is how long, in event time, an order waits for its shipment
	// before it is reported not shipped. Default 1h.
	Timeout time.Duration `yaml:"timeout"`
}

// CheckParams implements sdk.ParamsChecker.
func (p *orderShipmentParams) CheckParams(report func(field, msg string)) {
	if p.Timeout < time.Millisecond {
		report("timeout", fmt.Sprintf("%v is below the 1ms minimum", p.Timeout))
	}
}

// orderShipmentFactory declares order_shipment: a keyed type with two
// input roles, orders and shipments. A pipeline lists them under inputs:,
// each with its own key_by, and both are hashed by key group, so an order
// and its shipment meet on one subtask, in one key's state.
func orderShipmentFactory() sdk.Factory {
	return sdk.Factory{
		Type:   orderShipmentType,
		Doc:    "Per order id, matches an order with its shipment (inputs orders and shipments); emits {\"order\", \"status\": \"shipped\"} or, once the watermark passes the order's time + timeout, \"not_shipped\".",
		Traits: sdk.Traits{Keyed: true, Inputs: [2]string{"orders", "shipments"}},
		Params: func() any { return &orderShipmentParams{Timeout: time.Hour} },
		State:  []string{"order", "shipment", state.TimersStateName},
		New: func(ctx sdk.FactoryContext) (any, error) {
			return &orderShipment{timeout: ctx.Params.(*orderShipmentParams).Timeout}, nil
		},
	}
}

// orderShipment is Flink's "timeout payment match" pattern as a
// sdk.KeyedCoProcessFunction with event-time timers: per key (an order id)
// it keeps the order's time until its shipment arrives, or the shipment's
// until its order does; an order whose shipment has not come when the
// watermark reaches the order's time + timeout is reported not shipped.
type orderShipment struct {
	timeout  time.Duration
	timers   sdk.TimerService
	order    state.ValueState[int64] // the order's time, ms; absent: no open order
	shipment state.ValueState[int64] // a shipment that came before its order
}

// Open implements sdk.KeyedCoProcessFunction.
func (f *orderShipment) Open(ctx sdk.OpenContext) error {
	f.timers = ctx.TimerService()
	var err error
	if f.order, err = state.GetValueState(ctx.Backend, state.ValueStateDescriptor[int64]{Name: "order", Serializer: state.Int64Serializer{}}); err != nil {
		return err
	}
	f.shipment, err = state.GetValueState(ctx.Backend, state.ValueStateDescriptor[int64]{Name: "shipment", Serializer: state.Int64Serializer{}})
	return err
}

// ProcessElement1 implements sdk.KeyedCoProcessFunction: an order.
func (f *orderShipment) ProcessElement1(_ context.Context, rec sdk.Record, out sdk.Collector) error {
	if _, shipped, err := f.shipment.Value(); err != nil || shipped {
		if err != nil {
			return err
		}
		if err := f.shipment.Clear(); err != nil {
			return err
		}
		return emit(out, rec, "shipped")
	}
	if err := f.order.Update(rec.Timestamp.UnixMilli()); err != nil {
		return err
	}
	return f.timers.RegisterEventTimeTimer(rec.Timestamp.Add(f.timeout))
}

// ProcessElement2 implements sdk.KeyedCoProcessFunction: a shipment.
func (f *orderShipment) ProcessElement2(_ context.Context, rec sdk.Record, out sdk.Collector) error {
	at, open, err := f.order.Value()
	if err != nil {
		return err
	}
	if !open {
		return f.shipment.Update(rec.Timestamp.UnixMilli())
	}
	if err := f.order.Clear(); err != nil {
		return err
	}
	if err := f.timers.DeleteEventTimeTimer(time.UnixMilli(at).Add(f.timeout)); err != nil {
		return err
	}
	return emit(out, rec, "shipped")
}

// OnTimer implements sdk.TimerFunction: the order's timeout.
func (f *orderShipment) OnTimer(_ context.Context, ts time.Time, tc sdk.TimerContext, out sdk.Collector) error {
	if _, open, err := f.order.Value(); err != nil || !open {
		return err
	}
	if err := f.order.Clear(); err != nil {
		return err
	}
	return emit(out, sdk.Record{Key: tc.Key, Timestamp: ts}, "not_shipped")
}

// emit writes {"order": <key>, "status": status} keyed by the order id.
func emit(out sdk.Collector, rec sdk.Record, status string) error {
	return out.Collect(sdk.Record{Key: rec.Key, Timestamp: rec.Timestamp,
		Value: fmt.Appendf(nil, `{"order":%q,"status":%q}`, rec.Key, status)})
}
