package operators

import (
	"context"
	"fmt"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// BackendOpener opens the keyed state backend of one subtask; the operator
// calls it in Open and closes the backend in Close.
type BackendOpener func() (state.KeyedStateBackend, error)

// KeyedOperator drives a KeyedProcessFunction or a
// KeyedBroadcastProcessFunction on one subtask; it implements
// runtime.Operator. Logical input 0 is the keyed input, input 1 the
// broadcast input.
type KeyedOperator struct {
	info      OpenContext
	open      BackendOpener
	keyed     KeyedProcessFunction
	broadcast KeyedBroadcastProcessFunction
	out       *runtime.Output
	backend   state.KeyedStateBackend
	coll      collector
}

// NewKeyedBroadcastOperator returns the operator of one subtask running fn;
// info names the subtask (its Backend is filled in at Open).
func NewKeyedBroadcastOperator(info OpenContext, open BackendOpener, fn KeyedBroadcastProcessFunction, out *runtime.Output) *KeyedOperator {
	return &KeyedOperator{info: info, open: open, broadcast: fn, out: out}
}

// NewKeyedProcessOperator returns the operator of one subtask running fn.
func NewKeyedProcessOperator(info OpenContext, open BackendOpener, fn KeyedProcessFunction, out *runtime.Output) *KeyedOperator {
	return &KeyedOperator{info: info, open: open, keyed: fn, out: out}
}

// Open implements runtime.Operator: it opens the state backend and the
// function.
func (o *KeyedOperator) Open(ctx context.Context) error {
	b, err := o.open()
	if err != nil {
		return err
	}
	o.backend = b
	o.info.Backend = b
	if o.broadcast != nil {
		return o.broadcast.Open(o.info)
	}
	return o.keyed.Open(o.info)
}

// ProcessRecord implements runtime.Operator.
func (o *KeyedOperator) ProcessRecord(ctx context.Context, input int, rec runtime.Record) error {
	o.coll = collector{ctx: ctx, out: o.out}
	switch {
	case input == 0:
		o.backend.SetCurrentKey(rec.Key)
		if o.broadcast != nil {
			return o.broadcast.ProcessElement(ctx, rec, &o.coll)
		}
		return o.keyed.ProcessElement(ctx, rec, &o.coll)
	case input == 1 && o.broadcast != nil:
		return o.broadcast.ProcessBroadcastElement(ctx, rec, &o.coll)
	}
	return fmt.Errorf("operators: %s[%d]: record on unknown input %d", o.info.Operator, o.info.Subtask, input)
}

// EndInput implements runtime.Operator; the synchronous functions have
// nothing in flight.
func (o *KeyedOperator) EndInput(context.Context) error { return nil }

// Close implements runtime.Operator: it closes the state backend.
func (o *KeyedOperator) Close() error {
	if o.backend == nil {
		return nil
	}
	return o.backend.Close()
}

type collector struct {
	ctx context.Context
	out *runtime.Output
}

func (c *collector) Collect(rec runtime.Record) error {
	if c.out == nil {
		return nil
	}
	return c.out.Emit(c.ctx, rec)
}
