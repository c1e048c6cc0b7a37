package source

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/runtime"
)

// BenchmarkSourceFetch measures one record read by a Kafka source subtask
// from an in-process broker (kfake) and emitted into a channel: the
// fetch, franz-go's decompression and decode of the batches, the
// source's JSON check and emit. The topic holds 200,000 records of about
// 100 bytes (the bench's input) in two partitions, written as snappy
// batches of up to 1 MiB; each iteration reads all of them with a new
// subtask. cpu-ns/op is the process's CPU time (getrusage: the broker's,
// franz-go's and the drain's goroutines included) per record; B/op and
// allocs/op are per record too.
func BenchmarkSourceFetch(b *testing.B) {
	const records = 200_000
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "items"))
	if err != nil {
		b.Fatal(err)
	}
	defer cluster.Close()
	opts := []kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)}
	prod, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic("items"), kgo.ProducerLinger(5*time.Millisecond),
		kgo.MaxBufferedRecords(100_000), kgo.ProducerBatchMaxBytes(1<<20))...)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for i := range records {
		v := fmt.Appendf(nil, `{"id":%d,"key":"k%06d","shape":"CIRCLE","amount":%d,"note":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`, i, i%10000, i%1000)
		prod.Produce(ctx, &kgo.Record{Key: fmt.Appendf(nil, "k%06d", i%10000), Value: v, Timestamp: time.UnixMilli(1_733_000_000_000 + int64(i))}, func(_ *kgo.Record, err error) {
			if err != nil {
				b.Error(err)
			}
		})
	}
	if err := prod.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	prod.Close()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	read := func() {
		ch := runtime.NewChannel(1024)
		src := New(Config{
			Name: "src", Topic: "items", Partitions: 2, Parallelism: 1, ClientOpts: opts,
			Output: runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{})),
			Logger: logger,
		})
		stop := make(chan struct{})
		done := make(chan error, 1)
		go func() { done <- src.Run(ctx, stop) }()
		n := 0
		for el := range ch {
			if el.Kind == runtime.KindRecord {
				if n++; n == records {
					close(stop)
				}
			}
			if el.Kind == runtime.KindEndOfInput {
				break
			}
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		if n != records {
			b.Fatalf("%d records read, want %d", n, records)
		}
	}
	read() // warm the broker's and the runtime's caches
	b.ReportAllocs()
	b.ResetTimer()
	start := testkit.CPUTime(b)
	for range b.N {
		read()
	}
	b.StopTimer()
	b.ReportMetric(float64(testkit.CPUTime(b)-start)/float64(b.N*records), "cpu-ns/op")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*records), "ns/rec")
}
