package sink

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/runtime"
)

// TestPooledRecordsReachTheBrokerIntact: the committer's kgo.Records come
// from slabs of recordSlab records (newRecord). With small batches and a
// small producer buffer each transaction's records span many slabs while
// earlier ones are still buffered or in flight; a record shared or reused
// while franz-go still held it would reach the broker with another
// record's key, value or header. Every committed record must be exactly one of those
// written, each once, and the committable must carry the first
// acknowledged offset (recorded by the promise). The end-to-end latency histogram gets one sample per record,
// from its source timestamp (kept as Unix nanoseconds) to the commit.
// Slabs are reused once every record of theirs finished (recSlab): with
// a producer buffer of 16 records a slab's records are all finished long
// before the next slab is needed; with 4 slabs' worth buffered, records of
// several slabs are in flight at once when a finished slab is reused.
// With CopyValues the caller writes every value into one buffer, which it
// overwrites after each Write: the committer's copies (in the slabs'
// value buffers, reused with them) must reach the broker unchanged.
func TestPooledRecordsReachTheBrokerIntact(t *testing.T) {
	for _, buffered := range []int{16, 4 * recordSlab} {
		for _, lent := range []bool{false, true} {
			t.Run(fmt.Sprintf("buffered=%d/lent=%v", buffered, lent), func(t *testing.T) { testPooledRecords(t, buffered, lent) })
		}
	}
}

func testPooledRecords(t *testing.T, buffered int, lent bool) {
	opts := newCluster(t)
	logger, _ := testLogger()
	m, reg := newMetrics(t)
	k := NewKafkaTxnCommitter(KafkaTxnConfig{
		Name: "out", Topic: testTopic, TransactionalIDPrefix: "pool", PoolSize: 3, TransactionTimeout: time.Minute,
		ClientOpts: append(slices.Clip(opts), kgo.ProducerBatchMaxBytes(512), kgo.MaxBufferedRecords(buffered)), Metrics: m, Logger: logger,
	})
	defer k.Close()
	if lent && !k.CopyValues() {
		t.Fatal("CopyValues() = false for a committer without encoder or partitioner")
	}
	var buf []byte // the lent values' one buffer
	ctx := context.Background()
	const txns, perTxn = 3, 1500
	var want []string
	var minLat, maxLat float64 // bounds of the end-to-end latencies' sum
	start := time.Now()
	for tx := range txns {
		if err := k.BeginTransaction(ctx); err != nil {
			t.Fatal(err)
		}
		for i := range perTxn {
			v := fmt.Sprintf("t%d-%04d", tx, i)
			minLat += start.Sub(time.UnixMilli(int64(1000 + i))).Seconds()
			want = append(want, v)
			rec := runtime.Record{Key: []byte("k" + v), Value: []byte(v), Timestamp: time.UnixMilli(int64(1000 + i)),
				Headers: []runtime.Header{{Key: "h", Value: []byte("h" + v)}}}
			if lent {
				buf = append(buf[:0], v...)
				rec.Value = buf
			}
			if err := k.Write(ctx, rec); err != nil {
				t.Fatal(err)
			}
			if lent {
				copy(buf, "XXXXXXXXXXXXXXXX") // the caller's next record
			}
		}
		c, err := k.PreCommit(ctx, int64(tx+1))
		if err != nil {
			t.Fatal(err)
		}
		if c.Records != perTxn || c.Topic != testTopic || c.Offset < 0 {
			t.Fatalf("committable %+v: want %d records and the first acknowledged offset of topic %q", c, perTxn, testTopic)
		}
		if err := k.Commit(ctx, c); err != nil {
			t.Fatal(err)
		}
		k.Snapshotted(int64(tx + 1))
		k.CheckpointCompleted(int64(tx + 1))
	}
	end := time.Now()
	for range txns {
		for i := range perTxn {
			maxLat += end.Sub(time.UnixMilli(int64(1000 + i))).Seconds()
		}
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range fams {
		if f.GetName() != "kstreamd_sink_end_to_end_latency_seconds" {
			continue
		}
		found = true
		h := f.GetMetric()[0].GetHistogram()
		if h.GetSampleCount() != txns*perTxn || h.GetSampleSum() < minLat || h.GetSampleSum() > maxLat {
			t.Fatalf("end-to-end latency: %d samples summing to %v s; want %d in [%v, %v]", h.GetSampleCount(), h.GetSampleSum(), txns*perTxn, minLat, maxLat)
		}
	}
	if !found {
		t.Fatal("no kstreamd_sink_end_to_end_latency_seconds")
	}
	if k.reused == 0 {
		t.Fatalf("no record slab was reused in %d records (%d slabs): the test does not cover reuse", txns*perTxn, txns*perTxn/recordSlab)
	}
	var got []string
	for _, r := range testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), testTopic, 10*time.Second) {
		v := string(r.Value)
		if string(r.Key) != "k"+v || len(r.Headers) != 1 || r.Headers[0].Key != "h" || string(r.Headers[0].Value) != "h"+v {
			t.Fatalf("record %q has key %q headers %v: not the record written", v, r.Key, r.Headers)
		}
		got = append(got, v)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("read %d records, want the %d written, each once (first differences: %v)", len(got), len(want), firstDiff(got, want))
	}
}

