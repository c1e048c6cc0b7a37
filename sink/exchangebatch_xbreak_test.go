package sink

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/runtime"
)

// TestRepartitionSinkReusedBuffersKeepWideBatches: a repartition sink of
// 256 partitions whose batch buffers were reused from full batches (a
// transaction that wrote to four partitions only) still batches when its
// records spread over every partition: the open batches' bound
// (RepartitionOpenBytes) counts the bytes they hold, so a reused 16 KiB
// buffer holding one record must not make the sink produce batches of a
// record or two.
func TestRepartitionSinkReusedBuffersKeepWideBatches(t *testing.T) {
	ctx := context.Background()
	logger, _ := testLogger()
	const parts, n = 256, 20000
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, "wide"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	opts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
	k := NewKafkaTxnCommitter(KafkaTxnConfig{
		Name: "repartition.1", Topic: "wide", TransactionalIDPrefix: "xw", TransactionTimeout: time.Minute,
		ClientOpts: opts, Logger: logger, Changelog: ChangelogHeader,
		Partition: func(key []byte) int32 { n, _ := strconv.Atoi(string(key)); return int32(n % parts) }, Partitions: parts,
	})
	defer k.Close()
	value := []byte(`"` + strings.Repeat("v", 150) + `"`)
	txn := func(id int64, key func(i int) int) {
		t.Helper()
		if err := k.BeginTransaction(ctx); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if err := k.Write(ctx, runtime.Record{Key: []byte(strconv.Itoa(key(i))), Value: value, Timestamp: time.UnixMilli(int64(i))}); err != nil {
				t.Fatal(err)
			}
		}
		cm, err := k.PreCommit(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if err := k.Commit(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	txn(1, func(i int) int { return i % 4 }) // full batches of four partitions
	first := len(testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), "wide", 20*time.Second))
	txn(2, func(i int) int { return i }) // every partition in turn
	raw := testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), "wide", 20*time.Second)
	recs := expandExchange(t, raw)
	if len(recs) != 2*n {
		t.Fatalf("%d records, want %d", len(recs), 2*n)
	}
	second := len(raw) - first
	if second > n/10 {
		t.Errorf("%d Kafka records for the %d records spread over %d partitions, want at most %d", second, n, parts, n/10)
	}
}
