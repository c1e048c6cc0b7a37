package source

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/runtime"
)

// TestAlignmentBarriersBetweenEmitPasses attacks the emit budget
// (alignEmitBudget), the partitions paused only while ahead and the held
// records that keep the poll's slice: subtasks in one alignment group read
// partitions whose event times advance at different rates per record,
// aligned within 20 ms, so they hold records of several partitions at
// different positions, emit them 1,000 a pass and append a partition's
// next fetch to what they still hold. A checkpoint is triggered every 50
// records drained, so barriers land between emit passes and while a
// partition is paused with records held. For every checkpoint, each
// partition's offset is exactly the number of its records that went out
// before its subtask's barrier (the next record to emit); every record
// goes out once, in offset order, with the bytes it was produced with.
// Then the middle one of the checkpoints taken with the partitions apart
// is restored at another parallelism in a new group, and the records
// before its barriers plus those of the restored run are each record
// once, in order, with its bytes.
//
// Cases: one subtask, one fetch per partition (passes stop at the
// budget); one subtask, small fetches (held records appended to many
// times); two subtasks whose even partitions drain slowly, so the odd
// ones' subtask runs ahead and stays paused with records held over many
// barriers, restored at parallelism 1 and 3.
func TestAlignmentBarriersBetweenEmitPasses(t *testing.T) {
	small := []kgo.Opt{kgo.FetchMaxPartitionBytes(8 << 10), kgo.FetchMaxBytes(16 << 10)}
	for _, tc := range []struct {
		name        string
		fetch       []kgo.Opt
		step        []int64 // per partition, ms a record
		parallelism int
		slowEven    bool // the even partitions' records drain 1 ms apart
		pause       bool // a partition must have been paused
		restoreAt   int
	}{
		{"p1-one-fetch", nil, []int64{1, 3, 9}, 1, false, false, 2},
		{"p1-small-fetches", small, []int64{1, 3, 9}, 1, false, true, 2},
		{"p2-slow-even", small, []int64{1, 4, 1, 4}, 2, true, true, 1},
		{"p2-slow-even-to-p3", small, []int64{1, 4, 1, 4}, 2, true, true, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			alignmentBarriersBetweenEmitPasses(t, tc.fetch, tc.step, tc.parallelism, tc.slowEven, tc.pause, tc.restoreAt)
		})
	}
}