// TestNewRecordSlab: newRecord hands out distinct zero records, one
// allocation per recordSlab of them.
func TestNewRecordSlab(t *testing.T) {
	k := NewKafkaTxnCommitter(KafkaTxnConfig{Name: "out", Topic: testTopic, TransactionalIDPrefix: "p"})
	seen := make(map[*kgo.Record]bool)
	for range 3 * recordSlab {
		r := k.newRecord()
		if seen[r] || r.Key != nil || r.Value != nil || r.Offset != 0 {
			t.Fatalf("newRecord returned %p (%+v): seen before or not zero", r, r)
		}
		seen[r] = true
		r.Value = []byte("v") // as Write fills it
	}
	k.slab = nil
	allocs := testing.AllocsPerRun(10, func() {
		for range recordSlab {
			k.newRecord()
		}
	})
	if allocs != 1 {
		t.Fatalf("%v allocations per %d records, want 1 (the slab)", allocs, recordSlab)
	}
}

// TestRecordSlabReusedOnlyOnceFinished: newRecord's slab of recordSlab
// records is handed out again only after the produce promise of every one
// of its records ran (franz-go no longer holds any of them): until then
// a record keeps the key and value written into it, and newRecord takes
// a new slab. The next slab after the last promise is the finished one,
// its records zero again.
func TestRecordSlabReusedOnlyOnceFinished(t *testing.T) {
	k := NewKafkaTxnCommitter(KafkaTxnConfig{Name: "out", Topic: testTopic, TransactionalIDPrefix: "p"})
	s := k.slots[0]
	fill := func(n int) []*kgo.Record { // n records as Write fills them
		rs := make([]*kgo.Record, n)
		for i := range rs {
			rs[i] = k.newRecord()
			rs[i].Key, rs[i].Value, rs[i].Topic = []byte("k"), fmt.Appendf(nil, "v%d", i), testTopic
		}
		return rs
	}
	a := fill(recordSlab)
	slabA := k.slab
	for _, r := range a {
		if r.Context != context.Context(slabA) {
			t.Fatalf("record %p carries context %v, want its slab", r, r.Context)
		}
	}
	fill(1) // the next slab
	for _, r := range a[:recordSlab-1] {
		s.promise(r, nil)
	}
	last := a[recordSlab-1]
	fill(recordSlab) // the rest of the second slab, then a third
	if k.slab == slabA || k.reused != 0 {
		t.Fatalf("slab reused (%d) while one of its records is not finished", k.reused)
	}
	if string(last.Value) != fmt.Sprintf("v%d", recordSlab-1) || string(last.Key) != "k" {
		t.Fatalf("unfinished record changed: %+v", last)
	}
	s.promise(last, fmt.Errorf("failed")) // a failure finishes it as well
	fill(recordSlab - 1)                  // the rest of the third slab
	r := k.newRecord()
	if k.slab != slabA || r != &slabA.recs[0] || k.reused != 1 {
		t.Fatalf("after every record finished: slab %p record %p (reused %d), want the finished slab %p again", k.slab, r, k.reused, slabA)
	}
	if r.Key != nil || r.Value != nil || r.Offset != 0 || r.Topic != "" {
		t.Fatalf("reused record not zero: %+v", r)
	}
	if err := s.err(); err == nil {
		t.Fatal("the failure a promise reported was lost")
	}
}

// TestCopyValues: a committer without an encoder or a partitioner agrees
// to copy values, and then its Kafka records' values are copies in the
// slab's value buffer (no allocation once the buffers are sized), not the
// caller's bytes; with an encoder or a partitioner it refuses and keeps
// writing the bytes it gets.
func TestCopyValues(t *testing.T) {
	ctx := context.Background()
	enc := NewKafkaTxnCommitter(KafkaTxnConfig{Name: "out", Topic: testTopic, TransactionalIDPrefix: "p", Encode: upperEncoder{}})
	part := NewKafkaTxnCommitter(KafkaTxnConfig{Name: "out", Topic: testTopic, TransactionalIDPrefix: "p", Partition: func([]byte) int32 { return 0 }})
	if enc.CopyValues() || part.CopyValues() || enc.copyValues || part.copyValues {
		t.Fatal("a committer with an encoder or a partitioner agreed to copy values")
	}
	k := NewKafkaTxnCommitter(KafkaTxnConfig{Name: "out", Topic: testTopic, TransactionalIDPrefix: "p"})
	if !k.CopyValues() {
		t.Fatal("CopyValues() = false")
	}
	if !NewKafkaCommitter("out", k, nil).CopyValues() {
		t.Fatal("KafkaCommitter.CopyValues() = false over a copying committer")
	}
	val := []byte("value-0123456789")
	var krs []*kgo.Record
	for i := range 3 * recordSlab {
		val[6] = byte('a' + i%26)
		kr, err := k.kafkaRecord(ctx, runtime.Record{Key: []byte("k"), Value: val})
		if err != nil {
			t.Fatal(err)
		}
		if &kr.Value[0] == &val[0] || string(kr.Value) != string(val) {
			t.Fatalf("record %d: value %q at %p, want a copy of %q (caller's at %p)", i, kr.Value, &kr.Value[0], val, &val[0])
		}
		krs = append(krs, kr)
	}
	for i, kr := range krs {
		if kr.Value[6] != byte('a'+i%26) {
			t.Fatalf("record %d: value %q changed after later writes", i, kr.Value)
		}
	}
	k.slab, k.next = k.takeSlab(), 0 // a new slab, its value buffer sized by the last one
	rec := runtime.Record{Key: []byte("k"), Value: val}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := k.kafkaRecord(ctx, rec); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per copied value, want 0", allocs)
	}
}

