package sink

import (
	"context"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/runtime"
)

// RepartitionBatchBytes is the size at which a repartition sink's exchange
// batch of one partition is produced (KafkaTxnConfig.BatchBytes 0): a
// repartition sink writes its records several to a Kafka record
// (runtime.ExchangeBatch, docs/scale-out.md "The batch format"), so the
// per-record costs of a Kafka record (the produce call, its promise, its
// encoding into the Kafka batch, and downstream its fetch decoding) are
// paid once per batch. A batch's records stay invisible until the
// transaction commits, as before, so holding them costs no latency; each
// open partition holds at most this much plus one record, so a batch stays
// well within Kafka's default 1 MB message size unless one record alone
// exceeds it (as it would without batches). 16 KiB (some 150 records of
// 100 bytes) costs no more CPU than 64 KiB did in the cluster bench,
// and leaves less to produce at the pre-commit (a unit's checkpoint p50 was
// 40-44 ms against 52-173 ms with 64 KiB, in three interleaved rounds).
const RepartitionBatchBytes = 16 << 10

// RepartitionOpenBytes bounds the memory a repartition sink subtask's open
// exchange batches hold together (their buffers' capacity): past it, the
// largest open batch is produced before the next record. A sink writes one
// batch per partition of its topic, cluster.units of them, and a daemon runs
// a sink subtask per unit it holds, so without it a daemon's open batches
// could take units x units x RepartitionBatchBytes (256 units: 4 MiB per
// subtask, 1 GiB on a daemon holding all of them;
// TestRepartitionSinkOpenBatchesBounded). Up to 64 partitions the bound is
// hardly ever reached (64 x 16 KiB); with more, a partition's batches are
// produced at about RepartitionOpenBytes / partitions on average (256
// partitions: 4 KiB, still some 40 records of 100 bytes per Kafka record).
const RepartitionOpenBytes = 1 << 20

// exchangeBatches are the open transaction's exchange batches of a
// repartition sink, one per partition of its topic. Only the sink
// subtask's goroutine uses them.
type exchangeBatches struct {
	limit int
	parts []runtime.ExchangeBatch
	// open is the sum of the parts' Cap, kept at most budget
	// (RepartitionOpenBytes) after every write.
	open, budget int
}

// batches returns the committer's exchange batches, made on first use; nil
// when the committer writes one Kafka record per record (not a repartition
// sink, or KafkaTxnConfig.BatchBytes < 0).
func (k *KafkaTxnCommitter) batches() *exchangeBatches {
	if k.xb != nil || k.cfg.Partition == nil || k.cfg.Partitions <= 0 || k.cfg.BatchBytes < 0 {
		return k.xb
	}
	k.xb = &exchangeBatches{limit: k.cfg.BatchBytes, parts: make([]runtime.ExchangeBatch, k.cfg.Partitions), budget: RepartitionOpenBytes}
	if k.xb.limit == 0 {
		k.xb.limit = RepartitionBatchBytes
	}
	// A batch's buffer grows past the limit by at most a record's
	// estimate before it is produced (writeBatched), so by append's
	// growth to at most twice it.
	k.bufs = &batchBuffers{max: 2*k.xb.limit + 1024}
	return k.xb
}

// writeBatched adds rec, encoded with the sink's encoder if any and as
// KafkaTxnConfig.Changelog writes it, to the exchange batch of its
// partition in slot s's open transaction, producing the batch first when
// rec would take it past the limit and after when it reached it; when the
// open batches then hold more than their budget (RepartitionOpenBytes),
// it produces the largest of them, which brings them back within it (the
// largest holds at least what rec added).
func (k *KafkaTxnCommitter) writeBatched(ctx context.Context, xb *exchangeBatches, s *txnSlot, rec runtime.Record) error {
	if k.cfg.Encode != nil && encodesValue(k.cfg.Changelog, &rec) {
		var err error
		if rec, err = encoded(ctx, k.cfg.Encode, k.cfg.Name, k.cfg.Topic, rec); err != nil {
			return err
		}
	}
	p := k.cfg.Partition(rec.Key)
	if p < 0 || p >= k.cfg.Partitions {
		return fmt.Errorf("sink %s: partition %d of a record is outside the topic's [0, %d)", k.cfg.Name, p, k.cfg.Partitions)
	}
	b := &xb.parts[p]
	if est := len(rec.Key) + len(rec.Value) + 64; b.Len() > 0 && b.Size()+est > xb.limit {
		k.produceBatch(ctx, xb, s, p)
	}
	before := b.Cap()
	if before == 0 {
		b.Use(k.bufs.take())
	}
	appendChangelogRecord(b, k.cfg.Changelog, &rec)
	xb.open += b.Cap() - before
	switch {
	case b.Size() >= xb.limit:
		k.produceBatch(ctx, xb, s, p)
	case xb.open > xb.budget:
		k.produceBatch(ctx, xb, s, xb.largest())
	}
	return nil
}