func alignmentBarriersBetweenEmitPasses(t *testing.T, fetch []kgo.Opt, step []int64, parallelism int, slowEven, pause bool, restoreAt int) {
	const n, every = 2000, 50
	counts, start := make([]int, len(step)), make([]int64, len(step))
	known := make([]int32, len(step))
	for p := range counts {
		counts[p], known[p] = n, int32(p)
	}
	opts := append(alignTopic(t, counts, start, step), fetch...)
	parts := func(c *Config) { c.Partitions = int32(len(step)) }
	align := func() WatermarkAlignment {
		return WatermarkAlignment{Group: NewAlignmentGroup("src"), MaxDrift: 20 * time.Millisecond, UpdateInterval: time.Millisecond}
	}

	var run *alignRun
	started := make(chan struct{})
	var all []alignedRecord
	drained := make([]int64, len(counts)) // per partition
	atBarrier := map[int64][]int64{}      // checkpoint -> drained per partition before its subtask's barrier
	barriers := map[int64]int{}           // checkpoint -> subtasks whose barrier was drained
	bad := ""
	next := int64(1)
	check := func(r alignedRecord) {
		if want := fmt.Sprintf(`{"p":%d,"i":%d}`, r.partition, r.offset); string(r.value) != want && bad == "" {
			bad = fmt.Sprintf("partition %d offset %d emitted value %q, want %q", r.partition, r.offset, r.value, want)
		}
	}
	var once sync.Once
	run = runAligned(t, opts, parallelism, align(), nil, func(r alignedRecord) {
		<-started // run is set
		check(r)
		all = append(all, r)
		drained[r.partition]++
		if len(all)%every == 0 {
			for _, s := range run.srcs {
				s.TriggerCheckpoint(&runtime.Barrier{CheckpointID: next})
			}
			next++
		}
		if slowEven && r.partition%2 == 0 {
			time.Sleep(time.Millisecond)
		}
	}, func(sub int, el runtime.Element) {
		if el.Kind != runtime.KindBarrier {
			return
		}
		id := el.Barrier.CheckpointID
		barriers[id]++
		if atBarrier[id] == nil {
			atBarrier[id] = make([]int64, len(counts))
		}
		for p := range counts {
			if AssignPartition("items", int32(p), parallelism) == sub {
				atBarrier[id][p] = drained[p]
			}
		}
	}, parts)
	once.Do(func() { close(started) })
	total := len(counts) * n
	if !testkit.Poll(120*time.Second, func() bool { return int(run.emitted.Load()) >= total }) {
		t.Fatalf("emitted %d of %d records", run.emitted.Load(), total)
	}
	run.stop()
	if bad != "" {
		t.Fatal(bad)
	}
	d := newDriftTracker(counts, start)
	for _, r := range all {
		d.add(r)
	}
	if d.total != total || d.order != "" || !slices.Equal(d.seen, counts) {
		t.Fatalf("emitted %d records (%v per partition), order: %q; want each once, in offset order", d.total, d.seen, d.order)
	}
	if pause && run.pauses() == 0 {
		t.Fatal("no partition was paused: alignment held nothing")
	}
	// The checkpoints whose barriers came out of every subtask before
	// the stop.
	for id, k := range barriers {
		if k != parallelism {
			delete(atBarrier, id)
		}
	}
	if len(atBarrier) < 10 {
		t.Fatalf("%d checkpoints came out of every subtask, want at least 10", len(atBarrier))
	}
	// Every acknowledged checkpoint's offsets are the records emitted
	// before its barriers.
	var apart []int64
	for _, id := range slices.Sorted(maps.Keys(atBarrier)) {
		want := atBarrier[id]
		got := make([]int64, len(counts))
		for sub := range parallelism {
			for _, sp := range run.resp.splits(t, sub, id) {
				got[sp.Partition] = sp.Offset
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("checkpoint %d offsets %v, want %v (the records emitted before its barriers)", id, got, want)
		}
		if slices.Max(want) < n && slices.Min(want) > 0 && slices.Max(want)-slices.Min(want) > 100 {
			apart = append(apart, id)
		}
	}
	if t.Failed() {
		return
	}
	if len(apart) == 0 {
		t.Fatalf("no checkpoint with the partitions apart and none at its end: %v", atBarrier)
	}
	restoreFrom := apart[len(apart)/2]
	t.Logf("%d checkpoints, %d pauses; restoring checkpoint %d at %v", len(atBarrier), run.pauses(), restoreFrom, atBarrier[restoreFrom])

	restored := make([]*Restored, restoreAt)
	for sub := range restored {
		restored[sub] = &Restored{Known: known}
	}
	for sub := range parallelism {
		for _, sp := range run.resp.splits(t, sub, restoreFrom) {
			to := AssignPartition("items", sp.Partition, restoreAt)
			restored[to].Splits = append(restored[to].Splits, sp)
		}
	}
	d2 := newDriftTracker(counts, start)
	kept := atBarrier[restoreFrom]
	before := 0
	for _, r := range all {
		if r.offset < kept[r.partition] {
			d2.add(r)
			before++
		}
	}
	bad = ""
	run2 := runAligned(t, opts, restoreAt, align(), restored, func(r alignedRecord) {
		check(r)
		d2.add(r)
	}, nil, parts)
	if !testkit.Poll(120*time.Second, func() bool { return before+int(run2.emitted.Load()) >= total }) {
		t.Fatalf("restored run emitted %d of %d records", run2.emitted.Load(), total-before)
	}
	run2.stop()
	if bad != "" {
		t.Fatal(bad)
	}
	if d2.total != total || d2.order != "" || !slices.Equal(d2.seen, counts) {
		t.Fatalf("over the restore: %d records (%v per partition), order: %q; want each once, in offset order", d2.total, d2.seen, d2.order)
	}
}
