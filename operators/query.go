package operators

import (
	"errors"
	"fmt"

	"github.com/kstreamd/kstreamd/state"
)

// ErrNotOpen is returned by KeyedOperator.QueryState before the operator
// opened its state backend (the subtask is still restoring).
var ErrNotOpen = errors.New("operators: keyed state not open yet")

// QueryState reads the keyed state called name of key (a serialized key,
// what the operator's key_by selected) with state.QueryKey: the key's
// value, list or map entries, read-only, TTL honoured. It is the read side
// of Flink's queryable state. It must run on the subtask's goroutine,
// between records: the job posts it to the subtask's mailbox, so the
// answer reflects exactly the records the subtask processed so far.
//
// It returns ErrNotOpen before Open, state.ErrClosed after Close, and
// state.ErrKeyInFlight when the operator runs async state (Flink State V2)
// and a record of key is still in flight: the caller asks again after the
// mailbox ran the record's completions. state.QueryKey's errors (unknown
// state, key group of another subtask) are returned as they are.
func (o *KeyedOperator) QueryState(name string, key []byte) (state.KeyQueryResult, error) {
	if o.backend == nil {
		return state.KeyQueryResult{}, fmt.Errorf("%w: %s[%d]", ErrNotOpen, o.info.Operator, o.info.Subtask)
	}
	if o.aec != nil && o.aec.KeyInFlight(key) {
		return state.KeyQueryResult{}, state.ErrKeyInFlight
	}
	return state.QueryKey(o.backend, name, key)
}
