package sink

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// BufferedState is the name of the BufferingSink's operator list state (even
// split); each entry is one buffered record as JSON.
const BufferedState = "buffering-sink-elements"

// bufferedRecord is a buffered record as stored in a checkpoint.
type bufferedRecord struct {
	Key       []byte           `json:"key,omitempty"`
	Value     []byte           `json:"value"`
	Timestamp time.Time        `json:"timestamp"`
	Headers   []runtime.Header `json:"headers,omitempty"`
	// Change is the record's changelog kind; absent (an insert) in
	// checkpoints written before changelogs, which restore as inserts.
	Change runtime.ChangeKind `json:"change,omitempty"`
}

// BufferingSink is Flink's BufferingSink example as a sink for systems
// without transactions: records are buffered in memory and written when the
// buffer reaches Threshold records or a checkpoint completes; the buffer is
// stored in operator list state at every snapshot and written after a
// restore, so a crash loses nothing. Its guarantee is at-least-once, not
// exactly-once: records written before a crash but after the last completed
// checkpoint are written again after the restore. It implements
// runtime.Operator, runtime.Snapshotter and runtime.CheckpointListener over an
// at-least-once KafkaSink that does the writing.
type BufferingSink struct {
	out       *KafkaSink
	threshold int
	buffer    []runtime.Record
	restored  [][]byte
}

// NewBufferingSink returns a buffering sink subtask writing through out,
// holding up to threshold records (>= 1), restoring the entries of its
// BufferedState share (nil for a fresh start).
func NewBufferingSink(out *KafkaSink, threshold int, restored map[string]state.OperatorListSnapshot) *BufferingSink {
	b := &BufferingSink{out: out, threshold: max(threshold, 1)}
	if r, ok := restored[BufferedState]; ok {
		b.restored = r.Entries
	}
	return b
}

// Open implements runtime.Operator: it opens the writer and buffers the
// restored records again.
func (b *BufferingSink) Open(ctx context.Context) error {
	if err := b.out.Open(ctx); err != nil {
		return err
	}
	for _, e := range b.restored {
		var r bufferedRecord
		if err := json.Unmarshal(e, &r); err != nil {
			return fmt.Errorf("sink %s: restore buffered record: %w", b.out.cfg.Name, err)
		}
		b.buffer = append(b.buffer, runtime.Record{Key: r.Key, Value: r.Value, Timestamp: r.Timestamp, Headers: r.Headers, Change: r.Change})
	}
	b.restored = nil
	return nil
}

// Len returns the number of buffered records.
func (b *BufferingSink) Len() int { return len(b.buffer) }

// ProcessRecord implements runtime.Operator.
func (b *BufferingSink) ProcessRecord(ctx context.Context, in int, rec runtime.Record) error {
	b.buffer = append(b.buffer, rec)
	if len(b.buffer) >= b.threshold {
		return b.flush(ctx)
	}
	return nil
}

// flush writes the buffer and waits for every acknowledgement.
func (b *BufferingSink) flush(ctx context.Context) error {
	for _, r := range b.buffer {
		if err := b.out.ProcessRecord(ctx, 0, r); err != nil {
			return err
		}
	}
	b.buffer = b.buffer[:0]
	return b.out.EndInput(ctx) // Flush: waits for every acknowledgement
}

// SnapshotState implements runtime.Snapshotter: records already handed to
// the writer are acknowledged first; the buffer goes into the checkpoint.
func (b *BufferingSink) SnapshotState(ctx context.Context, bar *runtime.Barrier) (runtime.SnapshotFinisher, error) {
	if _, err := b.out.SnapshotState(ctx, bar); err != nil {
		return nil, err
	}
	entries := make([][]byte, 0, len(b.buffer))
	for _, r := range b.buffer {
		e, err := json.Marshal(bufferedRecord{Key: r.Key, Value: r.Value, Timestamp: r.Timestamp, Headers: r.Headers, Change: r.Change})
		if err != nil {
			return nil, err
		}
		entries = append(entries, e)
	}
	raw, err := json.Marshal(checkpoint.TaskState{Operator: map[string]state.OperatorListSnapshot{
		BufferedState: {Mode: state.ModeSplit, Entries: entries},
	}})
	if err != nil {
		return nil, err
	}
	return func(context.Context) (runtime.TaskSnapshot, error) { return runtime.TaskSnapshot{State: raw}, nil }, nil
}

// NotifyCheckpointComplete implements runtime.CheckpointListener: the
// buffer is written.
func (b *BufferingSink) NotifyCheckpointComplete(ctx context.Context, _ int64) error {
	return b.flush(ctx)
}

// NotifyCheckpointAborted implements runtime.CheckpointListener.
func (b *BufferingSink) NotifyCheckpointAborted(context.Context, int64) {}

// EndInput implements runtime.Operator: the buffer is written.
func (b *BufferingSink) EndInput(ctx context.Context) error { return b.flush(ctx) }

// Close implements runtime.Operator.
func (b *BufferingSink) Close() error { return b.out.Close() }
