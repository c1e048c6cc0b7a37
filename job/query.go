package job

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/operators"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// Queryable state (issue 26 item 3; Flink's queryable state, Kafka
// Streams' interactive queries): GET /api/v1/state/{operator}/{state}
// asks Job.QueryState, which finds the subtask of the operator owning the
// key's key group and posts the read to that subtask's mailbox, so it runs
// on the subtask's own goroutine between two records, as every access to
// its state backend does (hashmap or Pebble, sync or async state): no lock
// on the record path, no data race, and an answer consistent per key with
// the records the subtask processed so far.

// ErrUnknownOperator is wrapped by the *UnknownOperatorError of
// Job.QueryState.
var ErrUnknownOperator = errors.New("job: unknown operator")

// ErrNotRunning is wrapped by Job.QueryState's error when the subtask
// cannot answer: the attempt stopped (the job restarts or stopped) or the
// subtask has not opened its state yet (restoring).
var ErrNotRunning = errors.New("job: not running")

// UnknownOperatorError is returned by Job.QueryState for an operator that
// is neither the name nor the uid of an operator keeping keyed state.
// Keyed lists those that do ("name" or "name (uid u)"), in graph order;
// NotKeyed is set when Operator names a vertex without keyed state.
type UnknownOperatorError struct {
	Operator string
	NotKeyed bool
	Keyed    []string
}

// Error implements error.
func (e *UnknownOperatorError) Error() string {
	what := fmt.Sprintf("no operator %q", e.Operator)
	if e.NotKeyed {
		what = fmt.Sprintf("operator %q keeps no keyed state", e.Operator)
	}
	if len(e.Keyed) == 0 {
		return "job: " + what + "; this job has no operator with keyed state"
	}
	return "job: " + what + "; operators with keyed state: " + strings.Join(e.Keyed, ", ")
}

// Unwrap returns ErrUnknownOperator.
func (e *UnknownOperatorError) Unwrap() error { return ErrUnknownOperator }

// StateAnswer is the answer of Job.QueryState: the operator (its name and
// uid) and the subtask that answered, then the state of the key
// (state.KeyQueryResult, whose fields it inlines in JSON).
type StateAnswer struct {
	Operator string `json:"operator"`
	UID      string `json:"uid"`
	Subtask  int    `json:"subtask"`
	// Unit is the cluster-mode unit that answered (Member.QueryState).
	Unit *UnitID `json:"unit,omitempty"`
	state.KeyQueryResult
}

// queryable is a keyed operator subtask's read of its state
// (operators.KeyedOperator.QueryState), run on its goroutine.
type queryable interface {
	QueryState(name string, key []byte) (state.KeyQueryResult, error)
}

// queryTarget is one keyed operator subtask: the key groups it owns, its
// operator and the mailbox of the task it runs in (its chain head's).
type queryTarget struct {
	sub     int
	kgs     keygroup.Range
	op      queryable
	mailbox *runtime.Mailbox
}

// queryVertex is an operator keeping keyed state, with its subtasks.
type queryVertex struct {
	name, uid string
	subtasks  []queryTarget
}

// queries holds what Job.QueryState reads: filled by Build (on one
// goroutine, before Run) and fixed after it; done is closed when Run
// returns, after which no mailbox runs an action any more.
type queries struct {
	vertices []*queryVertex // graph order
	once     sync.Once      // makes done
	stopOnce sync.Once      // closes done
	done     chan struct{}
}

// add registers subtask sub of op, owning key groups kgs, when its runtime
// operator can read its state (a keyed operator).
func (q *queries) add(g *graph.Graph, op *graph.Operator, sub int, kgs keygroup.Range, rop runtime.Operator, mb *runtime.Mailbox) {
	qo, ok := rop.(queryable)
	if !ok {
		return
	}
	var v *queryVertex
	if n := len(q.vertices); n > 0 && q.vertices[n-1].name == op.Name {
		v = q.vertices[n-1]
	} else {
		v = &queryVertex{name: op.Name, uid: g.UID(op.Name)}
		q.vertices = append(q.vertices, v)
	}
	v.subtasks = append(v.subtasks, queryTarget{sub: sub, kgs: kgs, op: qo, mailbox: mb})
}

// hostedBy sets the mailbox of subtask id when a source task hosts its
// chain (runtime.ChainHost): add got none, the source makes its own.
func (q *queries) hostedBy(id runtime.TaskID, mb *runtime.Mailbox) {
	for _, v := range q.vertices {
		if v.name != id.Operator {
			continue
		}
		for i := range v.subtasks {
			if v.subtasks[i].sub == id.Subtask && v.subtasks[i].mailbox == nil {
				v.subtasks[i].mailbox = mb
			}
		}
	}
}

