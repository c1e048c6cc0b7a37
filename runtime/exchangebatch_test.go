package runtime

import (
	"bytes"
	"errors"
	"slices"
	"testing"
	"time"
)

// exchangeRecords are records of every shape a batch must keep apart: nil
// and empty keys, values and header values, no timestamp, negative and
// large timestamps, no headers and several.
var exchangeRecords = []ExchangeBatchRecord{
	{Timestamp: time.UnixMilli(1700000000123), Key: []byte("user-1"), Value: []byte(`{"user":"a"}`),
		Headers: []Header{{Key: ChangeHeader, Value: []byte("+I")}}},
	{Key: nil, Value: []byte("v"), Headers: nil},
	{Timestamp: time.UnixMilli(-5), Key: []byte{}, Value: []byte{}, Headers: []Header{{Key: "h", Value: []byte{}}, {Key: "", Value: nil}}},
	{Timestamp: time.UnixMilli(1 << 50), Key: []byte("k"), Value: nil,
		Headers: []Header{{Key: "x", Value: []byte("1")}, {Key: ChangeHeader, Value: []byte("-D")}, {Key: ChangelogModeHeader, Value: []byte("upsert")}}},
}

func encodeExchange(recs []ExchangeBatchRecord) []byte {
	var b ExchangeBatch
	for _, r := range recs {
		b.Append(r.Timestamp, r.Key, r.Value, len(r.Headers))
		for _, h := range r.Headers {
			b.AppendHeader(h.Key, h.Value)
		}
	}
	return b.Take(0)
}

// decodeExchange reads every record of value (copies, as Next reuses
// rec.Headers).
func decodeExchange(value []byte) ([]ExchangeBatchRecord, error) {
	rd, err := NewExchangeBatchReader(value)
	if err != nil {
		return nil, err
	}
	var out []ExchangeBatchRecord
	var rec ExchangeBatchRecord
	for {
		ok, err := rd.Next(&rec)
		if err != nil {
			return out, err
		}
		if !ok {
			return out, nil
		}
		c := rec
		c.Headers = slices.Clone(rec.Headers)
		out = append(out, c)
	}
}

func sameExchange(a, b ExchangeBatchRecord) bool {
	same := func(x, y []byte) bool { return (x == nil) == (y == nil) && bytes.Equal(x, y) }
	if !a.Timestamp.Equal(b.Timestamp) || !same(a.Key, b.Key) || !same(a.Value, b.Value) || len(a.Headers) != len(b.Headers) {
		return false
	}
	for i := range a.Headers {
		if a.Headers[i].Key != b.Headers[i].Key || !same(a.Headers[i].Value, b.Headers[i].Value) {
			return false
		}
	}
	return true
}

// TestExchangeBatchRoundTrip: a batch decodes to the records appended, in
// order, with nil and empty kept apart; the value starts with the version
// byte; Take empties the batch.
func TestExchangeBatchRoundTrip(t *testing.T) {
	var b ExchangeBatch
	if b.Size() != 0 || b.Len() != 0 || b.Take(0) != nil {
		t.Fatal("zero batch not empty")
	}
	v := encodeExchange(exchangeRecords)
	if v[0] != ExchangeBatchVersion {
		t.Fatalf("first byte %d, want the version %d", v[0], ExchangeBatchVersion)
	}
	got, err := decodeExchange(v)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(exchangeRecords) {
		t.Fatalf("%d records, want %d", len(got), len(exchangeRecords))
	}
	for i := range got {
		if !sameExchange(got[i], exchangeRecords[i]) {
			t.Errorf("record %d: %+v, want %+v", i, got[i], exchangeRecords[i])
		}
	}
	// Sub-ms precision is Kafka's: dropped.
	b.Append(time.Unix(1, 999_999), nil, nil, 0)
	if b.Len() != 1 {
		t.Fatalf("Len %d", b.Len())
	}
	got, err = decodeExchange(b.Take(64))
	if err != nil || len(got) != 1 || !got[0].Timestamp.Equal(time.UnixMilli(1000)) {
		t.Fatalf("%+v %v", got, err)
	}
	if b.Len() != 0 || b.Size() != 0 {
		t.Fatalf("after Take: Len %d Size %d", b.Len(), b.Size())
	}
}