// largest returns the partition whose open batch holds the most memory
// (Cap).
func (xb *exchangeBatches) largest() int32 {
	var at int32
	for p := range xb.parts {
		if xb.parts[p].Cap() > xb.parts[at].Cap() {
			at = int32(p)
		}
	}
	return at
}

// appendChangelogRecord appends rec to b as changelogRecord fills a Kafka
// record with it (the same key, value, timestamp and headers, in the same
// order; TestExchangeBatchAsChangelogRecord), without making the Kafka
// record. An upsert sink's -U is dropped by Write before.
func appendChangelogRecord(b *runtime.ExchangeBatch, mode ChangelogMode, rec *runtime.Record) {
	if mode == ChangelogUpsert {
		value := rec.Value
		if rec.Change == runtime.ChangeDelete {
			value = nil // a tombstone
		}
		b.Append(rec.Timestamp, rec.Key, value, len(rec.Headers))
		for _, h := range rec.Headers {
			b.AppendHeader(h.Key, h.Value)
		}
		return
	}
	n := 0
	for _, h := range rec.Headers {
		if h.Key != runtime.ChangeHeader && h.Key != runtime.ChangelogModeHeader {
			n++
		}
	}
	// The change header, and the mode header after it, go into the
	// record's flags (ExchangeBatch.AppendChange): the reader gives them
	// back after the record's own headers, where they were written before.
	inFlags := rec.Change <= runtime.ChangeDelete
	if inFlags {
		b.AppendChange(rec.Timestamp, rec.Key, rec.Value, n, rec.Change, mode == ChangelogUpsertHeader)
	} else {
		n++
		if mode == ChangelogUpsertHeader {
			n++
		}
		b.Append(rec.Timestamp, rec.Key, rec.Value, n)
	}
	for _, h := range rec.Headers {
		if h.Key != runtime.ChangeHeader && h.Key != runtime.ChangelogModeHeader {
			b.AppendHeader(h.Key, h.Value)
		}
	}
	if inFlags {
		return
	}
	b.AppendHeader(runtime.ChangeHeader, changeValue(rec.Change))
	if mode == ChangelogUpsertHeader {
		b.AppendHeader(runtime.ChangelogModeHeader, upsertModeValue)
	}
}

// Header values appendChangelogRecord writes, made once.
var (
	upsertModeValue = []byte(runtime.UpsertChangelogMode)
	insertValue     = []byte(runtime.ChangeInsert.String())
	updateBefValue  = []byte(runtime.ChangeUpdateBefore.String())
	updateAftValue  = []byte(runtime.ChangeUpdateAfter.String())
	deleteValue     = []byte(runtime.ChangeDelete.String())
)

// changeValue returns c's header value ("+I", "-U", "+U" or "-D").
func changeValue(c runtime.ChangeKind) []byte {
	switch c {
	case runtime.ChangeInsert:
		return insertValue
	case runtime.ChangeUpdateBefore:
		return updateBefValue
	case runtime.ChangeUpdateAfter:
		return updateAftValue
	case runtime.ChangeDelete:
		return deleteValue
	}
	return []byte(c.String())
}

// produceBatch produces partition p's exchange batch, if it holds a
// record, into slot s's open transaction as one Kafka record: the value
// the batch, the header runtime.MarkerHeader of value
// runtime.ExchangeBatchMarker, no key (the
// partition is set) and no timestamp (the producer's clock).
func (k *KafkaTxnCommitter) produceBatch(ctx context.Context, xb *exchangeBatches, s *txnSlot, p int32) {
	if kr := k.batchRecord(xb, p); kr != nil {
		k.produce(ctx, s, kr)
	}
}

