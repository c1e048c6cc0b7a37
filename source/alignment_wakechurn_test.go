package source

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	krt "github.com/kstreamd/kstreamd/runtime"
)

// TestAlignmentGroupWakeChurn attacks the group's wake (alignMember.need)
// with members joining and leaving while another member lifts the least
// and wakes them from its own goroutine, as a subtask restarted by a
// failover or a rescale does while the others run. Each of 4 x 300 short
// members waits in an interruptible poll of its own mailbox for a least
// of need (0 to 2 above the lifter's watermark as it joins), publishes
// need, looks at the group once (as aligner.await does) and leaves; the
// lifter raises its watermark by one and looks, over and over, meanwhile. Whenever the least it saw reached its need, its poll
// was interrupted and its mailbox holds exactly one wake; it is never
// woken twice, and never after it left (its mailbox stays empty once the
// lifter has lifted the least past every need). Run it with -race.
func TestAlignmentGroupWakeChurn(t *testing.T) {
	const workers, rounds = 4, 300
	g := NewAlignmentGroup("g")
	lifter := g.join()
	lifter.wm.Store(0)
	type left struct {
		mb   *krt.Mailbox
		need int64
	}
	var mu sync.Mutex
	var gone []left
	var wg sync.WaitGroup
	var byLifter atomic.Int64 // members woken before they looked themselves
	errs := make(chan string, workers*rounds)
	done := make(chan struct{})
	lifted := make(chan int64)
	go func() {
		wm := int64(0)
		for {
			select {
			case <-done:
				lifted <- wm
				return
			default:
			}
			wm++
			lifter.wm.Store(wm)
			g.min()
			runtime.Gosched()
		}
	}()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				need := lifter.wm.Load() + int64(i%3)
				mb := krt.NewMailbox()
				m := g.join()
				m.wm.Store(noAlignmentWatermark) // it holds nobody back
				m.wake = func() { mb.Execute(func() {}) }
				ctx, release := mb.Interruptible(context.Background())
				m.need.Store(need)
				runtime.Gosched()
				if ctx.Err() != nil {
					byLifter.Add(1)
				}
				least := g.min()
				m.leave()
				woke := ctx.Err() != nil
				release()
				n := mb.TryYieldAll()
				switch {
				case n > 1:
					errs <- "a member was woken more than once"
				case least >= need && (n != 1 || !woke):
					errs <- "a member that saw the least reach its need was not woken, or its poll not interrupted"
				case n == 1 && !woke:
					errs <- "a wake did not interrupt the member's poll"
				}
				mu.Lock()
				gone = append(gone, left{mb, need})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(done)
	top := <-lifted
	close(errs)
	seen := map[string]int{}
	for e := range errs {
		seen[e]++
	}
	for e, n := range seen {
		t.Errorf("%s (%d times)", e, n)
	}
	// Every member has left: lifting past every need wakes nobody.
	lifter.wm.Store(top + 3)
	if least := g.min(); least != top+3 {
		t.Errorf("least with only the lifter = %d, want %d", least, top+3)
	}
	t.Logf("%d of %d members woken by the lifter before they looked; lifted to %d", byLifter.Load(), workers*rounds, top)
	if byLifter.Load() == 0 {
		t.Error("the lifter woke no member: the wake from another goroutine was not exercised")
	}
	if len(gone) != workers*rounds {
		t.Fatalf("%d members ran, want %d", len(gone), workers*rounds)
	}
	for _, l := range gone {
		if n := l.mb.TryYieldAll(); n != 0 {
			t.Errorf("member with need %d was woken %d times after it left", l.need, n)
		}
	}
	if len(g.members) != 1 {
		t.Errorf("%d members left in the group, want the lifter only", len(g.members))
	}
}
