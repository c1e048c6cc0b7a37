package runtime

import (
	"context"
	"fmt"
)

// Task is one subtask: a goroutine the Job starts and waits for.
type Task interface {
	// Name returns "<operator>[<subtask>]", used in logs and errors.
	Name() string
	// Run runs the subtask until its input ends, it fails, or ctx ends. Its
	// errors start with the task name.
	// Sources also watch stop: when it is closed they stop reading, emit
	// end-of-input downstream and return nil. Other tasks ignore stop: they
	// finish when every input channel delivered end-of-input. Run returns
	// nil after a clean finish and ctx.Err() (or its own error) otherwise.
	Run(ctx context.Context, stop <-chan struct{}) error
}

// Operator is the logic of a non-source subtask driven by an OperatorTask
// (Flink's StreamOperator). Every method runs on the subtask goroutine.
type Operator interface {
	// Open prepares the operator (opens state) before the first record.
	Open(ctx context.Context) error
	// ProcessRecord handles one record of logical input input (0 = main,
	// 1 = broadcast side). An error fails the job.
	ProcessRecord(ctx context.Context, input int, rec Record) error
	// EndInput is called once every input channel delivered end-of-input,
	// before end-of-input is forwarded: finish in-flight work and flush.
	EndInput(ctx context.Context) error
	// Close releases the operator's resources (closes state). It is called
	// exactly once after Open succeeded, whether the task succeeded or not.
	Close() error
}

// OperatorTask runs an Operator over an InputGate on one goroutine (Flink's
// StreamTask with its mailbox loop).
type OperatorTask struct {
	name     string
	gate     *InputGate
	op       Operator
	out      *Output
	mailbox  *Mailbox
	inputs   int
	recIn    interface{ Inc() }
	bootstrp int
}

// OperatorTaskConfig configures NewOperatorTask.
type OperatorTaskConfig struct {
	// Name is "<operator>[<subtask>]".
	Name string
	// Gate holds the subtask's input channels.
	Gate *InputGate
	// Operator is the logic.
	Operator Operator
	// Output receives what the operator emits and the forwarded control
	// elements; nil for a sink.
	Output *Output
	// Mailbox runs actions other goroutines post for this subtask; nil
	// makes a new one.
	Mailbox *Mailbox
	// BootstrapInput, when >= 0, is a logical input (a broadcast side) that
	// must be caught up before any other input is read: every other input
	// stays blocked until every channel of BootstrapInput delivered
	// KindCaughtUp or end-of-input. -1 disables the bootstrap.
	BootstrapInput int
	// RecordsIn is incremented per record received; may be nil.
	RecordsIn interface{ Inc() }
}

// NewOperatorTask returns a task from cfg.
func NewOperatorTask(cfg OperatorTaskConfig) *OperatorTask {
	mb := cfg.Mailbox
	if mb == nil {
		mb = NewMailbox()
	}
	t := &OperatorTask{name: cfg.Name, gate: cfg.Gate, op: cfg.Operator, out: cfg.Output, mailbox: mb, recIn: cfg.RecordsIn, bootstrp: cfg.BootstrapInput}
	for i := 0; i < cfg.Gate.NumChannels(); i++ {
		t.inputs = max(t.inputs, cfg.Gate.Channel(i).Input+1)
	}
	return t
}

// Name implements Task.
func (t *OperatorTask) Name() string { return t.name }

// Mailbox returns the subtask's mailbox.
func (t *OperatorTask) Mailbox() *Mailbox { return t.mailbox }

// Run implements Task: open, loop over the gate and the mailbox until every
// channel ended, EndInput, forward end-of-input, close.
func (t *OperatorTask) Run(ctx context.Context, _ <-chan struct{}) (err error) {
	if err := t.op.Open(ctx); err != nil {
		return fmt.Errorf("%s: open: %w", t.name, err)
	}
	defer func() {
		if cerr := t.op.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("%s: close: %w", t.name, cerr)
		}
	}()
	pending := t.startBootstrap()
	for !t.gate.Finished() {
		el, ch, ok, err := t.gate.Next(ctx, t.mailbox.Ready())
		if err != nil {
			return err
		}
		if !ok {
			t.mailbox.TryYieldAll()
			continue
		}
		input := t.gate.Channel(ch).Input
		switch el.Kind {
		case KindRecord:
			if t.recIn != nil {
				t.recIn.Inc()
			}
			if err := t.op.ProcessRecord(ctx, input, el.Record); err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
		case KindCaughtUp, KindEndOfInput:
			if input == t.bootstrp && pending[ch] {
				delete(pending, ch)
				if len(pending) == 0 {
					t.endBootstrap()
				}
			}
		}
	}
	t.mailbox.TryYieldAll()
	if err := t.op.EndInput(ctx); err != nil {
		return fmt.Errorf("%s: end of input: %w", t.name, err)
	}
	if t.out != nil {
		return t.out.Broadcast(ctx, Element{Kind: KindEndOfInput})
	}
	return nil
}

// startBootstrap blocks every input but the bootstrap input and returns the
// bootstrap channels still to catch up.
func (t *OperatorTask) startBootstrap() map[int]bool {
	pending := map[int]bool{}
	if t.bootstrp < 0 {
		return pending
	}
	for i := 0; i < t.gate.NumChannels(); i++ {
		if t.gate.Channel(i).Input == t.bootstrp {
			pending[i] = true
		}
	}
	if len(pending) > 0 {
		for in := 0; in < t.inputs; in++ {
			if in != t.bootstrp {
				t.gate.BlockInput(in)
			}
		}
	}
	return pending
}

func (t *OperatorTask) endBootstrap() {
	for in := 0; in < t.inputs; in++ {
		t.gate.UnblockInput(in)
	}
}