// TestExchangeBatchRefuses: another version, an empty value, unknown
// flags, truncations and lengths beyond the end are errors wrapping
// ErrExchangeBatch, never records.
func TestExchangeBatchRefuses(t *testing.T) {
	good := encodeExchange(exchangeRecords[:1])
	for _, tc := range []struct {
		name  string
		value []byte
	}{
		{"empty", nil},
		{"version 3", append([]byte{3}, good[1:]...)},
		{"version 0", append([]byte{0}, good[1:]...)},
		{"unknown flag", []byte{ExchangeBatchVersion, 0x80, 0}},
		{"version 1 with a change kind", []byte{1, exchangeChange, 0}},
		{"version 1 with the upsert mode", []byte{1, exchangeChange | exchangeUpsertMode, 0}},
		{"upsert mode without a change kind", []byte{ExchangeBatchVersion, exchangeUpsertMode, 0}},
		{"kind bits without a change kind", []byte{ExchangeBatchVersion, 2 << exchangeKindShift, 0}},
		{"no header count", []byte{ExchangeBatchVersion, 0}},
		{"key beyond the end", []byte{ExchangeBatchVersion, exchangeKey, 5, 'a'}},
		{"header count beyond the end", []byte{ExchangeBatchVersion, 0, 100, 0, 0}},
		{"truncated", good[:len(good)-1]},
		{"bad varint", []byte{ExchangeBatchVersion, exchangeTime, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeExchange(tc.value)
			if !errors.Is(err, ErrExchangeBatch) {
				t.Fatalf("records %+v, err %v; want ErrExchangeBatch", got, err)
			}
		})
	}
}

