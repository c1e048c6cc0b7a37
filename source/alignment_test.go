package source

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/runtime"
)

// alignBase is the event time of the aligned tests' first records, ms.
const alignBase = int64(1_733_000_000_000)

// alignChannel is the capacity of the channel a test subtask emits into:
// a drained view of the records lags the emitted one by at most this
// many records per subtask.
const alignChannel = 16

// alignTopic makes topic "items" of len(counts) partitions on a kfake
// broker, partition p holding counts[p] records of value
// {"p":p,"i":i} and event time alignBase + start[p] + i*step[p] ms, and returns the
// client options.
func alignTopic(t *testing.T, counts []int, start, step []int64) []kgo.Opt {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(len(counts)), "items"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	opts := []kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)}
	prod, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic("items"), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var recs []*kgo.Record
	for p, n := range counts {
		for i := range n {
			recs = append(recs, &kgo.Record{Partition: int32(p), Value: fmt.Appendf(nil, `{"p":%d,"i":%d}`, p, i),
				Timestamp: time.UnixMilli(alignBase + start[p] + int64(i)*step[p])})
		}
	}
	if err := prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return opts
}

// alignedRecord is a record a test subtask emitted.
type alignedRecord struct {
	sub       int
	partition int32
	offset    int64
	ts        int64
	value     []byte // the record's payload, as emitted
}

// snapshotResponder keeps the task states acknowledged, by subtask and
// checkpoint.
type snapshotResponder struct {
	mu     sync.Mutex
	states map[[2]int64]json.RawMessage
}

func (r *snapshotResponder) Acknowledge(task runtime.TaskID, id int64, s runtime.TaskSnapshot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.states[[2]int64{int64(task.Subtask), id}] = s.State
}
func (r *snapshotResponder) Decline(runtime.TaskID, int64, error)                   {}
func (r *snapshotResponder) AlignmentDuration(runtime.TaskID, int64, time.Duration) {}

// splits decodes the splits subtask sub acknowledged for checkpoint id.
func (r *snapshotResponder) splits(t *testing.T, sub int, id int64) []Split {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.states[[2]int64{int64(sub), id}]
	var ts checkpoint.TaskState
	if err := json.Unmarshal(st, &ts); err != nil {
		t.Fatalf("subtask %d checkpoint %d state %s: %v", sub, id, st, err)
	}
	var out []Split
	for _, e := range ts.Operator[SplitsState].Entries {
		var sp Split
		if err := json.Unmarshal(e, &sp); err != nil {
			t.Fatal(err)
		}
		out = append(out, sp)
	}
	return out
}

// alignRun is source subtasks over "items" running with watermark
// alignment; each record drained is handed to onRecord (under one lock
// for every subtask), each barrier and watermark to onControl (under the
// same lock). set, if not nil, adjusts each subtask's Config.
type alignRun struct {
	srcs    []*KafkaSource
	resp    *snapshotResponder
	emitted atomic.Int64 // records drained, every subtask's
	stop    func()
}

func runAligned(t *testing.T, opts []kgo.Opt, parallelism int, align WatermarkAlignment, restored []*Restored,
	onRecord func(alignedRecord), onControl func(sub int, el runtime.Element), set func(*Config)) *alignRun {
	t.Helper()
	run := &alignRun{resp: &snapshotResponder{states: map[[2]int64]json.RawMessage{}}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, parallelism)
	for sub := range parallelism {
		ch := runtime.NewChannel(alignChannel)
		cfg := Config{
			Name: "src", Topic: "items", Partitions: 2, Subtask: sub, Parallelism: parallelism,
			Alignment:  align,
			ClientOpts: opts,
			Output:     runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{})),
			Responder:  run.resp,
			Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		}
		if restored != nil {
			cfg.Restored = restored[sub]
		}
		if set != nil {
			set(&cfg)
		}
		src := New(cfg)
		run.srcs = append(run.srcs, src)
		wg.Add(2)
		go func() {
			defer wg.Done()
			for el := range ch {
				switch el.Kind {
				case runtime.KindRecord:
					o := el.Record.Origin
					run.emitted.Add(1)
					mu.Lock()
					onRecord(alignedRecord{sub: sub, partition: o.Partition, offset: o.Offset, ts: el.Record.Timestamp.UnixMilli(), value: el.Record.Value})
					mu.Unlock()
				case runtime.KindBarrier, runtime.KindWatermark:
					if onControl != nil {
						mu.Lock()
						onControl(sub, el)
						mu.Unlock()
					}
				case runtime.KindEndOfInput:
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			errs <- src.Run(context.Background(), stop)
		}()
	}
	run.stop = sync.OnceFunc(func() {
		close(stop)
		wg.Wait()
		for range parallelism {
			if err := <-errs; err != nil {
				t.Errorf("Run = %v", err)
			}
		}
	})
	t.Cleanup(run.stop)
	return run
}