// batchRecord empties partition p's exchange batch into the Kafka record
// produceBatch produces (nil when the batch holds no record); its Value is
// the batch's buffer, the committer's again once the record's promise ran
// (batchBuffers).
func (k *KafkaTxnCommitter) batchRecord(xb *exchangeBatches, p int32) *kgo.Record {
	b := &xb.parts[p]
	if b.Len() == 0 {
		return nil
	}
	kr := k.newRecord()
	xb.open -= b.Cap()
	kr.Value = b.Take(b.Size())
	kr.Partition = p
	kr.Headers = exchangeBatchHeaders
	return kr
}

// exchangeBatchHeaders are the headers of every exchange batch record
// (franz-go only reads them); finished knows a batch's Kafka record by
// them (isBatchRecord).
var exchangeBatchHeaders = []kgo.RecordHeader{{Key: runtime.MarkerHeader, Value: []byte(runtime.ExchangeBatchMarker)}}

// isBatchRecord reports whether r is a Kafka record produceBatch made:
// its headers are exchangeBatchHeaders itself (not an equal copy), so its
// Value is a batch buffer of the committer's.
func isBatchRecord(r *kgo.Record) bool {
	return len(r.Headers) == 1 && &r.Headers[0] == &exchangeBatchHeaders[0]
}

// freeBatchBuffers is how many finished exchange batch buffers a
// committer keeps for reuse (batchBuffers): with RepartitionBatchBytes 16
// KiB about 1 MiB, as much as its open batches may hold
// (RepartitionOpenBytes); a buffer finished while that many wait is left
// to the garbage collector.
const freeBatchBuffers = 64

// batchBuffers are the buffers of a committer's exchange batches whose
// Kafka records franz-go finished (their produce promise ran: it no
// longer reads them, whether the record was acknowledged, failed or its
// transaction aborted), or that dropBatches emptied, for the next batch
// to encode into (runtime.ExchangeBatch.Use) instead of a new buffer per
// batch: a 16 KiB allocation, its zeroing and its garbage collection, the
// pattern of Kafka's own producer, whose BufferPool takes a finished
// batch's buffer back for the next batch of its size. The last buffer put
// back is taken first (the one most likely still in the CPU's caches). A
// buffer is never taken again before its record's promise ran
// (TestExchangeBatchBufferReusedOnlyOnceFinished). Safe for concurrent
// use (the promises of several producers put buffers).
type batchBuffers struct {
	mu   sync.Mutex
	bufs [][]byte
	// max is the largest capacity kept: a buffer that grew past it (one
	// record larger than the batch limit) is left to the garbage
	// collector, so that the free buffers stay within about
	// freeBatchBuffers batches.
	max int
	// reused counts the buffers take returned.
	reused int
}

// put keeps buf for reuse unless freeBatchBuffers wait already or it is
// larger than max (or f is nil).
func (f *batchBuffers) put(buf []byte) {
	if f == nil || cap(buf) == 0 || cap(buf) > f.max {
		return
	}
	f.mu.Lock()
	if len(f.bufs) < freeBatchBuffers {
		f.bufs = append(f.bufs, buf[:0])
	}
	f.mu.Unlock()
}

// take returns the buffer put back last, nil when none waits (or f is
// nil: the committer batches nothing).
func (f *batchBuffers) take() []byte {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.bufs)
	if n == 0 {
		return nil
	}
	buf := f.bufs[n-1]
	f.bufs[n-1] = nil
	f.bufs = f.bufs[:n-1]
	f.reused++
	return buf
}

// flushBatches produces every partition's exchange batch into slot s's
// open transaction: before a marker (a partition's records precede the
// marker written after them) and before the pre-commit's flush.
func (k *KafkaTxnCommitter) flushBatches(ctx context.Context, s *txnSlot) {
	xb := k.xb
	if xb == nil {
		return
	}
	for p := range xb.parts {
		k.produceBatch(ctx, xb, s, int32(p))
	}
}

// dropBatches empties every partition's exchange batch without producing
// it: the transaction they belonged to ended or is aborted.
func (k *KafkaTxnCommitter) dropBatches() {
	if k.xb == nil {
		return
	}
	for p := range k.xb.parts {
		k.bufs.put(k.xb.parts[p].Take(0)) // never produced: nothing reads it
	}
	k.xb.open = 0
}