// TestProducePromiseRecordsFirstAckAndFailure: the promise records the
// first acknowledgement and the first failure of the open transaction.
func TestProducePromiseRecordsFirstAckAndFailure(t *testing.T) {
	k := NewKafkaTxnCommitter(KafkaTxnConfig{Name: "out", Topic: testTopic, TransactionalIDPrefix: "p"})
	s := k.slots[0]
	s.promise(&kgo.Record{Topic: testTopic, Partition: 2, Offset: 41, Key: []byte("k")}, nil)
	s.promise(&kgo.Record{Topic: testTopic, Partition: 0, Offset: 99}, nil)
	if !s.acked || s.ackPart != 2 || s.ackOff != 41 {
		t.Fatalf("acknowledgement recorded: %v %d@%d, want the first one, partition 2 offset 41", s.acked, s.ackPart, s.ackOff)
	}
	if err := s.err(); err != nil {
		t.Fatalf("err() = %v before any failure", err)
	}
	s.promise(&kgo.Record{Topic: testTopic}, fmt.Errorf("boom"))
	s.promise(&kgo.Record{Topic: testTopic}, fmt.Errorf("second"))
	if err := s.err(); err == nil || err.Error() != `sink out: write to "out" in transaction p-0-0: boom` {
		t.Fatalf("err() = %v, want the first failure", err)
	}
}

// firstDiff returns up to 3 values in one of a, b but not the other.
func firstDiff(a, b []string) []string {
	var out []string
	for _, v := range a {
		if !slices.Contains(b, v) && len(out) < 3 {
			out = append(out, "+"+v)
		}
	}
	for _, v := range b {
		if !slices.Contains(a, v) && len(out) < 6 {
			out = append(out, "-"+v)
		}
	}
	return out
}

// upperEncoder is an Encoder that upper-cases a record's value.
type upperEncoder struct{}

func (upperEncoder) Encode(_ context.Context, _ string, rec *runtime.Record) error {
	rec.Value = bytes.ToUpper(rec.Value)
	return nil
}

// TestKafkaRecordDoesNotAllocate: Write's Kafka record for a record of a
// sink without an encoder costs no allocation but the record slab's (the
// record used to move to the heap on every Write, since the encoder takes
// its address), and has the record's key, value and timestamp; with an
// encoder the value is encoded and the caller's record left as it was.
func TestKafkaRecordDoesNotAllocate(t *testing.T) {
	ctx := context.Background()
	k := NewKafkaTxnCommitter(KafkaTxnConfig{Name: "out", Topic: testTopic, TransactionalIDPrefix: "p"})
	rec := runtime.Record{Key: []byte("k"), Value: []byte("v"), Timestamp: time.UnixMilli(5)}
	var kr *kgo.Record
	k.slab, k.next = &recSlab{free: k.free}, 0 // room for the 101 records below
	allocs := testing.AllocsPerRun(100, func() {
		var err error
		if kr, err = k.kafkaRecord(ctx, rec); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per record, want 0", allocs)
	}
	if string(kr.Key) != "k" || string(kr.Value) != "v" || kr.Timestamp.UnixMilli() != 5 {
		t.Fatalf("kafka record %+v, want key k, value v, timestamp 5 ms", kr)
	}
	e := NewKafkaTxnCommitter(KafkaTxnConfig{Name: "out", Topic: testTopic, TransactionalIDPrefix: "p", Encode: upperEncoder{}})
	kr, err := e.kafkaRecord(ctx, rec)
	if err != nil || string(kr.Value) != "V" || string(rec.Value) != "v" {
		t.Fatalf("with an encoder: err %v, value %q (want \"V\"), caller's value now %q (want \"v\")", err, kr.Value, rec.Value)
	}
}
