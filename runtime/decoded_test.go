package runtime

import (
	"context"
	"testing"
)

// TestRecordDecodedStaysInItsChain: a decoded value is returned while the
// record holds the bytes it was attached for (copies included), not once
// the value is replaced (even by equal bytes elsewhere), and a Writer
// drops it: it never crosses a channel.
func TestRecordDecodedStaysInItsChain(t *testing.T) {
	rec := Record{Value: []byte(`{"a":1}`)}
	rec.SetDecoded("decoded")
	cp := rec
	if v, ok := cp.Decoded(); !ok || v != "decoded" {
		t.Fatalf("copy: Decoded() = %v, %v", v, ok)
	}
	cp.Value = []byte(`{"a":1}`)
	if _, ok := cp.Decoded(); ok {
		t.Error("a record given other bytes still returns the decoded value")
	}
	var empty Record
	empty.SetDecoded(nil)
	if v, ok := empty.Decoded(); !ok || v != nil {
		t.Errorf("empty value: Decoded() = %v, %v; want nil, true", v, ok)
	}
	ch := NewChannel(4)
	w := NewWriter([]Channel{ch}, ForwardPartitioner{})
	if err := w.Emit(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	got := (<-ch).Record
	if _, ok := got.Decoded(); ok || string(got.Value) != `{"a":1}` {
		t.Errorf("record after a channel: %s, Decoded ok %v; want the value without its decoding", got.Value, ok)
	}
}

// TestDecodedSlot: a record given a slot reads its decoded form back
// until the slot holds another record's; then it reads nothing, and
// TakeDecoded copies a decoded form only to a record of the same bytes.
func TestDecodedSlot(t *testing.T) {
	var slot DecodedSlot
	a := Record{Value: []byte(`{"a":1}`)}
	b := Record{Value: []byte(`{"a":1}`)}
	a.SetDecodedIn(&slot, ValidJSON{})
	if v, ok := a.Decoded(); !ok || v != any(ValidJSON{}) {
		t.Fatalf("a: Decoded() = %v, %v", v, ok)
	}
	b.SetDecodedIn(&slot, "b")
	if v, ok := a.Decoded(); ok {
		t.Errorf("a still reads %v after the slot moved to b", v)
	}
	if v, ok := b.Decoded(); !ok || v != "b" {
		t.Errorf("b: Decoded() = %v, %v", v, ok)
	}
	var c Record
	c.Value = b.Value
	c.TakeDecoded(&b)
	if v, ok := c.Decoded(); !ok || v != "b" {
		t.Errorf("TakeDecoded of the same bytes: %v, %v", v, ok)
	}
	d := Record{Value: []byte(`{"a":1}`)}
	d.TakeDecoded(&b)
	if _, ok := d.Decoded(); ok {
		t.Error("TakeDecoded gave equal but other bytes the decoded form")
	}
}
