package runtime

import "fmt"

// runPendingMail runs the actions pending in the task's mailbox before the
// task takes its next input element, as Flink's MailboxProcessor checks
// for mail in every loop iteration: without it a task whose input never
// runs dry would run its mail only when the input pauses, so a query of
// its state (GET /api/v1/state) or an async completion could wait for as
// long as the input stays busy. An element is never split: mail runs
// between elements, where the loop's other mail runs too. It returns the
// first failure an action reported (Mailbox.Fail). Subtask goroutine only;
// the check costs one channel length read when no mail is pending.
func (t *OperatorTask) runPendingMail() error {
	if len(t.mailbox.ready) == 0 {
		return nil
	}
	t.mailbox.TryYieldAll()
	if t.mailErr == nil {
		if err := t.mailbox.Err(); err != nil {
			t.mailErr = fmt.Errorf("%s: %w", t.name, err)
		}
	}
	return t.mailErr
}
