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

// TestFetchRecordPoolBestFitAndBound checks GetRecords hands out the
// smallest pooled slice that fits, makes a new one with an eighth to
// spare when none does, and PutRecords keeps no more than
// maxPooledFetchRecords records.
func TestFetchRecordPoolBestFitAndBound(t *testing.T) {
	var p fetchRecordPool
	if s := p.GetRecords(800); len(s) != 0 || cap(s) != 900 {
		t.Fatalf("new slice: len %d cap %d, want 0 and 900", len(s), cap(s))
	}
	p.PutRecords(make([]kgo.Record, 1000))
	p.PutRecords(make([]kgo.Record, 100))
	p.PutRecords(make([]kgo.Record, 500))
	if s := p.GetRecords(400); cap(s) != 500 || len(s) != 0 {
		t.Fatalf("GetRecords(400): len %d cap %d, want 0 and 500 (the smallest that fits)", len(s), cap(s))
	}
	if s := p.GetRecords(2000); cap(s) != 2250 {
		t.Fatalf("GetRecords(2000): cap %d, want a new 2250", cap(s))
	}
	if s := p.GetRecords(50); cap(s) != 100 {
		t.Fatalf("GetRecords(50): cap %d, want 100", cap(s))
	}
	if p.records != 1000 || len(p.free) != 1 {
		t.Fatalf("pool holds %d records in %d slices, want 1000 in 1", p.records, len(p.free))
	}
	p.PutRecords(make([]kgo.Record, maxPooledFetchRecords-1000))
	p.PutRecords(make([]kgo.Record, 1)) // over the bound: dropped
	if p.records != maxPooledFetchRecords || len(p.free) != 2 {
		t.Fatalf("pool holds %d records in %d slices, want %d in 2", p.records, len(p.free), maxPooledFetchRecords)
	}
	if g, r := p.gets.Load(), p.reuses.Load(); g != 4 || r != 2 {
		t.Fatalf("gets %d reuses %d, want 4 and 2", g, r)
	}
}
