package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// stage is a chainable test operator: it appends its tag to each record's
// value and emits it, records the watermarks it sees and what its
// snapshots cover, and fails records whose value contains bad (with a
// *RecordError) or fatal (with a plain error).
type stage struct {
	tag       string
	out       *Output
	bad       string
	fatal     string
	mu        sync.Mutex
	seen      []string
	wms       []int64
	snaps     []string // "<checkpoint>:<records seen>"
	ended     bool
	opened    bool
	closed    bool
	completed []int64
}

func (s *stage) Open(context.Context) error { s.opened = true; return nil }
func (s *stage) ProcessRecord(ctx context.Context, _ int, rec Record) error {
	v := string(rec.Value)
	if s.bad != "" && strings.Contains(v, s.bad) {
		return &RecordError{Reason: ReasonEvalError, Detail: s.tag + " refuses " + v}
	}
	if s.fatal != "" && strings.Contains(v, s.fatal) {
		return errors.New(s.tag + " broke")
	}
	s.mu.Lock()
	s.seen = append(s.seen, v)
	s.mu.Unlock()
	rec.Value = []byte(v + s.tag)
	return s.out.Emit(ctx, rec)
}
func (s *stage) ProcessWatermark(_ context.Context, wm time.Time) error {
	s.wms = append(s.wms, wm.UnixMilli())
	return nil
}
func (s *stage) EndInput(context.Context) error { s.ended = true; return nil }
func (s *stage) Close() error                   { s.closed = true; return nil }
func (s *stage) SnapshotState(_ context.Context, b *Barrier) (SnapshotFinisher, error) {
	s.mu.Lock()
	s.snaps = append(s.snaps, fmt.Sprintf("%d:%d", b.CheckpointID, len(s.seen)))
	n := int64(len(s.seen))
	s.mu.Unlock()
	return func(context.Context) (TaskSnapshot, error) { return TaskSnapshot{Bytes: n}, nil }, nil
}
func (s *stage) NotifyCheckpointComplete(_ context.Context, id int64) error {
	s.completed = append(s.completed, id)
	return nil
}
func (s *stage) NotifyCheckpointAborted(context.Context, int64) {}

// badRecords is a BadRecordHandler that keeps the records it got.
type badRecords struct{ got []string }

func (b *badRecords) HandleBadRecord(_ context.Context, rec Record, err *RecordError) error {
	b.got = append(b.got, string(rec.Value)+" ("+err.Detail+")")
	return nil
}

// chainOf builds a task running head with b and c chained after it
// (head -> b -> c), c emitting to down; it returns the task.
func chainOf(in Channel, down Channel, head, b, c *stage, resp CheckpointResponder, headBad, bBad, cBad BadRecordHandler) *OperatorTask {
	head.out, b.out = NewOutput(nil), NewOutput(nil)
	c.out = NewOutput(nil, NewWriter([]Channel{down}, ForwardPartitioner{}).WithBatching(4))
	cb := &ChainedOperator{ID: TaskID{"b", 0}, Operator: b, Output: b.out, BadRecords: bBad}
	cc := &ChainedOperator{ID: TaskID{"c", 0}, Operator: c, Output: c.out, BadRecords: cBad}
	head.out.AddChained(cb)
	b.out.AddChained(cc)
	return NewOperatorTask(OperatorTaskConfig{ID: TaskID{"a", 0}, Gate: NewInputGate([]InputChannel{{Ch: in}}), Operator: head,
		Output: head.out, BootstrapInput: -1, Responder: resp, BadRecords: []BadRecordHandler{headBad}, Chain: []*ChainedOperator{cb, cc}})
}

