package runtime

import (
	"testing"
)

// FuzzDecodeMarker feeds DecodeMarker arbitrary marker headers and values:
// it never panics, a record without the marker header is data, and a
// marker it accepts encodes back (Marker.Record) to one that decodes to
// the same marker. Seeds are added below.
func FuzzDecodeMarker(f *testing.F) {
	f.Add(true, "watermark", "0/1", []byte("1700000000000"))
	f.Add(true, "idle", "2/11", []byte{})
	f.Add(true, "active", "", []byte(nil))
	f.Add(true, "end", "0/0", []byte("x"))
	f.Add(false, "", "", []byte(`{"user":"a"}`))
	f.Fuzz(func(t *testing.T, marker bool, kind, unit string, value []byte) {
		var headers []Header
		if marker {
			headers = append(headers, Header{Key: MarkerHeader, Value: []byte(kind)})
		}
		headers = append(headers, Header{Key: MarkerUnitHeader, Value: []byte(unit)})
		m, ok, err := DecodeMarker(headers, value)
		if ok != marker {
			t.Fatalf("marker header %v, decoded as a marker %v", marker, ok)
		}
		if !ok || err != nil {
			return
		}
		rec := m.Record()
		back, ok, err := DecodeMarker(rec.Headers, rec.Value)
		if err != nil || !ok || back != m {
			t.Fatalf("%+v encodes to %+v, which decodes to %+v %v %v", m, rec, back, ok, err)
		}
	})
}
