package sink

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/runtime"
)

// BenchmarkKafkaTxnWrite measures one record written through the Kafka
// transactional committer into an in-process broker (kfake), as the
// matcher's chained sink writes its matches: values of 250 bytes keyed by
// one of 1,000 keys, a transaction pre-committed and committed every
// 20,000 records (the checkpoint). B/op and allocs/op count the broker's
// allocations too (the same in every build); the committer's share is
// the kgo.Records it fills in (recSlab).
func BenchmarkKafkaTxnWrite(b *testing.B) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, testTopic))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	logger, _ := testLogger()
	k := NewKafkaTxnCommitter(KafkaTxnConfig{
		Name: "out", Topic: testTopic, TransactionalIDPrefix: "bench", PoolSize: 4, TransactionTimeout: time.Minute,
		ClientOpts: []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, Logger: logger,
	})
	defer k.Close()
	ctx := context.Background()
	recs := make([]runtime.Record, 1000)
	for i := range recs {
		v := fmt.Appendf(nil, `{"rule":"R%02d","key":"k%06d","first":{"id":%d},"second":{"id":%d}}`, i%10, i, i, i+1)
		for len(v) < 250 {
			v = append(v, ' ')
		}
		recs[i] = runtime.Record{Key: fmt.Appendf(nil, "k%06d", i), Value: v, Timestamp: time.UnixMilli(int64(i))}
	}
	const perTxn = 20000
	id := int64(0)
	commit := func() {
		id++
		cm, err := k.PreCommit(ctx, id)
		if err != nil {
			b.Fatal(err)
		}
		if err := k.Commit(ctx, cm); err != nil {
			b.Fatal(err)
		}
		k.Snapshotted(id)
		k.CheckpointCompleted(id)
	}
	if err := k.BeginTransaction(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := k.Write(ctx, recs[i%len(recs)]); err != nil {
			b.Fatal(err)
		}
		if i++; i%perTxn == 0 {
			commit()
			if err := k.BeginTransaction(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	commit()
}

// BenchmarkRepartitionSinkWrite measures one record written through a
// repartition sink's committer (exchange batches of RepartitionBatchBytes,
// 6 partitions, as a cluster unit's sink with cluster.units 6) into an
// in-process broker (kfake): values of about 100 bytes keyed by one of
// 10,000 keys, as the cluster bench's input, a transaction pre-committed
// and committed every 20,000 records. B/op and allocs/op count the
// broker's allocations too (the same in every build); the committer's
// share is its exchange batches' buffers (batchBuffers) and kgo.Records.
// cpu-ns/op is the process's CPU time (getrusage, the broker's and
// franz-go's goroutines included) per record.
func BenchmarkRepartitionSinkWrite(b *testing.B) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(6, testTopic))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	logger, _ := testLogger()
	k := NewKafkaTxnCommitter(KafkaTxnConfig{
		Name: "repartition.1", Topic: testTopic, TransactionalIDPrefix: "bench", PoolSize: 4, TransactionTimeout: time.Minute,
		ClientOpts: []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, Logger: logger, Changelog: ChangelogHeader,
		Partition: func(key []byte) int32 { return int32(key[len(key)-1]) % 6 }, Partitions: 6,
	})
	defer k.Close()
	ctx := context.Background()
	recs := make([]runtime.Record, 10000)
	for i := range recs {
		v := fmt.Appendf(nil, `{"key":"k%05d","n":%d,"payload":"`, i, i)
		for len(v) < 98 {
			v = append(v, 'x')
		}
		v = append(v, `"}`...)
		recs[i] = runtime.Record{Key: fmt.Appendf(nil, "k%05d", i), Value: v, Timestamp: time.UnixMilli(int64(i))}
	}
	const perTxn = 20000
	id := int64(0)
	commit := func() {
		id++
		cm, err := k.PreCommit(ctx, id)
		if err != nil {
			b.Fatal(err)
		}
		if err := k.Commit(ctx, cm); err != nil {
			b.Fatal(err)
		}
		k.Snapshotted(id)
		k.CheckpointCompleted(id)
	}
	if err := k.BeginTransaction(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	start := testkit.CPUTime(b)
	i := 0
	for b.Loop() {
		if err := k.Write(ctx, recs[i%len(recs)]); err != nil {
			b.Fatal(err)
		}
		if i++; i%perTxn == 0 {
			commit()
			if err := k.BeginTransaction(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	commit()
	b.ReportMetric(float64(testkit.CPUTime(b)-start)/float64(b.N), "cpu-ns/op")
}
