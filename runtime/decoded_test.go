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
