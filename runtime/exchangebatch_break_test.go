package runtime

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"
	"time"
)

// TestExchangeBatchTakeHoldsNoBuffer: after Take a batch holds no buffer
// (Cap 0) until the next Append, which makes one of the hint's capacity;
// Take(0) leaves the next Append to grow its buffer.
func TestExchangeBatchTakeHoldsNoBuffer(t *testing.T) {
	var b ExchangeBatch
	if b.Cap() != 0 {
		t.Fatalf("zero batch holds %d bytes", b.Cap())
	}
	b.Append(time.UnixMilli(1), []byte("k"), []byte("v"), 0)
	size := b.Size()
	first := b.Take(4096)
	if len(first) != size || b.Cap() != 0 || b.Size() != 0 || b.Len() != 0 {
		t.Fatalf("after Take: batch %d bytes (size %d), Cap %d, Size %d, Len %d", len(first), size, b.Cap(), b.Size(), b.Len())
	}
	b.Append(time.UnixMilli(2), []byte("k2"), nil, 0)
	if b.Cap() != 4096 {
		t.Errorf("Append after Take(4096): Cap %d, want 4096", b.Cap())
	}
	second := b.Take(0)
	if b.Cap() != 0 {
		t.Errorf("after Take(0): Cap %d", b.Cap())
	}
	b.Append(time.Time{}, nil, []byte("x"), 0)
	if c := b.Cap(); c == 0 || c >= 4096 {
		t.Errorf("Append after Take(0): Cap %d, want a small buffer", c)
	}
	// Neither taken batch changed.
	for i, tc := range []struct {
		batch []byte
		key   string
		ts    int64
	}{{first, "k", 1}, {second, "k2", 2}} {
		rd, err := NewExchangeBatchReader(tc.batch)
		if err != nil {
			t.Fatal(err)
		}
		var rec ExchangeBatchRecord
		if ok, err := rd.Next(&rec); !ok || err != nil || string(rec.Key) != tc.key || rec.Timestamp.UnixMilli() != tc.ts {
			t.Errorf("batch %d: %v %v key %q ts %v", i, ok, err, rec.Key, rec.Timestamp)
		}
		if ok, err := rd.Next(&rec); ok || err != nil {
			t.Errorf("batch %d: a second record: %v %v", i, ok, err)
		}
	}
}

// TestExchangeBatchHugeLengths: lengths and counts near 2^64 (a key, a
// value, a header count, a header key and a biased header value length)
// are refused as beyond the batch, without an allocation sized by them.
func TestExchangeBatchHugeLengths(t *testing.T) {
	huge := binary.AppendUvarint(nil, math.MaxUint64)
	half := binary.AppendUvarint(nil, 1<<62)
	cat := func(parts ...[]byte) []byte {
		out := []byte{ExchangeBatchVersion}
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		value []byte
	}{
		{"key length 2^64-1", cat([]byte{exchangeKey}, huge, []byte("k"))},
		{"value length 2^64-1", cat([]byte{exchangeValue}, huge, []byte("v"))},
		{"header count 2^62", cat([]byte{0}, half, []byte{1, 'a', 0})},
		{"header count 2^64-1", cat([]byte{0}, huge, []byte{1, 'a', 0})},
		{"header key length 2^64-1", cat([]byte{0, 1}, huge, []byte{'a', 0})},
		{"header value length 2^64-1", cat([]byte{0, 1, 1, 'a'}, huge, []byte{'v'})},
		{"header value length 2^62", cat([]byte{0, 1, 1, 'a'}, half, []byte{'v'})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rec ExchangeBatchRecord
			var err error
			allocs := testing.AllocsPerRun(10, func() {
				rd, nerr := NewExchangeBatchReader(tc.value)
				if nerr != nil {
					err = nerr
					return
				}
				_, err = rd.Next(&rec)
			})
			if !errors.Is(err, ErrExchangeBatch) {
				t.Fatalf("err %v, want ErrExchangeBatch", err)
			}
			// The error's message only (fmt.Errorf and its offset).
			if !raceEnabled && allocs > 4 { // the race detector allocates for itself
				t.Errorf("%v allocations per decode", allocs)
			}
		})
	}
}
