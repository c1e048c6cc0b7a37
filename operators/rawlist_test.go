package operators

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzRawListSerializer checks that RawListSerializer writes exactly the
// bytes json.Marshal writes, and decodes as json.Unmarshal does (values
// and whether it fails), and that Copy returns what a round trip through
// Append and Decode returns; the seeds run with every go test.
func FuzzRawListSerializer(f *testing.F) {
	for _, s := range []string{
		`[{"id":1,"shape":"CIRCLE"},{"id":2}]`, `[]`, `null`, `[ 1 , "a b" ]`, `[{"a":"<&>"}]`, "[\"\u2028\"]",
		`{"a":1}`, `1`, `[1,]`, ``, `[null,true,[[]]]`, " [1] ",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, gerr := RawListSerializer{}.Decode(b)
		var want []json.RawMessage
		werr := json.Unmarshal(b, &want)
		if (gerr != nil) != (werr != nil) {
			t.Fatalf("Decode(%q) error %v, json.Unmarshal %v", b, gerr, werr)
		}
		if gerr != nil {
			return
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Decode(%q) = %q, json.Unmarshal %q", b, got, want)
		}
		enc, eerr := RawListSerializer{}.Append(nil, got)
		std, serr := json.Marshal(want)
		if (eerr != nil) != (serr != nil) || string(enc) != string(std) {
			t.Fatalf("Append(%q) = %q, %v; json.Marshal %q, %v", got, enc, eerr, std, serr)
		}
		if eerr != nil {
			return
		}
		// Copy, the state's decoded form, is what a round trip returns.
		kept, cerr := RawListSerializer{}.Copy(got, nil)
		round, _ := RawListSerializer{}.Decode(enc)
		if cerr != nil || !reflect.DeepEqual(kept, round) {
			t.Fatalf("Copy(%q) = %q, %v; Decode(Append) %q", got, kept, cerr, round)
		}
		if b, err := (RawListSerializer{}).AppendKept(nil, kept); err != nil || string(b) != string(enc) {
			t.Fatalf("AppendKept(%q) = %s, %v; Append %s", kept, b, err, enc)
		}
		if view := (RawListSerializer{}).View(kept); !reflect.DeepEqual(view, kept) {
			t.Fatalf("View(%q) = %q", kept, view)
		}
	})
}

// TestRawListSerializerCopy: Copy shares no memory with its argument (the
// matcher puts items that alias the record's value), keeps nil and empty
// lists apart, rewrites items json.Marshal would rewrite, and refuses an
// item that is not JSON as Append does; View's slice can be appended to
// and set without changing the kept list.
func TestRawListSerializerCopy(t *testing.T) {
	var ser RawListSerializer
	rec := []byte(`{"id":1}`)
	v := []json.RawMessage{rec, json.RawMessage(`[ 2 ]`), nil}
	kept, err := ser.Copy(v, nil)
	if err != nil {
		t.Fatal(err)
	}
	copy(rec, `{"id":9}`)
	v[0] = json.RawMessage(`3`)
	if want := []json.RawMessage{json.RawMessage(`{"id":1}`), json.RawMessage(`[2]`), json.RawMessage(`null`)}; !reflect.DeepEqual(kept, want) {
		t.Fatalf("Copy = %q, want %q", kept, want)
	}
	view := ser.View(kept)
	view[0] = json.RawMessage(`4`)
	_ = append(view[:1], json.RawMessage(`5`))
	if got := string(kept[0]) + " " + string(kept[1]); got != `{"id":1} [2]` {
		t.Fatalf("kept list after changes to its view: %s", got)
	}
	if got, err := ser.Copy(nil, nil); got != nil || err != nil {
		t.Fatalf("Copy(nil) = %q, %v", got, err)
	}
	if got, err := ser.Copy([]json.RawMessage{}, nil); got == nil || len(got) != 0 || err != nil {
		t.Fatalf("Copy(empty) = %#v, %v", got, err)
	}
	if _, err := ser.Copy([]json.RawMessage{json.RawMessage(`{`)}, nil); err == nil {
		t.Fatal("Copy of an invalid item: no error")
	}
	if n := ser.Size(kept); n != 24*4+8+3+4 {
		t.Fatalf("Size = %d", n)
	}
	// A list read, then appended to: the kept items are shared, the new
	// one copied.
	next, err := ser.Copy(append(ser.View(kept), rec), [][]json.RawMessage{kept})
	if err != nil {
		t.Fatal(err)
	}
	if len(next) != 4 || &next[0][0] != &kept[0][0] || &next[2][0] != &kept[2][0] || &next[3][0] == &rec[0] || string(next[3]) != `{"id":9}` {
		t.Fatalf("Copy(view + item, kept) = %q (shared %t)", next, &next[0][0] == &kept[0][0])
	}
	// An item equal to the last one of another known list (the record put
	// under another rule) is shared with it.
	other, err := ser.Copy([]json.RawMessage{json.RawMessage(`7`), json.RawMessage(`{"id":9}`)}, [][]json.RawMessage{nil, next})
	if err != nil || string(other[1]) != `{"id":9}` || &other[1][0] != &next[3][0] || string(other[0]) != `7` {
		t.Fatalf("Copy(item equal to the last put) = %q, %v", other, err)
	}
	// Items of kept out of its order are checked and copied; one that is
	// not valid fails the Copy.
	if _, err := ser.Copy([]json.RawMessage{kept[1], json.RawMessage(`{`)}, [][]json.RawMessage{kept}); err == nil {
		t.Fatal("Copy with an invalid item after a kept one: no error")
	}
	swapped, err := ser.Copy([]json.RawMessage{kept[1], kept[0]}, [][]json.RawMessage{kept})
	if err != nil || string(swapped[0]) != `[2]` || string(swapped[1]) != `{"id":1}` || &swapped[0][0] == &kept[1][0] || &swapped[1][0] != &kept[0][0] {
		t.Fatalf("Copy(swapped, kept) = %q, %v", swapped, err)
	}
}