// pauses returns how many partitions the run's subtasks paused; call it
// after stop.
func (r *alignRun) pauses() int64 {
	var n int64
	for _, s := range r.srcs {
		if a := s.align; a != nil {
			n += a.pauses.Load()
		}
	}
	return n
}

// driftTracker follows, in drained order, the largest event time emitted
// per partition, and the largest lead of one partition over another while
// the other still had records to come.
type driftTracker struct {
	counts []int // records per partition
	start  []int64
	maxTs  []int64
	seen   []int
	next   []int64 // the next offset expected per partition
	lead   int64   // the largest lead seen, ms
	// slack: a partition counts as having records to come until this many
	// before its end (a drained view lags the emitted one).
	slack int
	at    string // where it was seen
	order string // the first order violation, if any
	total int
}

func newDriftTracker(counts []int, start []int64) *driftTracker {
	d := &driftTracker{counts: counts, start: start, maxTs: make([]int64, len(counts)), seen: make([]int, len(counts)), next: make([]int64, len(counts))}
	for p := range counts {
		d.maxTs[p] = alignBase + start[p] // before its first record: where it starts
	}
	return d
}

func (d *driftTracker) add(r alignedRecord) {
	p := r.partition
	if r.offset != d.next[p] && d.order == "" {
		d.order = fmt.Sprintf("partition %d: offset %d emitted, want %d", p, r.offset, d.next[p])
	}
	d.next[p] = r.offset + 1
	d.seen[p]++
	d.total++
	d.maxTs[p] = max(d.maxTs[p], r.ts)
	for q := range d.counts {
		if q != int(p) && d.seen[q] < d.counts[q]-d.slack {
			if l := d.maxTs[p] - d.maxTs[q]; l > d.lead {
				d.lead = l
				d.at = fmt.Sprintf("partition %d at %d (record %d) over partition %d at %d (record %d)", p, d.maxTs[p]-alignBase, d.seen[p], q, d.maxTs[q]-alignBase, d.seen[q])
			}
		}
	}
}

// TestAlignmentBoundsPartitionDrift: partition 1's event times advance 4x
// as fast per record as partition 0's (6,000 records each, 24 s against
// 6 s). With alignment (max drift 50ms), while the other partition still
// has records to come, neither partition's largest emitted event time
// leads the other's by more than the drift plus one record (4 ms): a
// partition's fetched records are emitted only while it is not ahead, the
// rest held. Without alignment the lead reached 6 s (the reader took the
// two partitions a fetch at a time). Every record is emitted exactly
// once, in offset order per partition.
func TestAlignmentBoundsPartitionDrift(t *testing.T) {
	counts, start, step := []int{6000, 6000}, []int64{0, 0}, []int64{1, 4}
	opts := alignTopic(t, counts, start, step)
	d := newDriftTracker(counts, start)
	const drift = 50 * time.Millisecond
	run := runAligned(t, opts, 1, WatermarkAlignment{MaxDrift: drift, UpdateInterval: time.Nanosecond}, nil, d.add, nil, nil)
	if !testkit.Poll(60*time.Second, func() bool { return run.emitted.Load() >= 12000 }) {
		t.Fatalf("emitted %d of 12000 records", run.emitted.Load())
	}
	run.stop()
	if d.total != 12000 || d.order != "" || d.seen[0] != 6000 || d.seen[1] != 6000 {
		t.Fatalf("emitted %d records (%v per partition), order: %q; want 6000 of each, in offset order", d.total, d.seen, d.order)
	}
	bound := drift.Milliseconds() + step[1]
	t.Logf("lead %d ms (bound %d): %s; %d pauses", d.lead, bound, d.at, run.pauses())
	if d.lead > bound {
		t.Errorf("a partition led the other by %d ms (%s), want at most %d (max drift plus one record)", d.lead, d.at, bound)
	}
}

