package job

import (
	"errors"
	"fmt"
	"testing"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/sink"
)

// TestTakenOver: a unit whose sink commit found its transaction committed
// by a newer producer of the id (sink.ErrFenced, wrapped as the sink task's
// checkpoint notification wraps it) was taken over like one whose
// checkpoint found another claim's HEAD, and neither suppresses restarts
// (a *sink.LostOutputError would fail the member); other failures are not
// takeovers.
func TestTakenOver(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("sink out[0]: commit of checkpoint 3: %w", fmt.Errorf("sink out[0]: transaction p-0-0 is committed: %w: %w", sink.ErrFenced, errors.New("PRODUCER_FENCED"))), true},
		{fmt.Errorf("checkpoint 4: %w", checkpoint.ErrHeadExists), true},
		{&sink.LostOutputError{TransactionalID: "p-0-0", Err: errors.New("PRODUCER_FENCED")}, false},
		{errors.New("broker unreachable"), false},
	} {
		if got := takenOver(tc.err); got != tc.want {
			t.Errorf("takenOver(%v) = %v, want %v", tc.err, got, tc.want)
		}
		if tc.want && suppressesRestarts(tc.err) {
			t.Errorf("suppressesRestarts(%v) = true, want false", tc.err)
		}
	}
}