// TestChainRunsOperatorsInOneTask: three operators chained in one task see
// every record in order, each after the one before (the values carry the
// tags of the stages they passed); a watermark reaches each after the
// records before it; a barrier snapshots each, acknowledged under each
// operator's own id and covering exactly the records before the barrier;
// end of input ends each, and everything reaches the downstream channel
// in order; a completed checkpoint reaches each chained listener.
func TestChainRunsOperatorsInOneTask(t *testing.T) {
	in, down := NewChannel(64), NewChannel(64)
	a, b, c := &stage{tag: "a"}, &stage{tag: "b"}, &stage{tag: "c"}
	resp := &idResponder{}
	task := chainOf(in, down, a, b, c, resp, nil, nil, nil)
	if got, want := task.SideOutputIDs(), []TaskID{{"b", 0}, {"c", 0}}; !slices.Equal(got, want) {
		t.Fatalf("SideOutputIDs = %v, want %v", got, want)
	}
	in <- rec("1")
	in <- rec("2")
	in <- Element{Kind: KindWatermark, Watermark: time.UnixMilli(5)}
	in <- barrier(1)
	in <- rec("3")
	in <- endOfInput()
	if err := task.Run(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*stage{a, b, c} {
		if !s.opened || !s.ended || !s.closed {
			t.Errorf("%s: opened %v ended %v closed %v, want all true", s.tag, s.opened, s.ended, s.closed)
		}
		if want := []int64{5}; !slices.Equal(s.wms, want) {
			t.Errorf("%s saw watermarks %v, want %v", s.tag, s.wms, want)
		}
		if want := []string{"1:2"}; !slices.Equal(s.snaps, want) {
			t.Errorf("%s snapshots %v, want %v", s.tag, s.snaps, want)
		}
	}
	if !slices.Equal(b.seen, []string{"1a", "2a", "3a"}) || !slices.Equal(c.seen, []string{"1ab", "2ab", "3ab"}) {
		t.Errorf("b saw %v, c saw %v", b.seen, c.seen)
	}
	var got []string
	for el := range drain(down) {
		switch el.Kind {
		case KindRecords:
			for _, r := range el.Batch.Records {
				got = append(got, string(r.Value))
			}
		case KindWatermark:
			got = append(got, fmt.Sprintf("wm %d", el.Watermark.UnixMilli()))
		case KindBarrier:
			got = append(got, fmt.Sprintf("barrier %d", el.Barrier.CheckpointID))
		default:
			got = append(got, el.Kind.String())
		}
	}
	if want := []string{"1abc", "2abc", "wm 5", "barrier 1", "3abc", "end-of-input"}; !slices.Equal(got, want) {
		t.Errorf("downstream got %v, want %v", got, want)
	}
	resp.mu.Lock()
	acks := slices.Sorted(slices.Values(resp.acks))
	resp.mu.Unlock()
	if want := []string{"a[0]:1", "b[0]:1", "c[0]:1"}; !slices.Equal(acks, want) {
		t.Errorf("acknowledgements %v, want %v", acks, want)
	}
}

// drain yields what ch holds now.
func drain(ch Channel) func(func(Element) bool) {
	return func(yield func(Element) bool) {
		for {
			select {
			case el := <-ch:
				if !yield(el) {
					return
				}
			default:
				return
			}
		}
	}
}

// TestChainNotifiesChainedListeners: a completed checkpoint reaches the
// listener of every chained operator, on the task goroutine.
func TestChainNotifiesChainedListeners(t *testing.T) {
	in, down := NewChannel(8), NewChannel(64)
	a, b, c := &stage{tag: "a"}, &stage{tag: "b"}, &stage{tag: "c"}
	task := chainOf(in, down, a, b, c, &idResponder{}, nil, nil, nil)
	done := make(chan error, 1)
	go func() { done <- task.Run(context.Background(), nil) }()
	task.NotifyCheckpointComplete(7)
	in <- rec("x")
	in <- endOfInput()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, s := range []*stage{a, b, c} {
		if !slices.Equal(s.completed, []int64{7}) {
			t.Errorf("%s completed %v, want [7]", s.tag, s.completed)
		}
	}
}

// TestChainBadRecordsMeetTheirOperatorsPolicy: a record a chained
// operator refuses with a *RecordError goes to that operator's handler,
// not the head's, and the other records go on; a plain error of a chained
// operator fails the task naming that operator, and the head's handler
// never sees it.
func TestChainBadRecordsMeetTheirOperatorsPolicy(t *testing.T) {
	in, down := NewChannel(64), NewChannel(64)
	a, b, c := &stage{tag: "a"}, &stage{tag: "b", bad: "2"}, &stage{tag: "c", bad: "3"}
	ha, hb, hc := &badRecords{}, &badRecords{}, &badRecords{}
	task := chainOf(in, down, a, b, c, nil, ha, hb, hc)
	for _, v := range []string{"1", "2", "3", "4"} {
		in <- rec(v)
	}
	in <- endOfInput()
	if err := task.Run(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if len(ha.got) != 0 || !slices.Equal(hb.got, []string{"2a (b refuses 2a)"}) || !slices.Equal(hc.got, []string{"3ab (c refuses 3ab)"}) {
		t.Errorf("bad records: head %v, b %v, c %v", ha.got, hb.got, hc.got)
	}
	if !slices.Equal(c.seen, []string{"1ab", "4ab"}) {
		t.Errorf("c saw %v, want [1ab 4ab]", c.seen)
	}

	in2 := NewChannel(8)
	a2, b2, c2 := &stage{tag: "a"}, &stage{tag: "b"}, &stage{tag: "c", fatal: "9"}
	ha2 := &badRecords{}
	task2 := chainOf(in2, NewChannel(64), a2, b2, c2, nil, ha2, nil, nil)
	in2 <- rec("9")
	in2 <- endOfInput()
	err := task2.Run(context.Background(), nil)
	if err == nil || err.Error() != "c[0]: c broke" {
		t.Errorf("Run = %v, want c[0]: c broke", err)
	}
	if len(ha2.got) != 0 {
		t.Errorf("the head's policy got %v", ha2.got)
	}
	for _, s := range []*stage{a2, b2, c2} {
		if !s.closed {
			t.Errorf("%s not closed after the failure", s.tag)
		}
	}
	// A *RecordError of a chained operator without a handler fails the
	// task too: the head's handler does not take it for its own.
	in3 := NewChannel(8)
	a3, b3, c3 := &stage{tag: "a"}, &stage{tag: "b", bad: "5"}, &stage{tag: "c"}
	ha3 := &badRecords{}
	task3 := chainOf(in3, NewChannel(64), a3, b3, c3, nil, ha3, nil, nil)
	in3 <- rec("5")
	in3 <- endOfInput()
	var re *RecordError
	if err := task3.Run(context.Background(), nil); !errors.As(err, &re) || !strings.HasPrefix(err.Error(), "b[0]: ") || len(ha3.got) != 0 {
		t.Errorf("Run = %v (head's policy got %v), want b[0]'s bad record to fail the task", err, ha3.got)
	}
}