// TestAlignmentGroupAcrossSubtasks: the two partitions of
// TestAlignmentBoundsPartitionDrift read by two subtasks sharing an
// alignment group: each is held back by the other's published watermark,
// so the lead stays within the drift plus one record, plus what the
// slower-drained subtask's channel holds (16 records, the one being sent
// and the one its source observed before sending: 18 records of at most
// 4 ms), while the other partition has more than those 18 records to
// come. Without the group (each subtask aligning its own partition only)
// the lead reached 23.5 s: the fast subtask read all of its partition
// before the slow one had read a quarter of its.
func TestAlignmentGroupAcrossSubtasks(t *testing.T) {
	if AssignPartition("items", 0, 2) == AssignPartition("items", 1, 2) {
		t.Fatal("partitions 0 and 1 of items go to one subtask of 2")
	}
	counts, start, step := []int{6000, 6000}, []int64{0, 0}, []int64{1, 4}
	opts := alignTopic(t, counts, start, step)
	d := newDriftTracker(counts, start)
	d.slack = alignChannel + 2
	const drift = 50 * time.Millisecond
	group := NewAlignmentGroup("src")
	run := runAligned(t, opts, 2, WatermarkAlignment{Group: group, MaxDrift: drift, UpdateInterval: time.Nanosecond}, nil, d.add, nil, nil)
	if !testkit.Poll(60*time.Second, func() bool { return run.emitted.Load() >= 12000 }) {
		t.Fatalf("emitted %d of 12000 records", run.emitted.Load())
	}
	run.stop()
	if d.total != 12000 || d.order != "" {
		t.Fatalf("emitted %d records (%v per partition), order: %q; want 6000 of each, in offset order", d.total, d.seen, d.order)
	}
	bound := drift.Milliseconds() + (alignChannel+3)*step[1]
	t.Logf("lead %d ms (bound %d): %s; %d pauses", d.lead, bound, d.at, run.pauses())
	if d.lead > bound {
		t.Errorf("a partition led the other by %d ms (%s), want at most %d", d.lead, d.at, bound)
	}
	group.mu.Lock()
	defer group.mu.Unlock()
	if len(group.members) != 0 {
		t.Errorf("%d members left in the group after both subtasks stopped", len(group.members))
	}
}

// TestAlignmentEndOfPartitionDoesNotBlock: partition 0 holds 10 records an
// hour behind partition 1's 3,000 and partition 2 none. Once partition 0
// is read to its end it holds nobody back (nor does partition 2, without a
// timestamp), so partition 1 is read to its end too: with the end of a
// backlog counted, the source would pause partition 1 for good (no
// idleness is set).
func TestAlignmentEndOfPartitionDoesNotBlock(t *testing.T) {
	counts, start, step := []int{10, 3000, 0}, []int64{0, 3_600_000, 0}, []int64{1, 1, 1}
	opts := alignTopic(t, counts, start, step)
	d := newDriftTracker(counts, start)
	run := runAligned(t, opts, 1, WatermarkAlignment{MaxDrift: time.Second}, nil, d.add, nil, nil)
	if !testkit.Poll(60*time.Second, func() bool { return run.emitted.Load() >= 3010 }) {
		t.Fatalf("emitted %d of 3010 records: a partition read to its end held the others paused", run.emitted.Load())
	}
	run.stop()
	if d.total != 3010 || d.order != "" {
		t.Fatalf("emitted %d records (%v per partition), order: %q", d.total, d.seen, d.order)
	}
}

