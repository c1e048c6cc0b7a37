package expression

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestStrEndEveryByteEveryOffset checks strEnd against the bytewise scan
// (strEndBytewise) with each of the 256 byte values at every position of
// contents of lengths 1 to 24 (every offset within a word, the first and
// the last seven bytes of the input), started at offsets 0 to 8, ending
// with a closing quote, with text after it, or at the end of the input
// without one; and with each byte value just before a quote, a backslash
// escape and a control byte at every position (a non-ASCII byte of the
// word before the first special one must clear plain).
func TestStrEndEveryByteEveryOffset(t *testing.T) {
	n := 0
	check := func(s string) {
		t.Helper()
		for i := 0; i <= 8 && i <= len(s); i++ {
			end, plain := strEnd(s, i)
			wantEnd, wantPlain := strEndBytewise(s, i)
			if end != wantEnd || plain != wantPlain {
				t.Fatalf("strEnd(%q, %d) = %d, %v; bytewise %d, %v", s, i, end, plain, wantEnd, wantPlain)
			}
			n++
		}
	}
	filler := strings.Repeat("abcdefgh", 4)
	for length := 1; length <= 24; length++ {
		for _, tail := range []string{`"`, `"}`, ""} {
			for p := 0; p < length; p++ {
				for c := 0; c < 256; c++ {
					b := []byte(filler[:length])
					b[p] = byte(c)
					check(string(b) + tail)
					if p+1 < length {
						for _, after := range []byte{'"', '\\', 0x01, 0x1f} {
							b2 := append([]byte(nil), b...)
							b2[p+1] = after
							check(string(b2) + tail)
						}
					}
				}
			}
		}
	}
	if n < 1_000_000 {
		t.Fatalf("only %d cases", n)
	}
}

// TestResetCheckedStringsEveryByte puts each of the 256 byte values at
// every position of an object's key and of a string value (lengths 1 to
// 17, so that the string ends at every offset of a word and within the
// input's last seven bytes), and of a top-level string with and without
// its closing quote: ResetChecked's verdict is encoding/json's Valid on
// every one (no nesting here, so gjson's too), and a valid object's Doc
// has exactly the fields and values the index (NewValidDoc) reads.
func TestResetCheckedStringsEveryByte(t *testing.T) {
	d := new(Doc)
	d.ResetChecked([]byte(`{"prev":1}`))
	d.Field("prev")
	check := func(b []byte) {
		t.Helper()
		want := json.Valid(b)
		if got := d.ResetChecked(b); got != want {
			t.Fatalf("ResetChecked(%q) = %v, want %v", b, got, want)
		}
		if !want {
			d.ResetChecked([]byte(`{"prev":1}`))
			d.Field("prev")
			return
		}
		ref := NewValidDoc(b)
		if d.state == 1 && ref.Fieldwise() && !reflect.DeepEqual(d.fields, ref.fields) {
			t.Fatalf("%q: fields %+v, want index's %+v", b, d.fields, ref.fields)
		}
		if ref.Fieldwise() {
			for _, f := range ref.fields {
				gv, gf, gok := d.Field(f.name)
				wv, wf, wok := ref.Field(f.name)
				if gf != wf || gok != wok || !reflect.DeepEqual(plainValue(gv), plainValue(wv)) {
					t.Fatalf("%q: Field(%q) = %#v, %v, %v; want %#v, %v, %v", b, f.name, gv, gf, gok, wv, wf, wok)
				}
			}
		} else if !reflect.DeepEqual(d.Whole(), ref.Whole()) {
			t.Fatalf("%q: Whole %#v, want %#v", b, d.Whole(), ref.Whole())
		}
		d.Field("prev") // read, so that the next value is indexed in the check
	}
	filler := "abcdefghijklmnopq"
	for length := 1; length <= len(filler); length++ {
		for p := 0; p < length; p++ {
			for c := 0; c < 256; c++ {
				b := []byte(filler[:length])
				b[p] = byte(c)
				s := string(b)
				check([]byte(`{"` + s + `":1}`))
				check([]byte(`{"k":"` + s + `"}`))
				check([]byte(`{"` + s + `":"` + s + `"}`))
				check([]byte(`"` + s + `"`))
				check([]byte(`"` + s))
				check([]byte(`["` + s + `"]`))
			}
		}
	}
}

// FuzzStrEndEqualsBytewise checks strEnd against the bytewise scan on any
// bytes from any start offset: the same end and the same plain.
func FuzzStrEndEqualsBytewise(f *testing.F) {
	for _, s := range []string{"abcdefgh\"", "abcdefg\xff\"", "a\\\"bcdefghij\"", "abcdefghijklmn\\\\\"", "\x7fabcdefg\x1f", "abc\\u00e9defgh\"", "abcdefgh"} {
		f.Add([]byte(s), uint8(0))
	}
	f.Fuzz(func(t *testing.T, b []byte, start uint8) {
		s := string(b)
		i := int(start) % (len(s) + 1)
		end, plain := strEnd(s, i)
		wantEnd, wantPlain := strEndBytewise(s, i)
		if end != wantEnd || plain != wantPlain {
			t.Fatalf("strEnd(%q, %d) = %d, %v; bytewise %d, %v", s, i, end, plain, wantEnd, wantPlain)
		}
	})
}
