package operators

import (
	"context"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// AsyncOpenContext is what an AsyncKeyedProcessFunction sees when it opens:
// the OpenContext of a synchronous function plus the subtask's
// AsyncExecutionController, from which it obtains async state handles
// (state.GetAsyncValueState(ctx.AEC, desc) and friends). Backend stays set
// so the synchronous API remains available, but mixing both in one function
// is discouraged: a synchronous call does not wait for the record's async
// requests (see state/ASYNC.md).
type AsyncOpenContext struct {
	OpenContext
	// AEC is the subtask's controller; it runs every record of the function
	// and orders the records of one key.
	AEC *state.AsyncExecutionController
}

// AsyncKeyedProcessFunction processes a keyed stream through Flink's State
// V2 (async state, enabled per keyed stream with EnableAsyncState; in a
// pipeline, operators[].async_state). Every method runs on the subtask
// goroutine, and so does every continuation of the futures it chains.
//
// ProcessElement must not block on state: it issues async state calls and
// chains their StateFutures, emitting with out from within continuations if
// need be (out stays valid after ProcessElement returned). The record is
// finished when ProcessElement returned and every chain it started
// completed; only then does the next record of the same key enter
// ProcessElement, while records of other keys may overtake it. An error
// returned by ProcessElement or by a continuation fails the task.
type AsyncKeyedProcessFunction interface {
	// Open registers keyed state before the first record.
	Open(ctx AsyncOpenContext) error
	// ProcessElement handles one record; async state handles act on
	// rec.Key.
	ProcessElement(ctx context.Context, rec runtime.Record, out Collector) error
}

// NewAsyncKeyedProcessOperator returns the operator of one subtask running
// the async function fn. mailbox must be the mailbox of the
// runtime.OperatorTask running the operator (runtime.OperatorTaskConfig's
// Mailbox): completions of state reads made off the subtask goroutine come
// back through it and run when the task loop yields to it. opts tune the
// AsyncExecutionController (in-flight limit, read workers).
//
// The operator, per keyed subtask: at Open it opens the backend, then the
// controller over backend and mailbox, then fn; each record goes to the
// controller's Process; before a checkpoint snapshot (after barrier
// alignment) and at end of input it drains the controller, so a snapshot
// holds the effects of exactly the records before the barrier; at Close it
// closes the controller (stopping its read workers) before the backend. A
// failure of the controller fails the task at the next record, barrier or
// end of input.
func NewAsyncKeyedProcessOperator(info OpenContext, open BackendOpener, restore *Restore, fn AsyncKeyedProcessFunction, out *runtime.Output, mailbox *runtime.Mailbox, opts ...state.AsyncOpt) *KeyedOperator {
	return &KeyedOperator{info: info, open: open, restore: restore, async: fn, mailbox: mailbox, asyncOpts: opts, out: out}
}