// TestAlignmentRestore: two subtasks in one group over the partitions of
// TestAlignmentGroupAcrossSubtasks (2,000 records each), the slow one
// slowed down (its records drained 1ms apart), so the fast one holds
// records of its partition, paused; both take checkpoint 1 once 500
// records were drained. New subtasks restored from it (alignment on, not
// slowed) emit the records after its offsets: the records each subtask
// drained before its barrier in run 1 and those of run 2 are every record
// exactly once, in offset order per partition. Pausing and holding are not
// state: the fast subtask's split holds the offset of its next record to
// emit, short of what it had fetched.
func TestAlignmentRestore(t *testing.T) {
	counts, start, step := []int{2000, 2000}, []int64{0, 0}, []int64{1, 4}
	opts := alignTopic(t, counts, start, step)
	fast := AssignPartition("items", 1, 2)
	align := func() WatermarkAlignment {
		return WatermarkAlignment{Group: NewAlignmentGroup("src"), MaxDrift: 50 * time.Millisecond, UpdateInterval: time.Millisecond}
	}

	var before []alignedRecord
	var barriers sync.WaitGroup
	barriers.Add(2)
	done := map[int]bool{}
	var run1 *alignRun
	triggered := false
	run1 = runAligned(t, opts, 2, align(), nil, func(r alignedRecord) {
		if done[r.sub] {
			return
		}
		before = append(before, r)
		if len(before) == 500 && !triggered {
			triggered = true
			for _, src := range run1.srcs {
				src.TriggerCheckpoint(&runtime.Barrier{CheckpointID: 1})
			}
		}
		if r.partition == 0 {
			time.Sleep(time.Millisecond) // the slow subtask's downstream is slow
		}
	}, func(sub int, el runtime.Element) {
		if el.Kind == runtime.KindBarrier && el.Barrier.CheckpointID == 1 && !done[sub] {
			done[sub] = true
			barriers.Done()
		}
	}, nil)
	barriers.Wait()
	run1.stop()
	restored := make([]*Restored, 2)
	for sub := range restored {
		restored[sub] = &Restored{Splits: run1.resp.splits(t, sub, 1), Known: []int32{0, 1}}
	}
	if sp := restored[fast].Splits; len(sp) != 1 || sp[0].Partition != 1 || sp[0].Offset >= 2000 {
		t.Fatalf("the fast subtask's checkpoint 1 splits %+v, want partition 1 short of its end", sp)
	}

	d := newDriftTracker(counts, start)
	for _, r := range before {
		d.add(r)
	}
	run2 := runAligned(t, opts, 2, align(), restored, d.add, nil, nil)
	rest := 4000 - len(before)
	if !testkit.Poll(60*time.Second, func() bool { return int(run2.emitted.Load()) >= rest }) {
		t.Fatalf("run 2 emitted %d of %d records", run2.emitted.Load(), rest)
	}
	run2.stop()
	if d.total != 4000 || d.order != "" || !slices.Equal(d.seen, []int{2000, 2000}) {
		t.Fatalf("emitted %d records (%v per partition) over the restore, order: %q; want each once, in offset order", d.total, d.seen, d.order)
	}
}

// TestAlignmentPausedIsNotIdle: with watermark.idleness 200ms, the subtask
// reading the fast partition of TestAlignmentGroupAcrossSubtasks (2,000
// records each) has its one partition paused, after its first poll, for
// as long as the other subtask reads (slowed down: its records drained
// 1ms apart, about 2 s): it never reports itself idle while it has
// records to read, as a partition paused by alignment is not idle; an idle
// status would let the watermark downstream pass its records. (Its reader
// stopped, not the partition.)
func TestAlignmentPausedIsNotIdle(t *testing.T) {
	counts, start, step := []int{2000, 2000}, []int64{0, 0}, []int64{1, 4}
	opts := alignTopic(t, counts, start, step)
	d := newDriftTracker(counts, start)
	fast := AssignPartition("items", 1, 2)
	idleEarly := 0
	run := runAligned(t, opts, 2, WatermarkAlignment{Group: NewAlignmentGroup("src"), MaxDrift: 50 * time.Millisecond, UpdateInterval: time.Millisecond}, nil,
		func(r alignedRecord) {
			d.add(r)
			if r.partition == 0 {
				time.Sleep(time.Millisecond) // the slow subtask's downstream is slow
			}
		}, func(sub int, el runtime.Element) {
			if el.Kind == runtime.KindWatermark && el.Idle && sub == fast {
				if d.seen[1] < counts[1] {
					idleEarly++
				}
			}
		}, func(c *Config) { c.Watermarks.Idleness = 200 * time.Millisecond })
	if !testkit.Poll(60*time.Second, func() bool { return run.emitted.Load() >= 4000 }) {
		t.Fatalf("emitted %d of 4000 records", run.emitted.Load())
	}
	run.stop()
	if d.total != 4000 || d.order != "" {
		t.Fatalf("emitted %d records (%v per partition), order: %q", d.total, d.seen, d.order)
	}
	if run.pauses() == 0 {
		t.Fatal("no partition was paused")
	}
	if idleEarly != 0 {
		t.Errorf("the paused subtask reported itself idle %d times with records still to read", idleEarly)
	}
}
