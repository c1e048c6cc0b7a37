package sink

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/runtime"
)

// TestRepartitionSinkAbortDropsOpenBatches: the records of an aborted
// transaction still in their partitions' open exchange batches are never
// produced, neither into the aborted transaction nor into the next one;
// the next transaction's batches hold only its own records, flushed at its
// pre-commit, so read_committed sees exactly them.
func TestRepartitionSinkAbortDropsOpenBatches(t *testing.T) {
	ctx := context.Background()
	logger, _ := testLogger()
	opts := newCluster(t)
	k := NewKafkaTxnCommitter(KafkaTxnConfig{
		Name: "repartition.1", Topic: testTopic, TransactionalIDPrefix: "xa", TransactionTimeout: time.Minute,
		ClientOpts: opts, Logger: logger, Changelog: ChangelogHeader,
		Partition: func(key []byte) int32 { n, _ := strconv.Atoi(string(key)); return int32(n % 3) }, Partitions: 3,
	})
	defer k.Close()
	write := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if err := k.Write(ctx, runtime.Record{Key: []byte(strconv.Itoa(i)), Value: []byte(`{"i":` + strconv.Itoa(i) + `}`), Timestamp: time.UnixMilli(int64(1000 + i))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Aborted with its batches open (a stop's EndInput).
	if err := k.BeginTransaction(ctx); err != nil {
		t.Fatal(err)
	}
	write(0, 40)
	if err := k.AbortOpen(ctx); err != nil {
		t.Fatal(err)
	}
	// Aborted after a marker produced the batches, with new ones open.
	if err := k.BeginTransaction(ctx); err != nil {
		t.Fatal(err)
	}
	write(40, 60)
	if err := k.WriteMarker(ctx, runtime.Marker{Kind: runtime.MarkerWatermark, Unit: "0/1", Watermark: time.UnixMilli(1050)}); err != nil {
		t.Fatal(err)
	}
	write(60, 80)
	if err := k.AbortOpen(ctx); err != nil {
		t.Fatal(err)
	}
	if err := k.BeginTransaction(ctx); err != nil {
		t.Fatal(err)
	}
	write(100, 130)
	c, err := k.PreCommit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if c.Records != 30 {
		t.Errorf("committable records %d, want 30", c.Records)
	}
	if err := k.Commit(ctx, c); err != nil {
		t.Fatal(err)
	}
	raw := testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), testTopic, 10*time.Second)
	got := recordLines(expandExchange(t, raw))
	var want []string
	for p := range 3 {
		for i := 100; i < 130; i++ {
			if i%3 == p {
				want = append(want, "p"+strconv.Itoa(p)+" key="+strconv.Itoa(i)+" value={\"i\":"+strconv.Itoa(i)+"} ts="+strconv.Itoa(1000+i)+" [kstreamd-change=+I]")
			}
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("read_committed after two aborts:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(raw) != 3 {
		t.Errorf("%d Kafka records, want 3 batches (one per partition)", len(raw))
	}
}

// TestRepartitionSinkOpenBatchesBounded: a repartition sink of many
// partitions holds at most 1 MiB in open exchange batches, whatever the
// partition count (at 16 KiB a partition, 256 partitions would hold 4 MiB
// per sink subtask, and a daemon runs a subtask per unit: units x units x
// 16 KiB), and its records still expand to exactly what one Kafka record
// per record wrote, still some 20 to a Kafka record.
func TestRepartitionSinkOpenBatchesBounded(t *testing.T) {
	ctx := context.Background()
	logger, _ := testLogger()
	const parts, n = 256, 20000
	const bound = RepartitionOpenBytes
	run := func(batchBytes int) []string {
		t.Helper()
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, "wide"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		opts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
		k := NewKafkaTxnCommitter(KafkaTxnConfig{
			Name: "repartition.1", Topic: "wide", TransactionalIDPrefix: "xw", TransactionTimeout: time.Minute,
			ClientOpts: opts, Logger: logger, Changelog: ChangelogHeader, BatchBytes: batchBytes,
			Partition: func(key []byte) int32 { n, _ := strconv.Atoi(string(key)); return int32(n % parts) }, Partitions: parts,
		})
		defer k.Close()
		if err := k.BeginTransaction(ctx); err != nil {
			t.Fatal(err)
		}
		value := `"` + strings.Repeat("v", 150) + `"`
		peak := 0
		for i := range n {
			if err := k.Write(ctx, runtime.Record{Key: []byte(strconv.Itoa(i)), Value: []byte(value), Timestamp: time.UnixMilli(int64(i))}); err != nil {
				t.Fatal(err)
			}
			if k.xb != nil {
				open, held := 0, 0
				for p := range k.xb.parts {
					open += k.xb.parts[p].Size()
					held += k.xb.parts[p].Cap()
				}
				if held != k.xb.open {
					t.Fatalf("record %d: open batches hold %d bytes, the sink counts %d", i, held, k.xb.open)
				}
				peak = max(peak, open, held)
			}
		}
		if peak > bound {
			t.Errorf("BatchBytes %d: open exchange batches held %d bytes, want at most %d", batchBytes, peak, bound)
		}
		cm, err := k.PreCommit(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if k.xb != nil {
			// Produced at the pre-commit, the batches keep no buffer
			// while the partition is idle.
			for p := range k.xb.parts {
				if c := k.xb.parts[p].Cap(); c != 0 {
					t.Fatalf("partition %d holds %d bytes after the pre-commit", p, c)
				}
			}
			if k.xb.open != 0 {
				t.Errorf("the sink counts %d open bytes after the pre-commit", k.xb.open)
			}
		}
		if err := k.Commit(ctx, cm); err != nil {
			t.Fatal(err)
		}
		raw := testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), "wide", 20*time.Second)
		// 3.8 MB in batches of about 1 MiB / 256 (4 KiB, some 20
		// records): the bound keeps the batching.
		if batchBytes == 0 && len(raw) > n/10 {
			t.Errorf("%d Kafka records for %d records, want at most %d", len(raw), n, n/10)
		}
		return recordLines(expandExchange(t, raw))
	}
	old := run(-1)
	if len(old) != n {
		t.Fatalf("format before batches: %d records, want %d", len(old), n)
	}
	if got := run(0); !slices.Equal(got, old) {
		t.Errorf("exchange batches: %d records, not the %d the format before batches wrote (or in another order)", len(got), len(old))
	}
}
