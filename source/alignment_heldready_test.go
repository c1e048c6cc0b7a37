package source

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestAlignmentHeldReadyAfterUpdate: a subtask's emit pass stops at a
// held record because its partition is ahead of the group's least (another
// subtask at 0 ms, this partition at 1,000 ms, max drift 10 ms); before
// the pass's update looks at the group, the other subtask moves to 995 ms,
// so the partition is no longer ahead and is not paused, and no wake
// (need) waits for it. The source must then emit the held record before
// it polls again (more), not leave it in a poll that waits up to the
// poll's bound (500 ms) for records of any partition.
func TestAlignmentHeldReadyAfterUpdate(t *testing.T) {
	opts := alignTopic(t, []int{1}, []int64{0}, []int64{1})
	g := NewAlignmentGroup("g")
	other := g.join()
	other.wm.Store(alignBase)
	defer other.leave()
	s := New(Config{
		Name: "src", Topic: "items", Partitions: 1, Parallelism: 1,
		Alignment:  WatermarkAlignment{Group: g, MaxDrift: 10 * time.Millisecond},
		ClientOpts: opts,
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	defer s.align.stop()
	if err := s.assign(); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	s.cl = cl
	now := time.Now()
	s.wms.assign(0, alignBase+1000, now)
	clear(s.lookups)
	s.pos[0] = 0
	s.align.hwm[0] = 10
	s.align.held[0] = []*kgo.Record{{Topic: "items", Partition: 0, Offset: 0, Timestamp: time.UnixMilli(alignBase + 1001)}}
	if err := s.align.emitHeld(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	if len(s.align.held[0]) != 1 || s.align.more {
		t.Fatalf("partition ahead: held %d, more %v; want the record held, nothing more to emit", len(s.align.held[0]), s.align.more)
	}
	other.wm.Store(alignBase + 995)
	s.align.update(s, now)
	if s.align.paused[0] {
		t.Fatal("partition 0 within the drift of the least (995 ms) was paused")
	}
	if !s.align.more {
		t.Errorf("partition 0's held record may go on after the update, but the source would poll first (more = false)")
	}
}
