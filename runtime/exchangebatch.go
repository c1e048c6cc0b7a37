package runtime

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// ExchangeBatchMarker is the MarkerHeader value that marks a Kafka record
// of a cluster-mode repartition topic whose value is an exchange batch:
// several data records in one Kafka record (docs/scale-out.md, "The
// exchange batch format"). The record has no other header. A repartition
// record without it is one data record (the format before batches, still
// read) or a marker. A kstreamd from before exchange batches takes a batch
// for a malformed marker (DecodeMarker: a marker without a unit) and fails
// the unit, which restarts until its daemon is upgraded, rather than
// reading or skipping it as a data record: during a rolling upgrade output
// is delayed, never lost.
const ExchangeBatchMarker = "batch"

// IsExchangeBatch reports whether headers mark an exchange batch (a
// MarkerHeader of value ExchangeBatchMarker).
func IsExchangeBatch(headers []Header) bool {
	for _, h := range headers {
		if h.Key == MarkerHeader {
			return string(h.Value) == ExchangeBatchMarker
		}
	}
	return false
}

// ExchangeBatchVersion is the version byte that starts the value of an
// exchange batch. A reader refuses a version it does not know
// (ErrExchangeBatch): a batch written by a newer kstreamd is never read as
// something else. Version 2 adds a record's change kind in its flags
// (exchangeChange); this kstreamd writes 2 and reads 1 and 2, and a
// kstreamd that reads only 1 fails the unit on a version-2 batch (it
// restarts until its daemon is upgraded: output is delayed, never lost).
const ExchangeBatchVersion byte = 2

// exchangeBatchVersion1 is the version before the change kind in the
// flags: its records carry the change kind as a header, and its flags
// have only the three low bits.
const exchangeBatchVersion1 byte = 1

// ErrExchangeBatch is wrapped by ExchangeBatchReader's errors: the value
// is not an exchange batch of ExchangeBatchVersion (another version,
// truncated, or a length beyond its end). A repartition topic is written by
// kstreamd only, so its reader fails rather than skipping the record.
var ErrExchangeBatch = errors.New("runtime: malformed exchange batch")

// Exchange batch layout (ExchangeBatch, ExchangeBatchReader): the version
// byte, then each record in write order:
//
//	flags   byte: bit 0 the key is not nil, bit 1 the value is not nil,
//	        bit 2 the record has a timestamp; version 2 also: bit 3 the
//	        record's change kind is bits 4-5 (runtime.ChangeKind: 0 +I,
//	        1 -U, 2 +U, 3 -D), bit 6 (only with bit 3) the record has an
//	        upsert changelog mode header; the other bits are 0
//	ts      varint (zig-zag) ms since the epoch, if bit 2
//	key     uvarint length, bytes, if bit 0
//	value   uvarint length, bytes, if bit 1
//	headers uvarint count, then per header: uvarint key length, key
//	        bytes, uvarint (value length + 1, 0 for a nil value), bytes
//
// A record is what a Kafka record of the format before batches carried:
// key, value, headers and a timestamp of Kafka's ms precision; a record
// without a timestamp takes the batch's Kafka timestamp (the producer's
// clock, as its own Kafka record would have). A record with bit 3 carries
// the change header (ChangeHeader: the kind's short form) in its flags
// instead of as a header of ~20 bytes, and with bit 6 the changelog mode
// header (ChangelogModeHeader: UpsertChangelogMode) too: the reader
// gives it back those headers after the record's own, in that order,
// exactly where a version-1 record had them.
const (
	exchangeKey        = 1 << 0
	exchangeValue      = 1 << 1
	exchangeTime       = 1 << 2
	exchangeChange     = 1 << 3
	exchangeKindShift  = 4
	exchangeKindMask   = 3 << exchangeKindShift
	exchangeUpsertMode = 1 << 6

	exchangeFlagsV1 = exchangeKey | exchangeValue | exchangeTime
	exchangeFlagsV2 = exchangeFlagsV1 | exchangeChange | exchangeKindMask | exchangeUpsertMode
)

// ExchangeBatch encodes the records of one exchange batch. The zero value
// is empty; Append adds a record, AppendHeader its headers. Not safe for
// concurrent use.
type ExchangeBatch struct {
	buf     []byte
	n       int // records appended
	headers int // headers the last record still expects
	hint    int // capacity of the buffer the next Append makes (Take)
}

// Append starts the next record: key and value (nil stays nil, empty
// stays empty), ts (the zero time: none; else truncated to ms) and the
// number of headers AppendHeader adds next.
func (b *ExchangeBatch) Append(ts time.Time, key, value []byte, headers int) {
	b.append(ts, key, value, headers, 0)
}

