package runtime

import (
	"context"
	"testing"
	"time"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time          { return c.now }
func (c *fakeClock) advance(d time.Duration) { c.now = c.now.Add(d) }
func (s *secondsSum) Add(v float64)          { s.v += v }
func newTestTimes() (*IOTimes, *fakeClock, *secondsSum, *secondsSum) {
	c := &fakeClock{now: time.Unix(1000, 0)}
	idle, bp := &secondsSum{}, &secondsSum{}
	m := NewIOTimes(idle, bp)
	m.SetClock(c.Now)
	return m, c, idle, bp
}

// secondsSum is a counter of seconds.
type secondsSum struct{ v float64 }

// TestIOTimes: the meter splits wall time into idle, back-pressured and
// busy exactly by the marked waits; a wait in progress counts up to the
// read; the counters get each wait's seconds when it ends; Stop freezes
// the wall time; a nil meter reads zeros.
func TestIOTimes(t *testing.T) {
	m, c, idle, bp := newTestTimes()
	if got := m.Read(); got.Wall != 0 || got.Busy() != 0 {
		t.Fatalf("before Start: %+v", got)
	}
	m.Start()
	c.advance(100 * time.Millisecond) // busy 100
	m.BeginIdle()
	c.advance(300 * time.Millisecond) // idle 300, in progress
	got := m.Read()
	if got.Wall != 400*time.Millisecond || got.Idle != 300*time.Millisecond || got.BackPressured != 0 || got.Busy() != 100*time.Millisecond {
		t.Fatalf("idle in progress: %+v busy %v", got, got.Busy())
	}
	if idle.v != 0 {
		t.Fatalf("idle counter %v before the wait ended", idle.v)
	}
	m.EndIdle()
	if idle.v != 0.3 {
		t.Fatalf("idle counter %v, want 0.3", idle.v)
	}
	c.advance(50 * time.Millisecond) // busy 150
	m.BeginBackPressure()
	c.advance(500 * time.Millisecond)
	m.EndBackPressure()
	c.advance(50 * time.Millisecond) // busy 200
	got = m.Read()
	if got.Wall != time.Second || got.Idle != 300*time.Millisecond || got.BackPressured != 500*time.Millisecond || got.Busy() != 200*time.Millisecond {
		t.Fatalf("after waits: %+v busy %v", got, got.Busy())
	}
	if bp.v != 0.5 {
		t.Fatalf("back-pressure counter %v, want 0.5", bp.v)
	}
	// Stop ends a wait in progress and freezes the wall time.
	m.BeginBackPressure()
	c.advance(200 * time.Millisecond)
	m.Stop()
	c.advance(time.Hour)
	got = m.Read()
	if got.Wall != 1200*time.Millisecond || got.BackPressured != 700*time.Millisecond || got.Busy() != 200*time.Millisecond {
		t.Fatalf("after Stop: %+v busy %v", got, got.Busy())
	}
	if bp.v != 0.7 {
		t.Fatalf("back-pressure counter %v after Stop, want 0.7", bp.v)
	}
	var none *IOTimes
	none.Start()
	none.BeginIdle()
	none.EndIdle()
	none.BeginBackPressure()
	none.EndBackPressure()
	none.Stop()
	if got := none.Read(); got != (IOTotals{}) {
		t.Fatalf("nil meter read %+v", got)
	}
}

// TestIOTimesNestedIdle: an idle wait begun inside another (a source's
// poll inside a wait of its own) counts once, until the outer one ends.
func TestIOTimesNestedIdle(t *testing.T) {
	m, c, idle, _ := newTestTimes()
	m.Start()
	m.BeginIdle()
	c.advance(100 * time.Millisecond)
	m.BeginIdle()
	c.advance(100 * time.Millisecond)
	m.EndIdle()
	c.advance(100 * time.Millisecond)
	m.EndIdle()
	if got := m.Read(); got.Idle != 300*time.Millisecond || got.Busy() != 0 {
		t.Fatalf("nested idle: %+v", got)
	}
	if idle.v < 0.2999 || idle.v > 0.3001 {
		t.Fatalf("idle counter %v, want 0.3", idle.v)
	}
}

// TestWriterCountsBackPressure: a writer's send to a full channel counts
// the time it waited as back-pressure in its output's meter, and a send
// that does not wait counts nothing; a task waiting on an empty gate
// counts idle time.
func TestWriterCountsBackPressure(t *testing.T) {
	m := NewIOTimes(nil, nil)
	m.Start()
	ch := NewChannel(1)
	out := NewOutput(nil)
	out.AddWriter(NewWriter([]Channel{ch}, ForwardPartitioner{}))
	out.SetIOTimes(m)
	ctx := context.Background()
	if err := out.Emit(ctx, Record{Value: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	if got := m.Read().BackPressured; got != 0 {
		t.Fatalf("back-pressured %v after a send that did not wait", got)
	}
	go func() {
		time.Sleep(200 * time.Millisecond)
		<-ch
	}()
	if err := out.Emit(ctx, Record{Value: []byte("b")}); err != nil {
		t.Fatal(err)
	}
	if got := m.Read().BackPressured; got < 150*time.Millisecond || got > 5*time.Second {
		t.Fatalf("back-pressured %v, want about the 200ms the channel was full", got)
	}
}

// TestOperatorTaskCountsIdle: an operator task waiting for input on an
// empty gate counts that time as idle in its output's meter, and stops
// the meter when it finishes.
func TestOperatorTaskCountsIdle(t *testing.T) {
	m := NewIOTimes(nil, nil)
	in := NewChannel(4)
	out := NewOutput(nil)
	out.SetIOTimes(m)
	task := NewOperatorTask(OperatorTaskConfig{ID: TaskID{Operator: "op"}, Gate: NewInputGate([]InputChannel{{Ch: in}}),
		Operator: nopOperator{}, Output: out, BootstrapInput: -1})
	done := make(chan error, 1)
	go func() { done <- task.Run(context.Background(), nil) }()
	time.Sleep(300 * time.Millisecond)
	in <- Element{Kind: KindEndOfInput}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := m.Read()
	if got.Idle < 250*time.Millisecond || got.Idle > got.Wall || got.BackPressured != 0 {
		t.Fatalf("task times %+v, want about 300ms idle of the wall time", got)
	}
	wall := got.Wall
	time.Sleep(20 * time.Millisecond)
	if again := m.Read().Wall; again != wall {
		t.Fatalf("wall time grew from %v to %v after the task finished", wall, again)
	}
}

// nopOperator processes nothing.
type nopOperator struct{}

func (nopOperator) Open(context.Context) error                       { return nil }
func (nopOperator) ProcessRecord(context.Context, int, Record) error { return nil }
func (nopOperator) EndInput(context.Context) error                   { return nil }
func (nopOperator) Close() error                                     { return nil }
