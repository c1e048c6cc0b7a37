package sink

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/runtime"
)

// batchCounter counts the record batches a consumer decoded per
// partition and their compression codecs (kgo.HookFetchBatchRead).
type batchCounter struct {
	mu      sync.Mutex
	batches map[int32]int
	codecs  map[uint8]int
}

func (b *batchCounter) OnFetchBatchRead(_ kgo.BrokerMetadata, _ string, p int32, m kgo.FetchBatchMetrics) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.batches[p]++
	b.codecs[m.CompressionType]++
}

// TestRepartitionSinkBatches: a repartition sink's producer lets a
// partition's batch fill for its linger (here 10 s, so that a loaded
// machine's slow writes stay within it) and the pre-commit flushes what
// still lingers, so records written over about 200 ms to three partitions
// are committed, in one snappy batch per partition (plus the commit
// markers' control batches). With franz-go's 10 ms default linger the same
// writes took some 33 batches per partition.
func TestRepartitionSinkBatches(t *testing.T) {
	opts := newCluster(t)
	ctx := context.Background()
	logger, _ := testLogger()
	k := NewKafkaTxnCommitter(KafkaTxnConfig{
		Name: "repartition.1", Topic: testTopic, TransactionalIDPrefix: "batches", TransactionTimeout: time.Minute,
		ClientOpts: opts, Logger: logger, Changelog: ChangelogHeader, Linger: 10 * time.Second,
		Partition: func(key []byte) int32 { n, _ := strconv.Atoi(string(key)); return int32(n % 3) }, Partitions: 3,
		BatchBytes: -1, // one Kafka record per record: the linger batches them
	})
	defer k.Close()
	if err := k.BeginTransaction(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 300
	for i := range n {
		if err := k.Write(ctx, runtime.Record{Key: []byte(strconv.Itoa(i)), Value: []byte(`{"i":` + strconv.Itoa(i) + `}`), Timestamp: time.UnixMilli(int64(i))}); err != nil {
			t.Fatal(err)
		}
		if i%3 == 2 {
			time.Sleep(2 * time.Millisecond) // 100 pauses: about 200 ms of writes
		}
	}
	c, err := k.PreCommit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Commit(ctx, c); err != nil {
		t.Fatal(err)
	}
	bc := &batchCounter{batches: map[int32]int{}, codecs: map[uint8]int{}}
	recs := testkit.ReadTopicWith(t, append(opts[:len(opts):len(opts)], kgo.WithHooks(bc)), kgo.ReadCommitted(), testTopic, 10*time.Second)
	if len(recs) != n {
		t.Fatalf("read %d records, want %d", len(recs), n)
	}
	bc.mu.Lock()
	defer bc.mu.Unlock()
	for p := range int32(3) {
		// One data batch and one control batch, the commit marker.
		if got := bc.batches[p]; got != 2 {
			t.Errorf("partition %d: %d batches, want 2 (the records in one batch, and the commit marker)", p, got)
		}
	}
	if bc.codecs[2] < 3 { // 2: snappy
		t.Errorf("batch codecs %v, want the 3 data batches snappy (2)", bc.codecs)
	}
}