// AppendChange is Append for a record of a changelog whose change kind is
// change (ChangeInsert to ChangeDelete) and, with upsertMode, whose
// changelog mode header says UpsertChangelogMode: the reader gives the
// record its ChangeHeader and then its ChangelogModeHeader after the
// headers AppendHeader adds (which must include neither), as if they
// had been appended last, for two bits of the flags byte instead of
// ~20 bytes each. Another kind panics (the caller writes it as a header).
func (b *ExchangeBatch) AppendChange(ts time.Time, key, value []byte, headers int, change ChangeKind, upsertMode bool) {
	if change > ChangeDelete {
		panic(fmt.Sprintf("runtime: exchange batch: change kind %d", change))
	}
	flags := byte(exchangeChange) | byte(change)<<exchangeKindShift
	if upsertMode {
		flags |= exchangeUpsertMode
	}
	b.append(ts, key, value, headers, flags)
}

func (b *ExchangeBatch) append(ts time.Time, key, value []byte, headers int, flags byte) {
	if len(b.buf) == 0 {
		if cap(b.buf) == 0 && b.hint > 0 {
			b.buf = make([]byte, 0, b.hint)
		}
		b.buf = append(b.buf, ExchangeBatchVersion)
	}
	if key != nil {
		flags |= exchangeKey
	}
	if value != nil {
		flags |= exchangeValue
	}
	if !ts.IsZero() {
		flags |= exchangeTime
	}
	b.buf = append(b.buf, flags)
	if flags&exchangeTime != 0 {
		b.buf = binary.AppendVarint(b.buf, ts.UnixMilli())
	}
	if key != nil {
		b.buf = binary.AppendUvarint(b.buf, uint64(len(key)))
		b.buf = append(b.buf, key...)
	}
	if value != nil {
		b.buf = binary.AppendUvarint(b.buf, uint64(len(value)))
		b.buf = append(b.buf, value...)
	}
	b.buf = binary.AppendUvarint(b.buf, uint64(headers))
	b.n++
	b.headers = headers
}

// AppendHeader adds a header to the record Append started; call it as
// many times as Append was told.
func (b *ExchangeBatch) AppendHeader(key string, value []byte) {
	b.buf = binary.AppendUvarint(b.buf, uint64(len(key)))
	b.buf = append(b.buf, key...)
	if value == nil {
		b.buf = append(b.buf, 0)
	} else {
		b.buf = binary.AppendUvarint(b.buf, uint64(len(value))+1)
		b.buf = append(b.buf, value...)
	}
	b.headers--
}

// Len returns the number of records appended since the last Take.
func (b *ExchangeBatch) Len() int { return b.n }

// Size returns the encoded size in bytes (0 when empty).
func (b *ExchangeBatch) Size() int { return len(b.buf) }

// Cap returns the bytes b's buffer holds (its capacity, 0 when empty):
// the memory an open batch takes.
func (b *ExchangeBatch) Cap() int { return cap(b.buf) }

// Use gives an empty b (Len 0, Cap 0: new, or after Take) buf's capacity
// to encode into: the next Append writes from buf[0] on instead of making
// a buffer, and a Take hands buf back with the batch (a buffer of an
// earlier batch that nothing reads any more, reused: no allocation, and
// no zeroing of a fresh buffer, per batch). It does nothing when b holds
// a buffer or buf has no capacity.
func (b *ExchangeBatch) Use(buf []byte) {
	if cap(b.buf) == 0 && b.n == 0 && cap(buf) > 0 {
		b.buf = buf[:0]
	}
}

// Take returns the encoded batch (nil when empty) and empties b; the
// bytes are the caller's. b then holds no buffer (Cap 0): the next Append
// makes one of capacity hint (unless Use gives it one), so that an idle
// batch holds no memory.
func (b *ExchangeBatch) Take(hint int) []byte {
	if b.n == 0 {
		return nil
	}
	out := b.buf
	b.buf, b.n, b.headers, b.hint = nil, 0, 0, hint
	return out
}

// ExchangeBatchRecord is one record of an exchange batch as
// ExchangeBatchReader.Next returns it: Key, Value and the header values
// point into the batch (capacity-limited: appending copies); Timestamp is
// the zero time when the record had none.
type ExchangeBatchRecord struct {
	Timestamp time.Time
	Key       []byte
	Value     []byte
	Headers   []Header
}

// ExchangeBatchReader reads the records of one exchange batch in order.
type ExchangeBatchReader struct {
	b     []byte
	off   int
	flags byte // the flags bits the batch's version allows
}

// NewExchangeBatchReader returns a reader of value, an exchange batch; it
// fails (wrapping ErrExchangeBatch) when value is empty or starts with
// another version than ExchangeBatchVersion.
func NewExchangeBatchReader(value []byte) (ExchangeBatchReader, error) {
	if len(value) == 0 {
		return ExchangeBatchReader{}, fmt.Errorf("%w: empty", ErrExchangeBatch)
	}
	switch value[0] {
	case ExchangeBatchVersion:
		return ExchangeBatchReader{b: value, off: 1, flags: exchangeFlagsV2}, nil
	case exchangeBatchVersion1:
		return ExchangeBatchReader{b: value, off: 1, flags: exchangeFlagsV1}, nil
	}
	return ExchangeBatchReader{}, fmt.Errorf("%w: version %d, this kstreamd reads versions %d and %d", ErrExchangeBatch, value[0], exchangeBatchVersion1, ExchangeBatchVersion)
}

