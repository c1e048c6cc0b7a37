package source

import (
	"errors"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/runtime"
)

// pausedParts returns the partitions of "items" franz-go has paused.
func pausedParts(cl *kgo.Client) []int32 {
	ps := cl.PauseFetchPartitions(nil)["items"]
	slices.Sort(ps)
	return ps
}

// TestAlignmentUnavailablePausesKept checks that watermark alignment and
// partition unavailability, which both pause a partition's fetches in
// franz-go, do not undo each other's pause: a partition held by alignment
// that goes unavailable and comes back stays paused (else franz-go fetches
// it again and its held records grow past one fetch while the group's
// least stands still), and a partition unavailable while alignment
// releases it stays paused until it is available again (else it is
// fetched again at once, the busy loop markUnavailable's pause avoids).
func TestAlignmentUnavailablePausesKept(t *testing.T) {
	opts := alignTopic(t, []int{1, 1}, []int64{0, 0}, []int64{1, 1})
	s := New(Config{
		Name: "src", Topic: "items", Partitions: 2, Parallelism: 1,
		Alignment:  WatermarkAlignment{MaxDrift: 10 * time.Millisecond},
		ClientOpts: opts,
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
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
	// Both partitions have records left (end offset 10, position 0);
	// partition 0 runs 1s ahead of partition 1 and has a record held.
	s.wms.assign(0, alignBase+1000, now)
	s.wms.assign(1, alignBase, now)
	clear(s.lookups)
	for p := range int32(2) {
		s.pos[p] = 0
		s.align.hwm[p] = 10
	}
	s.align.held[0] = []*kgo.Record{{Topic: "items", Partition: 0, Offset: 0, Timestamp: time.UnixMilli(alignBase + 1001)}}
	s.align.update(s, now)
	if got := pausedParts(cl); !slices.Equal(got, []int32{0}) {
		t.Fatalf("after alignment held partition 0: paused %v, want [0]", got)
	}

	// Partition 0 goes unavailable and comes back while still held.
	s.markUnavailable(0, errors.New("no leader"))
	s.markAvailable(0)
	if got := pausedParts(cl); !slices.Equal(got, []int32{0}) {
		t.Errorf("held partition 0 back from unavailable: paused %v, want [0] (alignment still holds %d records of it)", got, len(s.align.held[0]))
	}
	s.align.update(s, now)
	if got := pausedParts(cl); !slices.Equal(got, []int32{0}) {
		t.Errorf("after the next update: paused %v, want [0]", got)
	}

	// Partition 1 goes unavailable; partition 0's held record is emitted
	// elsewhere (dropped here) and partition 1 catches up, so alignment
	// releases partition 0 but must not resume the unavailable 1.
	s.markUnavailable(1, errors.New("no leader"))
	if got := pausedParts(cl); !slices.Equal(got, []int32{0, 1}) {
		t.Fatalf("partition 1 unavailable: paused %v, want [0 1]", got)
	}
	s.align.paused[1] = true // as if alignment had paused it before
	delete(s.align.held, 0)
	s.wms.maxTs[1] = alignBase + 1000
	s.align.update(s, now)
	if got := pausedParts(cl); !slices.Equal(got, []int32{1}) {
		t.Errorf("alignment released both, 1 unavailable: paused %v, want [1]", got)
	}
	if got := slices.Sorted(maps.Keys(s.align.paused)); len(got) != 0 {
		t.Errorf("alignment still counts %v paused", got)
	}
	s.markAvailable(1)
	if got := pausedParts(cl); len(got) != 0 {
		t.Errorf("every partition available and released: paused %v, want none", got)
	}
}

// TestAlignmentRestoreRescaled: four partitions (2,000 records each, the
// odd ones' event times 4x as fast per record) read by two subtasks in one
// group (one reads the even partitions, the other the odd ones), the even
// partitions' records drained 1ms apart so that the odd ones' subtask runs
// ahead and holds records, paused; both take checkpoint 1 once 800 records
// were drained. The checkpoint is restored twice, its splits moved to the
// subtasks that own them at the new parallelism: at parallelism 3 with
// alignment off (a config change) and at parallelism 1 with alignment on
// (its own group). Each time, the records drained before the barriers in
// run 1 and those of run 2 are every record exactly once, in offset order
// per partition: no held record is counted in a checkpoint's offset and
// lost.
func TestAlignmentRestoreRescaled(t *testing.T) {
	counts, start, step := []int{2000, 2000, 2000, 2000}, []int64{0, 0, 0, 0}, []int64{1, 4, 1, 4}
	opts := alignTopic(t, counts, start, step)
	parts := func(c *Config) { c.Partitions = 4 }

	var before []alignedRecord
	var barriers sync.WaitGroup
	barriers.Add(2)
	done := map[int]bool{}
	var run1 *alignRun
	triggered := false
	run1 = runAligned(t, opts, 2, WatermarkAlignment{Group: NewAlignmentGroup("src"), MaxDrift: 20 * time.Millisecond, UpdateInterval: time.Millisecond}, nil,
		func(r alignedRecord) {
			if done[r.sub] {
				return
			}
			before = append(before, r)
			if len(before) == 800 && !triggered {
				triggered = true
				for _, src := range run1.srcs {
					src.TriggerCheckpoint(&runtime.Barrier{CheckpointID: 1})
				}
			}
			if r.partition%2 == 0 {
				time.Sleep(time.Millisecond) // the slow partitions' subtask's downstream is slow
			}
		}, func(sub int, el runtime.Element) {
			if el.Kind == runtime.KindBarrier && el.Barrier.CheckpointID == 1 && !done[sub] {
				done[sub] = true
				barriers.Done()
			}
		}, parts)
	barriers.Wait()
	run1.stop()
	if run1.pauses() == 0 {
		t.Fatal("run 1 paused no partition: nothing was held at the checkpoint")
	}
	var splits []Split
	for sub := range 2 {
		splits = append(splits, run1.resp.splits(t, sub, 1)...)
	}
	t.Logf("checkpoint 1 splits %+v, %d pauses, %d drained before", splits, run1.pauses(), len(before))
	if len(splits) != 4 {
		t.Fatalf("checkpoint 1 splits %+v, want one per partition", splits)
	}
	short := 0
	for _, sp := range splits {
		if sp.Offset < 2000 {
			short++
		}
	}
	if short == 0 {
		t.Fatalf("checkpoint 1 splits %+v: every partition read to its end, nothing to restore", splits)
	}

	for _, tc := range []struct {
		name        string
		parallelism int
		align       WatermarkAlignment
	}{
		{"p3-alignment-off", 3, WatermarkAlignment{}},
		{"p1-alignment-on", 1, WatermarkAlignment{MaxDrift: 20 * time.Millisecond, UpdateInterval: time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			restored := make([]*Restored, tc.parallelism)
			for sub := range restored {
				restored[sub] = &Restored{Known: []int32{0, 1, 2, 3}}
			}
			for _, sp := range splits {
				sub := AssignPartition("items", sp.Partition, tc.parallelism)
				restored[sub].Splits = append(restored[sub].Splits, sp)
			}
			d := newDriftTracker(counts, start)
			for _, r := range before {
				d.add(r)
			}
			run2 := runAligned(t, opts, tc.parallelism, tc.align, restored, d.add, nil, parts)
			rest := 8000 - len(before)
			if !testkit.Poll(60*time.Second, func() bool { return int(run2.emitted.Load()) >= rest }) {
				t.Fatalf("run 2 emitted %d of %d records", run2.emitted.Load(), rest)
			}
			run2.stop()
			if d.total != 8000 || d.order != "" || !slices.Equal(d.seen, counts) {
				t.Fatalf("emitted %d records (%v per partition) over the restore, order: %q; want each once, in offset order", d.total, d.seen, d.order)
			}
		})
	}
}

// TestAlignmentSkippedEventTimes: partition 0's 3,000 records all fail the
// timestamp assigner (skipped under on_error skip: they carry no event
// time), partitions 1 and 2 hold 3,000 good records each, partition 1's
// event times 4x as fast per record. Partition 0 has no event time while it
// has records left, so it holds the group at its start until it is read to
// its end; it never emits and is never ahead, so it is read to its end, and
// then partitions 1 and 2 are aligned with each other: every good record
// is emitted once, in offset order, partition 1 never leading partition 2
// by more than the max drift plus one record while partition 2 has records
// to come, and no record of partition 0.
func TestAlignmentSkippedEventTimes(t *testing.T) {
	counts, start, step := []int{3000, 3000, 3000}, []int64{0, 0, 0}, []int64{1, 4, 1}
	opts := alignTopic(t, counts, start, step)
	d := newDriftTracker([]int{0, 3000, 3000}, start)
	const drift = 50 * time.Millisecond
	run := runAligned(t, opts, 1, WatermarkAlignment{MaxDrift: drift, UpdateInterval: time.Millisecond}, nil, d.add, nil, func(c *Config) {
		c.Partitions = 3
		c.OnError = OnErrorSkip
		c.Timestamp = func(rec *runtime.Record) (time.Time, error) {
			if rec.Origin.Partition == 0 {
				return time.Time{}, errors.New("no event time")
			}
			return rec.Timestamp, nil
		}
	})
	if !testkit.Poll(60*time.Second, func() bool { return run.emitted.Load() >= 6000 }) {
		t.Fatalf("emitted %d of 6000 records (%v per partition)", run.emitted.Load(), d.seen)
	}
	run.stop()
	if d.total != 6000 || d.order != "" || !slices.Equal(d.seen, []int{0, 3000, 3000}) {
		t.Fatalf("emitted %d records (%v per partition), order: %q; want 0, 3000, 3000 in offset order", d.total, d.seen, d.order)
	}
	bound := drift.Milliseconds() + step[1]
	t.Logf("lead %d ms (bound %d): %s; %d pauses", d.lead, bound, d.at, run.pauses())
	if d.lead > bound {
		t.Errorf("a partition led another by %d ms (%s), want at most %d", d.lead, d.at, bound)
	}
}
