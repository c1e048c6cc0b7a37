package sink

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/runtime"
)

// TestLentValuesSurviveRetriesAndAborts attacks the committer's copies of
// lent values (CopyValues) and its reused record slabs where the plain
// pool test does not go: values of random sizes (empty, larger than the
// rest of a slab's value buffer, or than a slab's whole one), tombstones
// and dropped -U records of an upsert sink, produce requests the broker
// fails with a retriable error (franz-go sends the same records again
// from their kgo.Records), and transactions aborted with records still
// buffered (their promises fail them, which finishes their slabs for
// reuse by the next transaction). The caller writes every value into one
// buffer and scribbles over it after each Write. Every committed record
// must be byte for byte the one written (an independent model: key ->
// value), the aborted ones absent.
func TestLentValuesSurviveRetriesAndAborts(t *testing.T) {
	c, opts := newClusterHandle(t)
	var produces, failed atomic.Int64
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if produces.Add(1)%5 != 0 {
			return nil, nil, false
		}
		failed.Add(1)
		r := req.(*kmsg.ProduceRequest)
		resp := r.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.NotEnoughReplicas.Code // retriable: franz-go sends the batch again
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	logger, _ := testLogger()
	m, _ := newMetrics(t)
	k := NewKafkaTxnCommitter(KafkaTxnConfig{
		Name: "out", Topic: testTopic, TransactionalIDPrefix: "lent", PoolSize: 4, TransactionTimeout: time.Minute,
		ClientOpts: append(slices.Clip(opts), kgo.ProducerBatchMaxBytes(200<<10), kgo.MaxBufferedRecords(4*recordSlab),
			kgo.RetryBackoffFn(func(int) time.Duration { return time.Millisecond })),
		Metrics: m, Logger: logger,
	})
	defer k.Close()
	if !k.CopyValues() {
		t.Fatal("CopyValues() = false for a committer without encoder or partitioner")
	}
	ctx := context.Background()
	r := rand.New(rand.NewPCG(41, 1))
	want := map[string][]byte{} // committed key -> value (nil: a tombstone)
	buf := make([]byte, 0, 64)  // the caller's one buffer, lent to every Write
	const rounds, perRound = 8, 400
	for round := range rounds {
		if err := k.BeginTransaction(ctx); err != nil {
			t.Fatal(err)
		}
		abort := round%3 == 1
		written := map[string][]byte{}
		for i := range perRound {
			key := fmt.Sprintf("r%d-%04d", round, i)
			n := r.IntN(300)
			switch r.IntN(20) {
			case 0:
				n = 0
			case 1:
				n = 9000 + r.IntN(4000) // past most slabs' value buffers
			case 2:
				if r.IntN(10) == 0 {
					n = 100_000 + r.IntN(50_000) // a slab's whole value buffer and more
				}
			}
			v := make([]byte, n) // the model's own copy
			for j := range v {
				v[j] = byte('a' + r.IntN(26))
			}
			buf = append(buf[:0], v...)
			rec := runtime.Record{Key: []byte(key), Value: buf, Timestamp: time.UnixMilli(int64(1000 + i))}
			switch r.IntN(15) {
			case 0:
				rec.Change = runtime.ChangeDelete // a tombstone: no value written
				v = nil
			case 1:
				rec.Change = runtime.ChangeUpdateBefore // dropped by the upsert sink
				v = []byte("dropped")
			}
			if err := k.Write(ctx, rec); err != nil {
				t.Fatal(err)
			}
			for j := range buf { // the caller's next record
				buf[j] = '#'
			}
			if rec.Change != runtime.ChangeUpdateBefore {
				written[key] = v
			}
		}
		if abort {
			if err := k.AbortOpen(ctx); err != nil {
				t.Fatal(err)
			}
			continue
		}
		cm, err := k.PreCommit(ctx, int64(round+1))
		if err != nil {
			t.Fatal(err)
		}
		if err := k.Commit(ctx, cm); err != nil {
			t.Fatal(err)
		}
		k.Snapshotted(int64(round + 1))
		k.CheckpointCompleted(int64(round + 1))
		for key, v := range written {
			want[key] = v
		}
	}
	if failed.Load() == 0 || k.reused == 0 {
		t.Fatalf("%d produce requests failed, %d slabs reused: the test covers neither retries nor reuse", failed.Load(), k.reused)
	}
	got := map[string][]byte{}
	for _, rec := range testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), testTopic, 20*time.Second) {
		key := string(rec.Key)
		if _, dup := got[key]; dup {
			t.Fatalf("record %q committed twice", key)
		}
		got[key] = rec.Value
	}
	if len(got) != len(want) {
		t.Fatalf("read %d committed records, want %d", len(got), len(want))
	}
	for key, v := range want {
		g, ok := got[key]
		if !ok {
			t.Fatalf("record %q missing", key)
		}
		if !bytes.Equal(g, v) || (v == nil) != (g == nil) {
			t.Fatalf("record %q: value %.40q (%d bytes), want %.40q (%d bytes)", key, g, len(g), v, len(v))
		}
	}
}
