package operators

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"unsafe"
)

// inArena reports whether every byte of it lies within arena[:len].
func inArena(arena []byte, it json.RawMessage) bool {
	if len(arena) == 0 || len(it) == 0 {
		return false
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(arena)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(it)))
	return p >= lo && p+uintptr(len(it)) <= lo+uintptr(len(arena))
}

// TestShapePairListsArena: keep stores every item in the key's arena,
// moving the stored ones (decoded, or in a full arena) into a new arena
// when it has no room: afterwards every stored item lies in the arena, an
// item stored under several rules is still one copy, the lists hold the
// same items as a model, items handed out earlier keep their bytes, the
// arena holds at most twice the distinct stored bytes plus the item (or
// arenaMin) and Size equals the walked count. Random rounds of a few and
// of more than 32 items (the moved items' index map).
func TestShapePairListsArena(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	rules := []string{"a", "b", "c", "d", "e"}
	for round := range 300 {
		model := map[string][]string{}
		l := ShapePairLists{}
		if round%3 == 0 { // start from decoded lists: items in the decode's buffer
			var err error
			if l, err = (ShapePairListsSerializer{}).Decode([]byte(`{"a":[{"d":1},{"d":2}],"c":[{"d":3}]}`)); err != nil {
				t.Fatal(err)
			}
			model["a"] = []string{`{"d":1}`, `{"d":2}`}
			model["c"] = []string{`{"d":3}`}
		}
		maxItems := 8
		if round%2 == 1 {
			maxItems = 60
		}
		type handed struct {
			b    json.RawMessage
			want string
		}
		var out []handed
		for step := range 40 {
			// One record: its item stored under some rules (one copy),
			// other rules' lists cleared (a match) or kept.
			body := fmt.Sprintf(`{"r":%d,"s":%d,"pad":"%s"}`, round, step, make([]byte, rng.IntN(200)))
			item := l.keep(json.RawMessage(body))
			if string(item) != body {
				t.Fatalf("round %d step %d: keep = %s, want %s", round, step, item, body)
			}
			out = append(out, handed{item, body})
			e := pairEdit{base: l}
			for _, r := range rules {
				switch x := rng.IntN(4); {
				case x == 0 || len(model[r]) >= maxItems:
					e.set(r, nil)
					delete(model, r)
				case x == 1:
					e.set(r, append(append([]json.RawMessage(nil), l.Items(r)...), item))
					model[r] = append(model[r], body)
				}
			}
			arena := l.arena
			l, _ = e.done()
			l.arena = arena
			if got := asMap(l); !reflect.DeepEqual(got, model) && !(len(got) == 0 && len(model) == 0) {
				t.Fatalf("round %d step %d: lists %v, want %v", round, step, got, model)
			}
		}
		// A last keep that does not fit moves everything: then every item
		// is in the arena, shared items once, the arena bounded.
		big := json.RawMessage(fmt.Sprintf(`{"big":"%s"}`, make([]byte, cap(l.arena))))
		for i := range big {
			if big[i] == 0 {
				big[i] = 'x'
			}
		}
		item := l.keep(big)
		e := pairEdit{base: l}
		e.set("z", []json.RawMessage{item})
		arena := l.arena
		l, _ = e.done()
		l.arena = arena
		model["z"] = []string{string(big)}
		if got := asMap(l); !reflect.DeepEqual(got, model) {
			t.Fatalf("round %d: lists %v, want %v", round, got, model)
		}
		live := 0
		seen := map[*byte]bool{}
		for _, pl := range l.lists {
			for _, it := range pl.items {
				if !inArena(l.arena, it) {
					t.Fatalf("round %d: item %s of rule %s outside the arena after a move", round, it, pl.rule)
				}
				if p := unsafe.SliceData(it); !seen[p] {
					seen[p] = true
					live += len(it)
				}
			}
		}
		if live != len(l.arena) {
			t.Fatalf("round %d: %d distinct stored bytes, the arena holds %d (a shared item copied twice?)", round, live, len(l.arena))
		}
		if limit := max(arenaMin, 2*(live-len(big))+len(big)); cap(l.arena) > limit {
			t.Fatalf("round %d: arena capacity %d for %d live bytes (limit %d)", round, cap(l.arena), live, limit)
		}
		for _, h := range out {
			if string(h.b) != h.want {
				t.Fatalf("round %d: an item handed out earlier changed: %s, want %s", round, h.b, h.want)
			}
		}
		if gs, ws := (ShapePairListsSerializer{}).Size(l), walkedSize(l); gs != ws {
			t.Fatalf("round %d: Size %d, counting gives %d", round, gs, ws)
		}
	}
}
