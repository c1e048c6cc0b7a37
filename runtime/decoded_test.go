package runtime

import (
	"context"
	"fmt"
	"slices"
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

// decodedRecorder records, for each record it processes, its value and
// whether it reads ValidJSON as its decoded form.
type decodedRecorder struct{ seen []string }

func (r *decodedRecorder) Open(context.Context) error { return nil }
func (r *decodedRecorder) ProcessRecord(_ context.Context, _ int, rec Record) error {
	v, ok := rec.Decoded()
	_, valid := v.(ValidJSON)
	r.seen = append(r.seen, fmt.Sprintf("%s %v", rec.Value, ok && valid))
	return nil
}
func (r *decodedRecorder) EndInput(context.Context) error { return nil }
func (r *decodedRecorder) Close() error                   { return nil }

// jsonChecker is a decoded form that says whether it checked its JSON.
type jsonChecker bool

func (c jsonChecker) CheckedJSON() bool { return bool(c) }

// TestCheckedJSON: Record.CheckedJSON is true for ValidJSON and for a
// JSONChecker that checked its bytes, and only while the decoded form is
// tied to the record's bytes.
func TestCheckedJSON(t *testing.T) {
	for _, tc := range []struct {
		form any
		want bool
	}{{nil, false}, {ValidJSON{}, true}, {jsonChecker(true), true}, {jsonChecker(false), false}, {"decoded", false}} {
		r := Record{Value: []byte(`{"a":1}`)}
		if tc.form != nil {
			r.SetDecoded(tc.form)
		}
		if got := r.CheckedJSON(); got != tc.want {
			t.Errorf("CheckedJSON with %#v = %v, want %v", tc.form, got, tc.want)
		}
		r.Value = []byte(`{"a":1}`) // equal, but other bytes
		if r.CheckedJSON() {
			t.Errorf("CheckedJSON with %#v true for other bytes", tc.form)
		}
	}
}

// TestValidJSONCrossesAChannel: a record marked ValidJSON keeps the mark
// over a channel (batched or not): the receiving task's operator reads
// ValidJSON for the record's bytes, and nothing for a record sent without
// the mark or with another decoded form; on the channel itself the record
// reads no decoded form (the mark is tied to no bytes until a task takes
// it).
func TestValidJSONCrossesAChannel(t *testing.T) {
	for _, batch := range []int{0, 4} {
		t.Run(fmt.Sprintf("batch=%d", batch), func(t *testing.T) {
			ctx := context.Background()
			ch := NewChannel(16)
			w := NewWriter([]Channel{ch}, ForwardPartitioner{})
			if batch > 0 {
				w.WithBatching(batch)
			}
			var slot DecodedSlot
			valid := Record{Value: []byte(`{"a":1}`)}
			valid.SetDecodedIn(&slot, ValidJSON{})
			other := Record{Value: []byte(`{"b":2}`)}
			other.SetDecoded("a decoded form")
			plain := Record{Value: []byte(`{"c":3}`)}
			// A decoded form that checked its JSON (a source's
			// expression.Doc) is sent with the mark; one that did not,
			// without.
			checked := Record{Value: []byte(`{"d":4}`)}
			checked.SetDecoded(jsonChecker(true))
			unchecked := Record{Value: []byte(`{"e":5}`)}
			unchecked.SetDecoded(jsonChecker(false))
			for _, r := range []Record{valid, other, plain, checked, unchecked} {
				if err := w.Emit(ctx, r); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			var sent []Record
			for len(sent) < 5 {
				el := <-ch
				if el.Kind == KindRecords {
					sent = append(sent, el.Batch.Records...)
				} else {
					sent = append(sent, el.Record)
				}
			}
			for _, r := range sent {
				if v, ok := r.Decoded(); ok {
					t.Errorf("%s on the channel reads %v", r.Value, v)
				}
			}
			in := NewChannel(8)
			for _, r := range sent {
				in <- Element{Kind: KindRecord, Record: r}
			}
			in <- Element{Kind: KindEndOfInput}
			op := &decodedRecorder{}
			task := NewOperatorTask(OperatorTaskConfig{ID: TaskID{"op", 0}, Gate: NewInputGate([]InputChannel{{Ch: in}}), Operator: op, BootstrapInput: -1})
			if err := task.Run(ctx, nil); err != nil {
				t.Fatal(err)
			}
			want := []string{`{"a":1} true`, `{"b":2} false`, `{"c":3} false`, `{"d":4} true`, `{"e":5} false`}
			if !slices.Equal(op.seen, want) {
				t.Errorf("the receiving operator saw %q, want %q", op.seen, want)
			}
		})
	}
}
