package sink

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/runtime"
)

// expandExchange returns recs with every exchange batch record replaced by
// its records, as a repartition source reads them: the batch's topic,
// partition and offset, the record's own key, value, headers and
// timestamp (else the batch's).
func expandExchange(t *testing.T, recs []*kgo.Record) []*kgo.Record {
	t.Helper()
	var out []*kgo.Record
	for _, r := range recs {
		if !slices.ContainsFunc(r.Headers, func(h kgo.RecordHeader) bool {
			return h.Key == runtime.MarkerHeader && string(h.Value) == runtime.ExchangeBatchMarker
		}) {
			out = append(out, r)
			continue
		}
		rd, err := runtime.NewExchangeBatchReader(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		var br runtime.ExchangeBatchRecord
		for {
			ok, err := rd.Next(&br)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			in := &kgo.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: br.Key, Value: br.Value, Timestamp: br.Timestamp}
			if in.Timestamp.IsZero() {
				in.Timestamp = r.Timestamp
			}
			for _, h := range br.Headers {
				in.Headers = append(in.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
			}
			out = append(out, in)
		}
	}
	return out
}

// TestExchangeBatchAsChangelogRecord: appendChangelogRecord writes into a
// batch what changelogRecord puts into a Kafka record (key, value, ms
// timestamp, headers in order, nil values kept nil) for every changelog
// mode and change kind, with and without headers of the record's own.
func TestExchangeBatchAsChangelogRecord(t *testing.T) {
	for _, mode := range []ChangelogMode{ChangelogUpsert, ChangelogHeader, ChangelogUpsertHeader} {
		for _, change := range []runtime.ChangeKind{runtime.ChangeInsert, runtime.ChangeUpdateBefore, runtime.ChangeUpdateAfter, runtime.ChangeDelete} {
			for _, headers := range [][]runtime.Header{nil, {{Key: "trace", Value: []byte("t1")}, {Key: runtime.ChangeHeader, Value: []byte("+U")}, {Key: "empty", Value: []byte{}}}} {
				rec := runtime.Record{Key: []byte("k"), Value: []byte(`{"a":1}`), Timestamp: time.UnixMilli(1700000000123), Change: change, Headers: headers}
				var want kgo.Record
				if !changelogRecord(mode, &want, &rec) {
					continue // an upsert sink's -U, dropped by Write
				}
				var b runtime.ExchangeBatch
				appendChangelogRecord(&b, mode, &rec)
				rd, err := runtime.NewExchangeBatchReader(b.Take(0))
				if err != nil {
					t.Fatal(err)
				}
				var got runtime.ExchangeBatchRecord
				if ok, err := rd.Next(&got); !ok || err != nil {
					t.Fatal(ok, err)
				}
				name := fmt.Sprintf("%v %v %d headers", mode, change, len(headers))
				if !bytes.Equal(got.Key, want.Key) || !bytes.Equal(got.Value, want.Value) || (got.Value == nil) != (want.Value == nil) || !got.Timestamp.Equal(want.Timestamp) {
					t.Errorf("%s: key %q value %q ts %v, want %q %q %v", name, got.Key, got.Value, got.Timestamp, want.Key, want.Value, want.Timestamp)
				}
				var gh, wh []string
				for _, h := range got.Headers {
					gh = append(gh, h.Key+"="+string(h.Value))
				}
				for _, h := range want.Headers {
					wh = append(wh, h.Key+"="+string(h.Value))
				}
				if !slices.Equal(gh, wh) {
					t.Errorf("%s: headers %v, want %v", name, gh, wh)
				}
				if ok, err := rd.Next(&got); ok || err != nil {
					t.Errorf("%s: a second record: %v %v", name, ok, err)
				}
			}
		}
	}
}

// TestRepartitionSinkExchangeBatches: a repartition sink writes its records
// in exchange batches, one Kafka record per partition's batch (produced
// when it reaches BatchBytes, before a marker and at the pre-commit),
// which expand to exactly the records the format before batches wrote, in
// order per partition, with each marker after the records written before
// it; the committable and records out count records, not batches.
func TestRepartitionSinkExchangeBatches(t *testing.T) {
	ctx := context.Background()
	logger, _ := testLogger()
	// write runs a transaction on a cluster of its own and returns the
	// records read_committed sees, batches expanded, and how many Kafka
	// records the topic holds.
	var data [][]string // per run, the data records testkit.WithoutMarkers decodes
	write := func(batchBytes int) ([]string, int) {
		opts := newCluster(t)
		k := NewKafkaTxnCommitter(KafkaTxnConfig{
			Name: "repartition.1", Topic: testTopic, TransactionalIDPrefix: "xb", TransactionTimeout: time.Minute,
			ClientOpts: opts, Logger: logger, Changelog: ChangelogHeader, BatchBytes: batchBytes,
			Partition: func(key []byte) int32 { n, _ := strconv.Atoi(string(key)); return int32(n % 3) }, Partitions: 3,
		})
		defer k.Close()
		if err := k.BeginTransaction(ctx); err != nil {
			t.Fatal(err)
		}
		const n = 200
		for i := range n {
			rec := runtime.Record{Key: []byte(strconv.Itoa(i)), Value: []byte(`{"i":` + strconv.Itoa(i) + `}`), Timestamp: time.UnixMilli(int64(1000 + i))}
			if i%7 == 0 {
				rec.Change = runtime.ChangeUpdateBefore
			}
			if i%50 == 0 {
				rec.Timestamp = time.Time{}
			}
			if err := k.Write(ctx, rec); err != nil {
				t.Fatal(err)
			}
			if i == 120 {
				if err := k.WriteMarker(ctx, runtime.Marker{Kind: runtime.MarkerWatermark, Unit: "0/1", Watermark: time.UnixMilli(1100)}); err != nil {
					t.Fatal(err)
				}
			}
		}
		c, err := k.PreCommit(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if c.Records != n+3 {
			t.Errorf("BatchBytes %d: committable records %d, want %d (records and 3 markers)", batchBytes, c.Records, n+3)
		}
		if err := k.Commit(ctx, c); err != nil {
			t.Fatal(err)
		}
		raw := testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), testTopic, 10*time.Second)
		data = append(data, recordLines(testkit.WithoutMarkers(raw)))
		return recordLines(expandExchange(t, raw)), len(raw)
	}
	old, n := write(-1)
	if len(old) != 203 || n != 203 {
		t.Fatalf("format before batches: %d records in %d Kafka records, want 203 in 203", len(old), n)
	}
	small, n := write(256)
	if !slices.Equal(small, old) {
		t.Errorf("exchange batches of 256 bytes expand to\n%s\nwant\n%s", strings.Join(small, "\n"), strings.Join(old, "\n"))
	}
	// About 18 bytes a record (its change kind in the flags byte, not a
	// ~20-byte header): some 14 records a batch.
	if n < 3+200/16 || n > 3+6+200/10 {
		t.Errorf("256-byte batches: %d Kafka records, want about 200/14 and 3 markers", n)
	}
	def, n := write(0)
	if !slices.Equal(def, old) {
		t.Errorf("exchange batches of RepartitionBatchBytes expand to\n%s\nwant\n%s", strings.Join(def, "\n"), strings.Join(old, "\n"))
	}
	// One batch per partition before the marker, one after, and the 3
	// markers.
	if n != 9 {
		t.Errorf("default batches: %d Kafka records, want 9", n)
	}
	// testkit's decoder of the documented layout agrees.
	for i, d := range data {
		if len(d) != 200 || !slices.Equal(d, data[0]) {
			t.Errorf("run %d: testkit.WithoutMarkers read %d data records, not run 0's %d", i, len(d), len(data[0]))
		}
	}
}

