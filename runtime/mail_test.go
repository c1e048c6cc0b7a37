package runtime

import (
	"context"
	"errors"
	"testing"
)

// refillingOperator keeps its task's input from ever running dry: each
// record it processes puts the next one into in (where the task just made
// room), until the last, after which it ends the input. At record postAt it
// posts an action that notes how many records were processed when it ran.
type refillingOperator struct {
	in           Channel
	mailbox      *Mailbox
	n, postAt    int
	last         int
	ranAt        int
	failFromMail bool
}

func (o *refillingOperator) Open(context.Context) error { return nil }
func (o *refillingOperator) ProcessRecord(context.Context, int, Record) error {
	o.n++
	if o.n == o.postAt {
		o.mailbox.Execute(func() {
			o.ranAt = o.n
			if o.failFromMail {
				o.mailbox.Fail(errors.New("mail failed"))
			}
		})
	}
	if o.n < o.last {
		o.in <- rec("x")
	} else if o.n == o.last {
		o.in <- Element{Kind: KindEndOfInput}
	}
	return nil
}
func (o *refillingOperator) EndInput(context.Context) error { return nil }
func (o *refillingOperator) Close() error                   { return nil }

// TestBusyOperatorTaskRunsMail checks that a task whose input never runs
// dry runs the mail posted during record 10 right after that record,
// before taking record 11 (Flink's mailbox loop checks for mail in every
// iteration), not once its input ends after record 1,000; and that an
// action's failure reported there fails the task at once.
func TestBusyOperatorTaskRunsMail(t *testing.T) {
	for _, fail := range []bool{false, true} {
		in := NewChannel(2)
		in <- rec("x")
		mb := NewMailbox()
		op := &refillingOperator{in: in, mailbox: mb, postAt: 10, last: 1000, failFromMail: fail}
		task := NewOperatorTask(OperatorTaskConfig{ID: TaskID{"op", 0}, Gate: NewInputGate([]InputChannel{{Ch: in}}), Operator: op, Mailbox: mb, BootstrapInput: -1})
		err := task.Run(context.Background(), nil)
		if op.ranAt != 10 {
			t.Errorf("fail %v: the mail posted during record 10 ran after record %d, want 10", fail, op.ranAt)
		}
		switch {
		case fail && (err == nil || err.Error() != "op[0]: mail failed" || op.n != 10):
			t.Errorf("failing mail: Run = %v after %d records, want op[0]: mail failed after 10", err, op.n)
		case !fail && (err != nil || op.n != 1000):
			t.Errorf("Run = %v after %d records, want nil after 1000", err, op.n)
		}
	}
}