// Next decodes the next record into rec (its Headers slice is reused) and
// reports false at the end of the batch. An error wraps ErrExchangeBatch
// and names the byte offset; the reader is then done.
func (r *ExchangeBatchReader) Next(rec *ExchangeBatchRecord) (bool, error) {
	if r.off >= len(r.b) {
		return false, nil
	}
	start := r.off
	ok, err := r.next(rec)
	if err != nil {
		r.off = len(r.b)
		return false, fmt.Errorf("%w: record at byte %d: %w", ErrExchangeBatch, start, err)
	}
	return ok, nil
}

var (
	errExchangeFlags  = errors.New("unknown flags")
	errExchangeVarint = errors.New("bad varint")
	errExchangeLength = errors.New("length beyond the batch")
)

func (r *ExchangeBatchReader) next(rec *ExchangeBatchRecord) (bool, error) {
	flags := r.b[r.off]
	r.off++
	if flags&^r.flags != 0 || flags&(exchangeChange|exchangeUpsertMode) == exchangeUpsertMode ||
		flags&exchangeChange == 0 && flags&exchangeKindMask != 0 {
		return false, errExchangeFlags
	}
	rec.Timestamp, rec.Key, rec.Value, rec.Headers = time.Time{}, nil, nil, rec.Headers[:0]
	if flags&exchangeTime != 0 {
		ms, n := binary.Varint(r.b[r.off:])
		if n <= 0 {
			return false, errExchangeVarint
		}
		r.off += n
		rec.Timestamp = time.UnixMilli(ms)
	}
	var err error
	if flags&exchangeKey != 0 {
		if rec.Key, err = r.bytes(0); err != nil {
			return false, err
		}
	}
	if flags&exchangeValue != 0 {
		if rec.Value, err = r.bytes(0); err != nil {
			return false, err
		}
	}
	n, err := r.uvarint()
	if err != nil {
		return false, err
	}
	// Each header takes at least two bytes: a count beyond that is no
	// batch, and must not size an allocation.
	if n > uint64(len(r.b)-r.off)/2 {
		return false, errExchangeLength
	}
	for range n {
		k, err := r.bytes(0)
		if err != nil {
			return false, err
		}
		v, err := r.bytes(1)
		if err != nil {
			return false, err
		}
		rec.Headers = append(rec.Headers, Header{Key: headerKey(k), Value: v})
	}
	if flags&exchangeChange != 0 {
		kind := (flags & exchangeKindMask) >> exchangeKindShift
		rec.Headers = append(rec.Headers, Header{Key: ChangeHeader, Value: exchangeChangeValues[kind]})
		if flags&exchangeUpsertMode != 0 {
			rec.Headers = append(rec.Headers, Header{Key: ChangelogModeHeader, Value: exchangeUpsertModeValue})
		}
	}
	return true, nil
}

// The header values a version-2 record's flags stand for, shared by every
// record read (capacity-limited, as the values that point into a batch:
// appending copies; nothing writes into a record's header values).
var (
	exchangeChangeValues = [4][]byte{
		ChangeInsert:       exchangeValueOf(ChangeInsert.String()),
		ChangeUpdateBefore: exchangeValueOf(ChangeUpdateBefore.String()),
		ChangeUpdateAfter:  exchangeValueOf(ChangeUpdateAfter.String()),
		ChangeDelete:       exchangeValueOf(ChangeDelete.String()),
	}
	exchangeUpsertModeValue = exchangeValueOf(UpsertChangelogMode)
)

func exchangeValueOf(s string) []byte { b := []byte(s); return b[:len(b):len(b)] }

// bytes reads a uvarint length minus bias and that many bytes; with bias
// 1 a length of 0 is a nil slice.
func (r *ExchangeBatchReader) bytes(bias uint64) ([]byte, error) {
	n, err := r.uvarint()
	if err != nil {
		return nil, err
	}
	if bias == 1 {
		if n == 0 {
			return nil, nil
		}
		n--
	}
	if n > uint64(len(r.b)-r.off) {
		return nil, errExchangeLength
	}
	end := r.off + int(n)
	out := r.b[r.off:end:end]
	r.off = end
	return out, nil
}

func (r *ExchangeBatchReader) uvarint() (uint64, error) {
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		return 0, errExchangeVarint
	}
	r.off += n
	return v, nil
}

// headerKey returns k as a string, without an allocation for the headers
// every repartition record carries.
func headerKey(k []byte) string {
	switch string(k) {
	case ChangeHeader:
		return ChangeHeader
	case ChangelogModeHeader:
		return ChangelogModeHeader
	}
	return string(k)
}
