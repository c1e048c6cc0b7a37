package source

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestFetchRecordPoolReusesBatchSlices reads 6,000 records written as 120
// snappy batches of 50 into two partitions through two source subtasks
// fetching a few batches at a time,
// with and without watermark alignment (which holds records across polls
// before it emits them): the batches' record slices are taken from the
// subtask's pool again (franz-go puts a batch's slice back once the
// source recycled each of its records), and every record drained, kept as
// emitted (its value not copied) until all were read, still has its own
// offset, timestamp and value: recycling a kgo.Record leaves the bytes a
// runtime.Record took from it alone. Without the pool (kgo.WithPools) no
// slice is reused.
func TestFetchRecordPoolReusesBatchSlices(t *testing.T) {
	for _, align := range []time.Duration{0, 20 * time.Millisecond} {
		t.Run(fmt.Sprintf("max_drift=%v", align), func(t *testing.T) {
			cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "items"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(cluster.Close)
			opts := []kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)}
			prod, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic("items"), kgo.RecordPartitioner(kgo.ManualPartitioner()),
				kgo.ProducerBatchCompression(kgo.SnappyCompression()))...)
			if err != nil {
				t.Fatal(err)
			}
			const batches, per = 60, 50 // per partition
			value := func(p, i int) []byte {
				return fmt.Appendf(nil, `{"p":%d,"i":%d,"pad":"%s"}`, p, i, bytes.Repeat([]byte{byte('a' + (i % 26))}, i%40))
			}
			for b := range batches {
				var recs []*kgo.Record
				for p := range 2 {
					for j := range per {
						i := b*per + j
						recs = append(recs, &kgo.Record{Partition: int32(p), Value: value(p, i), Timestamp: time.UnixMilli(alignBase + int64(i))})
					}
				}
				if err := prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			prod.Close()
			var got []alignedRecord
			// Fetches of a few batches each, so that later batches are
			// decoded while earlier ones are read (as a backlog's are).
			srcOpts := append(opts, kgo.FetchMaxPartitionBytes(4<<10))
			run := runAligned(t, srcOpts, 2, WatermarkAlignment{MaxDrift: align}, nil, func(r alignedRecord) { got = append(got, r) }, nil, nil)
			deadline := time.Now().Add(30 * time.Second)
			for run.emitted.Load() < 2*batches*per && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			run.stop()
			if len(got) != 2*batches*per {
				t.Fatalf("%d records drained, want %d", len(got), 2*batches*per)
			}
			next := [2]int64{}
			for _, r := range got {
				p := r.partition
				if r.offset != next[p] {
					t.Fatalf("partition %d: offset %d drained, want %d", p, r.offset, next[p])
				}
				next[p]++
				if want := value(int(p), int(r.offset)); !bytes.Equal(r.value, want) {
					t.Fatalf("partition %d offset %d: value %q, want %q", p, r.offset, r.value, want)
				}
				if want := alignBase + r.offset; r.ts != want {
					t.Fatalf("partition %d offset %d: timestamp %d, want %d", p, r.offset, r.ts, want)
				}
			}
			var gets, reuses int64
			for _, s := range run.srcs {
				gets += s.recs.gets.Load()
				reuses += s.recs.reuses.Load()
			}
			t.Logf("record slices: %d taken, %d reused", gets, reuses)
			// Each subtask reads one partition of 60 batches; at most a
			// few are in flight at once (fetched, buffered, polled), so
			// most are decoded into a slice an earlier batch gave back.
			if gets < 2*batches || reuses < gets/2 {
				t.Fatalf("record slices: %d taken, %d of them reused; want at least %d taken, half of them reused", gets, reuses, 2*batches)
			}
		})
	}
}

// TestFetchRecordPoolClasses checks GetRecords hands out slices of a
// power-of-two capacity from 64 records (a pooled one of the class when
// there is one), a batch larger than the largest class a slice of its
// own, and PutRecords keeps slices of the classes only, up to
// maxPooledFetchRecords records.
func TestFetchRecordPoolClasses(t *testing.T) {
	var p fetchRecordPool
	for _, c := range []struct{ n, cap int }{{0, 64}, {1, 64}, {64, 64}, {65, 128}, {800, 1024}, {1024, 1024}, {1025, 2048}, {1 << 17, 1 << 17}, {1<<17 + 1, 1<<17 + 1}} {
		if s := p.GetRecords(c.n); len(s) != 0 || cap(s) != c.cap {
			t.Fatalf("GetRecords(%d): len %d cap %d, want 0 and %d", c.n, len(s), cap(s), c.cap)
		}
	}
	p.PutRecords(make([]kgo.Record, 1024))
	p.PutRecords(make([]kgo.Record, 128))
	p.PutRecords(make([]kgo.Record, 1000))    // not a class's capacity: dropped
	p.PutRecords(make([]kgo.Record, 1<<17+1)) // larger than every class: dropped
	if p.records != 1024+128 {
		t.Fatalf("pool holds %d records, want %d", p.records, 1024+128)
	}
	if s := p.GetRecords(600); cap(s) != 1024 {
		t.Fatalf("GetRecords(600): cap %d, want the pooled 1024", cap(s))
	}
	if s := p.GetRecords(600); cap(s) != 1024 {
		t.Fatalf("GetRecords(600) again: cap %d, want a new 1024", cap(s))
	}
	if s := p.GetRecords(100); cap(s) != 128 || p.records != 0 {
		t.Fatalf("GetRecords(100): cap %d, pool left with %d records; want the pooled 128 and none", cap(s), p.records)
	}
	p.PutRecords(make([]kgo.Record, maxPooledFetchRecords/2))
	p.PutRecords(make([]kgo.Record, maxPooledFetchRecords/2))
	p.PutRecords(make([]kgo.Record, 64)) // over the bound: dropped
	if p.records != maxPooledFetchRecords {
		t.Fatalf("pool holds %d records, want %d", p.records, maxPooledFetchRecords)
	}
	if g, r, d := p.gets.Load(), p.reuses.Load(), p.drops.Load(); g != 12 || r != 2 || d != 3 {
		t.Fatalf("gets %d reuses %d drops %d, want 12, 2 and 3", g, r, d)
	}
}
