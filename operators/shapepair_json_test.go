package operators

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzTopLevelString: topLevelString equals json.Unmarshal into a
// map[string]json.RawMessage and the field into a string, for any bytes.
func FuzzTopLevelString(f *testing.F) {
	for _, s := range []string{
		`{"shape":"CIRCLE","id":1}`, `{"shape":"A","shape":"B"}`, `{"shape":1}`, `{"shape":null}`, `null`, `[1]`,
		`{"sh\u0061pe":"x"}`, `{"shape":"a\"b"}`, "{\"shape\":\"\xff\"}", `{"shape":"<&>"}`, `{"a":{"shape":"x"}}`,
		` {"shape" : "x" } `, `{"shape":"x"`, ``, `{"shape":"é"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, gok := topLevelString(b, "shape")
		var want string
		var fields map[string]json.RawMessage
		wok := json.Unmarshal(b, &fields) == nil
		if wok {
			raw, ok := fields["shape"]
			wok = ok && json.Unmarshal(raw, &want) == nil && raw[0] == '"'
		}
		if gok != wok || got != want {
			t.Fatalf("topLevelString(%q) = %q, %v; encoding/json %q, %v", b, got, gok, want, wok)
		}
		if json.Valid(b) { // what a source marks runtime.ValidJSON
			if got, ok := checkedTopLevelString(b, "shape"); ok != wok || got != want {
				t.Fatalf("checkedTopLevelString(%q) = %q, %v; encoding/json %q, %v", b, got, ok, want, wok)
			}
		}
	})
}

// TestAppendMatch: appendMatch writes the bytes json.Marshal writes for
// Match, on the fast path (plain strings and items) and off it (escapes,
// HTML characters, whitespace, U+2028, non-ASCII).
func TestAppendMatch(t *testing.T) {
	for _, c := range []struct{ rule, key, first, second string }{
		{"red-circle", "k000042", `{"id":1,"shape":"CIRCLE"}`, `{"id":2,"shape":"SQUARE"}`},
		{"a<b", "k", `1`, `2`},
		{"r", `k"q`, `"x"`, `null`},
		{"r", "ké", `[1]`, `{}`},
		{"r", "k", `{"a": 1}`, `{"b":"<&>"}`},
		{"r", "k", "[\"\u2028\"]", `true`},
		{"", "", `{"n":1.5e3}`, `{"s":"\u00e9"}`},
	} {
		got, err := appendMatch([]byte("x"), c.rule, c.key, json.RawMessage(c.first), json.RawMessage(c.second))
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		want, err := json.Marshal(Match{Rule: c.rule, Key: c.key, First: json.RawMessage(c.first), Second: json.RawMessage(c.second)})
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != "x"+string(want) {
			t.Errorf("appendMatch(%+v) = %s, want x%s", c, got, want)
		}
		// matchSize, the matcher's buffer size, is exact for plain parts
		// (the first case) and a lower bound otherwise.
		if n := matchSize(c.rule, c.key, json.RawMessage(c.first), json.RawMessage(c.second)); n > len(want) || (c.rule == "red-circle" && n != len(want)) {
			t.Errorf("matchSize(%+v) = %d, output %d bytes", c, n, len(want))
		}
	}
}

// TestPlainItemEveryByte: plainItem is false exactly when m is empty or
// holds a byte json.Marshal compacts or escapes in a RawMessage, at every
// position of items of 1 to 20 bytes (the unrolled steps and the tail).
func TestPlainItemEveryByte(t *testing.T) {
	if plainItem(nil) || plainItem([]byte{}) {
		t.Fatal("plainItem of an empty item is true")
	}
	changed := map[byte]bool{' ': true, '\t': true, '\r': true, '\n': true, '<': true, '>': true, '&': true, 0xe2: true}
	for n := 1; n <= 20; n++ {
		for pos := range n {
			for c := range 256 {
				m := bytes.Repeat([]byte("a"), n)
				m[pos] = byte(c)
				if got, want := plainItem(m), !changed[byte(c)]; got != want {
					t.Fatalf("plainItem(%q) = %v, want %v", m, got, want)
				}
			}
		}
	}
}

// BenchmarkTopLevelString: the shape of one of the bench's records (about
// 100 bytes, the field third of five).
func BenchmarkTopLevelString(b *testing.B) {
	v := []byte(`{"id":1234567,"key":"k000042","shape":"TRIANGLE","amount":512,"note":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`)
	for b.Loop() {
		if s, ok := topLevelString(v, "shape"); !ok || s != "TRIANGLE" {
			b.Fatal(s, ok)
		}
	}
}