// recordLines renders recs per partition, in offset order: partition,
// key, value, timestamp (ms, or "now" for the producer's clock) and
// headers.
func recordLines(recs []*kgo.Record) []string {
	recs = slices.Clone(recs)
	slices.SortStableFunc(recs, func(a, b *kgo.Record) int { return int(a.Partition - b.Partition) })
	var out []string
	for _, r := range recs {
		var hs []string
		for _, h := range r.Headers {
			hs = append(hs, h.Key+"="+string(h.Value))
		}
		ts := strconv.FormatInt(r.Timestamp.UnixMilli(), 10)
		if r.Timestamp.After(time.UnixMilli(1 << 40)) {
			ts = "now"
		}
		out = append(out, fmt.Sprintf("p%d key=%s value=%s ts=%s %v", r.Partition, r.Key, r.Value, ts, hs))
	}
	return out
}

// TestExchangeBatchBufferReusedOnlyOnceFinished: a produced exchange
// batch's buffer is encoded into again only after its Kafka record's
// produce promise ran (acknowledged or failed), never while franz-go may
// still read it; a dropped batch's buffer is reused at once; a marker's
// promise puts nothing back; a buffer that grew past twice the limit is
// not kept.
func TestExchangeBatchBufferReusedOnlyOnceFinished(t *testing.T) {
	ctx := context.Background()
	k := NewKafkaTxnCommitter(KafkaTxnConfig{
		Name: "repartition.1", Topic: testTopic, TransactionalIDPrefix: "xb", Changelog: ChangelogUpsert,
		BatchBytes: 256, Partition: func([]byte) int32 { return 0 }, Partitions: 1,
	})
	s := k.slots[0]
	xb := k.batches()
	// batch writes n records of value v into the open batch (below the
	// limit: nothing is produced) and takes it as produceBatch would.
	batch := func(v string, n int) *kgo.Record {
		t.Helper()
		for i := range n {
			if err := k.writeBatched(ctx, xb, s, runtime.Record{Key: []byte(strconv.Itoa(i)), Value: []byte(v)}); err != nil {
				t.Fatal(err)
			}
		}
		return k.batchRecord(xb, 0)
	}
	values := func(kr *kgo.Record) []string {
		t.Helper()
		var out []string
		for _, r := range expandExchange(t, []*kgo.Record{kr}) {
			out = append(out, string(r.Value))
		}
		return out
	}
	a := batch("aaaa", 4)
	want := []string{"aaaa", "aaaa", "aaaa", "aaaa"}
	b := batch("bbbb", 4) // a is in flight: b must not write into a's buffer
	if &b.Value[0] == &a.Value[0] || k.bufs.reused != 0 {
		t.Fatalf("batch b took a's buffer (reused %d) before a's promise ran", k.bufs.reused)
	}
	if got := values(a); !slices.Equal(got, want) {
		t.Fatalf("in-flight batch a reads %q after b was written, want %q", got, want)
	}
	s.promise(a, nil) // acknowledged: franz-go is done with a
	c := batch("cccc", 2)
	if &c.Value[0] != &a.Value[0] || k.bufs.reused != 1 {
		t.Fatalf("batch c after a's promise: buffer %p (reused %d), want a's %p", &c.Value[0], k.bufs.reused, &a.Value[0])
	}
	if got := values(c); !slices.Equal(got, []string{"cccc", "cccc"}) {
		t.Fatalf("batch c in a's buffer reads %q", got)
	}
	if got := values(b); !slices.Equal(got, []string{"bbbb", "bbbb", "bbbb", "bbbb"}) {
		t.Fatalf("in-flight batch b reads %q after c was written", got)
	}
	s.promise(b, fmt.Errorf("failed")) // a failure finishes it as well
	if err := s.err(); err == nil {
		t.Fatal("the failure b's promise reported was lost")
	}
	// A marker's record (not a batch) puts no buffer back.
	m := k.newRecord()
	m.Value, m.Headers = []byte("marker"), []kgo.RecordHeader{{Key: runtime.MarkerHeader, Value: []byte(runtime.ExchangeBatchMarker)}}
	s.promise(m, nil)
	// A dropped open batch's buffer (never produced) goes back at once.
	if err := k.writeBatched(ctx, xb, s, runtime.Record{Key: []byte("k"), Value: []byte("dddd")}); err != nil {
		t.Fatal(err)
	}
	k.dropBatches()
	if xb.open != 0 || len(k.bufs.bufs) != 1 || k.bufs.reused != 2 {
		t.Fatalf("after dropBatches: open %d, %d free buffers (reused %d), want 0, 1 (2)", xb.open, len(k.bufs.bufs), k.bufs.reused)
	}
	e := batch("eeee", 1)
	if &e.Value[0] != &b.Value[0] || len(k.bufs.bufs) != 0 {
		t.Fatalf("batch e after the drop: buffer %p, want b's %p (taken by d, dropped)", &e.Value[0], &b.Value[0])
	}
	if got := values(e); !slices.Equal(got, []string{"eeee"}) {
		t.Fatalf("batch e reads %q", got)
	}
	// A buffer larger than twice the limit is left to the collector.
	k.bufs.put(make([]byte, 0, 4*256))
	if len(k.bufs.bufs) != 1 {
		t.Fatalf("%d free buffers after putting an oversized one, want 1", len(k.bufs.bufs))
	}
}