// TestExchangeBatchHeaderKeysDoNotAllocate: decoding a record with the
// change header reuses rec.Headers and allocates nothing.
func TestExchangeBatchHeaderKeysDoNotAllocate(t *testing.T) {
	v := encodeExchange(exchangeRecords[:1])
	rec := ExchangeBatchRecord{Headers: make([]Header, 0, 4)}
	allocs := testing.AllocsPerRun(100, func() {
		rd, err := NewExchangeBatchReader(v)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := rd.Next(&rec); !ok || err != nil {
			t.Fatal(ok, err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per decode, want 0", allocs)
	}
}

// FuzzExchangeBatchReader feeds the reader arbitrary values: it never
// panics, an error wraps ErrExchangeBatch, and what it accepts encodes
// back to a batch that decodes to the same records.
func FuzzExchangeBatchReader(f *testing.F) {
	f.Add(encodeExchange(exchangeRecords))
	f.Add(encodeExchange(exchangeRecords[1:2]))
	f.Add([]byte{ExchangeBatchVersion})
	f.Add([]byte{2, 0, 0})
	f.Add([]byte{1, exchangeChange, 0})
	var change ExchangeBatch
	change.AppendChange(time.UnixMilli(7), []byte("k"), []byte("v"), 1, ChangeUpdateBefore, true)
	change.AppendHeader("h", nil)
	change.AppendChange(time.Time{}, nil, nil, 0, ChangeDelete, false)
	f.Add(change.Take(0))
	f.Add([]byte(`{"user":"a"}`))
	f.Fuzz(func(t *testing.T, value []byte) {
		recs, err := decodeExchange(value)
		if err != nil {
			if !errors.Is(err, ErrExchangeBatch) {
				t.Fatalf("error %v does not wrap ErrExchangeBatch", err)
			}
			return
		}
		back, err := decodeExchange(encodeExchange(recs))
		if len(recs) == 0 {
			// An empty batch encodes to nothing, which is no batch.
			return
		}
		if err != nil || len(back) != len(recs) {
			t.Fatalf("%d records re-encode to %d: %v", len(recs), len(back), err)
		}
		for i := range recs {
			if !sameExchange(recs[i], back[i]) {
				t.Fatalf("record %d: %+v re-encodes to %+v", i, recs[i], back[i])
			}
		}
	})
}

// TestExchangeBatchIsNoMarker: an exchange batch's headers are told from a
// marker's and a data record's, and DecodeMarker (what a kstreamd before
// exchange batches reads them with) refuses them as a malformed marker,
// so such a daemon fails the unit instead of reading or skipping a batch
// as a data record.
func TestExchangeBatchIsNoMarker(t *testing.T) {
	batch := []Header{{Key: MarkerHeader, Value: []byte(ExchangeBatchMarker)}}
	if !IsExchangeBatch(batch) {
		t.Error("batch headers not an exchange batch")
	}
	wm := Marker{Kind: MarkerWatermark, Unit: "0/1", Watermark: time.UnixMilli(5)}.Record()
	for _, hs := range [][]Header{nil, wm.Headers, {{Key: ChangeHeader, Value: []byte("+I")}}} {
		if IsExchangeBatch(hs) {
			t.Errorf("%v taken for an exchange batch", hs)
		}
	}
	_, ok, err := DecodeMarker(batch, encodeExchange(exchangeRecords))
	if !ok || err == nil {
		t.Errorf("DecodeMarker of a batch: marker %v, err %v; want a malformed marker", ok, err)
	}
}

// TestExchangeBatchUse: an empty batch given a buffer encodes into it
// from its first byte (stale bytes past its length never show), Take
// hands it back with the batch, and a batch that holds a buffer ignores
// Use.
func TestExchangeBatchUse(t *testing.T) {
	var want ExchangeBatch
	want.Append(time.UnixMilli(7), []byte("k"), []byte("v"), 1)
	want.AppendHeader("h", []byte("x"))
	wantBytes := want.Take(0)

	buf := bytes.Repeat([]byte{0xff}, 64)
	var b ExchangeBatch
	b.Use(buf[:5]) // its length is ignored: only its capacity is used
	if b.Cap() != 64 || b.Size() != 0 {
		t.Fatalf("after Use: Cap %d Size %d, want 64 and 0", b.Cap(), b.Size())
	}
	b.Append(time.UnixMilli(7), []byte("k"), []byte("v"), 1)
	b.Use(make([]byte, 0, 128)) // holds a buffer: ignored
	b.AppendHeader("h", []byte("x"))
	got := b.Take(0)
	if &got[0] != &buf[0] || !bytes.Equal(got, wantBytes) {
		t.Fatalf("Take after Use: %x at %p, want %x in the given buffer %p", got, &got[0], wantBytes, &buf[0])
	}
	b.Use(nil) // no capacity: the next Append makes a buffer as before
	b.Append(time.Time{}, nil, []byte("v"), 0)
	if got := b.Take(0); len(got) == 0 || got[0] != ExchangeBatchVersion {
		t.Fatalf("Append after Use(nil): %x", got)
	}
}

// TestExchangeBatchChangeInFlags: AppendChange writes a record's change
// kind (and the upsert changelog mode) as bits of its flags byte, and the
// reader gives the record back exactly the headers the version-1 form
// wrote (its own, then ChangeHeader with the kind's short form, then
// ChangelogModeHeader "upsert"); a version-1 batch written with the
// headers still reads the same.
func TestExchangeBatchChangeInFlags(t *testing.T) {
	for _, kind := range []ChangeKind{ChangeInsert, ChangeUpdateBefore, ChangeUpdateAfter, ChangeDelete} {
		for _, upsert := range []bool{false, true} {
			want := ExchangeBatchRecord{Timestamp: time.UnixMilli(42), Key: []byte("k"), Value: []byte("v"),
				Headers: []Header{{Key: "h", Value: []byte("1")}, {Key: ChangeHeader, Value: []byte(kind.String())}}}
			if upsert {
				want.Headers = append(want.Headers, Header{Key: ChangelogModeHeader, Value: []byte(UpsertChangelogMode)})
			}
			var b ExchangeBatch
			b.AppendChange(want.Timestamp, want.Key, want.Value, 1, kind, upsert)
			b.AppendHeader("h", []byte("1"))
			v := b.Take(0)
			flags := byte(exchangeKey|exchangeValue|exchangeTime|exchangeChange) | byte(kind)<<exchangeKindShift
			if upsert {
				flags |= exchangeUpsertMode
			}
			exact := []byte{ExchangeBatchVersion, flags, 84, 1, 'k', 1, 'v', 1, 1, 'h', 2, '1'}
			if !bytes.Equal(v, exact) {
				t.Fatalf("%s upsert=%v: encoded %v, want %v", kind, upsert, v, exact)
			}
			old := encodeExchange([]ExchangeBatchRecord{want})
			old[0] = 1 // the version-1 form: the same record with its headers written out
			if len(old)-len(v) < 19 {
				t.Fatalf("%s upsert=%v: %d bytes, the header form %d", kind, upsert, len(v), len(old))
			}
			for _, value := range [][]byte{v, old} {
				got, err := decodeExchange(value)
				if err != nil || len(got) != 1 || !sameExchange(got[0], want) {
					t.Fatalf("%s upsert=%v: version %d read %+v %v, want %+v", kind, upsert, value[0], got, err, want)
				}
			}
		}
	}
}