// doneCh returns the channel closed when Run returned.
func (q *queries) doneCh() chan struct{} {
	q.once.Do(func() { q.done = make(chan struct{}) })
	return q.done
}

// stop marks the attempt ended (Run returned).
func (q *queries) stop() { q.stopOnce.Do(func() { close(q.doneCh()) }) }

// vertex returns the operator called operator, by name first, then by uid.
func (q *queries) vertex(g *graph.Graph, operator string) (*queryVertex, error) {
	for _, byUID := range []bool{false, true} {
		for _, v := range q.vertices {
			if !byUID && v.name == operator || byUID && v.uid == operator {
				return v, nil
			}
		}
	}
	e := &UnknownOperatorError{Operator: operator, Keyed: []string{}}
	for _, v := range q.vertices {
		e.Keyed = append(e.Keyed, keyedName(v.name, v.uid))
	}
	e.NotKeyed = slices.ContainsFunc(g.Operators, func(o *graph.Operator) bool { return o.Name == operator || g.UID(o.Name) == operator }) ||
		slices.ContainsFunc(g.Sources, func(s *graph.Source) bool { return s.Name == operator }) ||
		slices.ContainsFunc(g.Sinks, func(s *graph.Sink) bool { return s.Name == operator })
	return nil, e
}

// queryRetry is how long QueryState waits before asking a subtask again
// whose answer was state.ErrKeyInFlight (an async record of the key not
// finished yet).
const queryRetry = time.Millisecond

// QueryState returns the current state called stateName of key (the
// serialized key, as the operator's key_by selected it: a string's bytes,
// a number's JSON text) in the operator named operator (its name, else its
// uid), read by the subtask owning the key's key group on its own
// goroutine (from its mailbox, between records): state.QueryKey's answer,
// consistent with the records that subtask processed so far; for an
// operator with async state, once no record of the key is in flight. A key
// with nothing stored is Found false. Safe for concurrent use.
//
// It returns a *UnknownOperatorError for an operator without keyed state,
// a *state.UnknownStateError for a state the subtask does not hold, an
// error wrapping ErrNotRunning when the attempt stopped or the subtask is
// not open yet, a *state.KeyGroupError when no subtask of this job owns
// the key's key group (a cluster-mode unit owns only its own), and ctx's
// error when ctx ends first (a subtask busy with a long record or blocked
// by back-pressure answers only between records).
func (j *Job) QueryState(ctx context.Context, operator, stateName string, key []byte) (StateAnswer, error) {
	v, err := j.queries.vertex(j.g, operator)
	if err != nil {
		return StateAnswer{}, err
	}
	kg := keygroup.Assign(key, j.maxP)
	i := slices.IndexFunc(v.subtasks, func(t queryTarget) bool { return t.kgs.Contains(kg) })
	if i < 0 {
		return StateAnswer{}, &state.KeyGroupError{KeyGroup: kg, Range: v.subtasks[0].kgs}
	}
	t := v.subtasks[i]
	key = slices.Clone(key)
	done := j.queries.doneCh()
	for {
		type answer struct {
			r   state.KeyQueryResult
			err error
		}
		ch := make(chan answer, 1)
		t.mailbox.Execute(func() {
			r, err := t.op.QueryState(stateName, key)
			ch <- answer{r, err}
		})
		var a answer
		select {
		case a = <-ch:
		case <-done:
			return StateAnswer{}, fmt.Errorf("%w: the attempt running %s[%d] stopped", ErrNotRunning, v.name, t.sub)
		case <-ctx.Done():
			return StateAnswer{}, fmt.Errorf("job: %s[%d] did not answer: %w", v.name, t.sub, ctx.Err())
		}
		switch {
		case errors.Is(a.err, state.ErrKeyInFlight):
			select {
			case <-time.After(queryRetry):
				continue
			case <-done:
				return StateAnswer{}, fmt.Errorf("%w: the attempt running %s[%d] stopped", ErrNotRunning, v.name, t.sub)
			case <-ctx.Done():
				return StateAnswer{}, fmt.Errorf("job: %s[%d]: a record of the key stayed in flight: %w", v.name, t.sub, ctx.Err())
			}
		case errors.Is(a.err, state.ErrClosed), errors.Is(a.err, operators.ErrNotOpen):
			return StateAnswer{}, fmt.Errorf("%w: %s[%d]: %v", ErrNotRunning, v.name, t.sub, a.err)
		case a.err != nil:
			return StateAnswer{}, a.err
		}
		return StateAnswer{Operator: v.name, UID: v.uid, Subtask: t.sub, KeyQueryResult: a.r}, nil
	}
}
