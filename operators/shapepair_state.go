package operators

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/kstreamd/kstreamd/state"
)

// ShapePairLists is the shape-pair matcher's keyed state of one key (a
// colour): the stored items of every rule that has some, in ascending rule
// name order (byte order), each rule's items in arrival order, each item
// its JSON as json.Marshal writes a json.RawMessage (compact, HTML
// characters escaped). All of a key's lists are one state entry, so a
// record costs one state read and at most one write whatever the number of
// rules its shape is in.
//
// The state keeps the value it is given and hands it out again without
// copies (ShapePairListsSerializer's Copy and View), and the matcher
// changes the value it read in place (a rule's list emptied by a match
// stays, empty, for the next item: no list inserted and removed per pair)
// and stores it back right after: nothing else holds it. Empty lists are
// neither counted (Len, Rules) nor serialized. The zero value holds no
// items.
type ShapePairLists struct {
	lists []pairList // rule order, no rule twice; a list may be empty
	size  int        // the sum of listSize over lists, for Size
}

// pairList is one rule's stored items under a key.
type pairList struct {
	rule  string
	items []json.RawMessage
}

// Len returns the number of rules with stored items.
func (l ShapePairLists) Len() int {
	n := 0
	for _, pl := range l.lists {
		if len(pl.items) > 0 {
			n++
		}
	}
	return n
}

// Rules returns the rules with stored items, in ascending order.
func (l ShapePairLists) Rules() []string {
	out := make([]string, 0, len(l.lists))
	for _, pl := range l.lists {
		if len(pl.items) > 0 {
			out = append(out, pl.rule)
		}
	}
	return out
}

// Items returns rule's stored items, oldest first (nil: none). The slice
// and the items are the state's: the caller must not change them.
func (l ShapePairLists) Items(rule string) []json.RawMessage {
	if i, ok := findList(l.lists, rule); ok && len(l.lists[i].items) > 0 {
		return slices.Clip(l.lists[i].items)
	}
	return nil
}

// listSize is what Size counts for one rule's list: its header, the
// rule's bytes and the items' headers and bytes.
func listSize(rule string, items []json.RawMessage) int {
	return 40 + len(rule) + RawListSerializer{}.Size(items)
}

// findList returns the index of rule's list in lists, or where it would
// go.
func findList(lists []pairList, rule string) (int, bool) {
	return slices.BinarySearchFunc(lists, rule, func(e pairList, r string) int { return strings.Compare(e.rule, r) })
}

// seek returns the index of rule's list in l, or where it would go, looking
// from index from on (rule must not come before the list at from-1).
func (l ShapePairLists) seek(from int, rule string) (int, bool) {
	for i := from; i < len(l.lists); i++ {
		r := l.lists[i].rule
		if len(r) == len(rule) && unsafe.StringData(r) == unsafe.StringData(rule) {
			return i, true // the rule's own name, given to the list when it was made
		}
		switch c := strings.Compare(r, rule); {
		case c == 0:
			return i, true
		case c > 0:
			return i, false
		}
	}
	return len(l.lists), false
}

// listAdd is a list for ShapePairLists.with to add: rule, which l has no
// list for, with items, at the index seek returned for it.
type listAdd struct {
	at    int
	rule  string
	items []json.RawMessage
}

// with returns l with the lists of adds added, in one copy of the lists;
// adds are in ascending rule order, no rule twice.
func (l ShapePairLists) with(adds []listAdd) ShapePairLists {
	out := make([]pairList, 0, len(l.lists)+len(adds))
	size, next := l.size, 0
	for _, a := range adds {
		out = append(append(out, l.lists[next:a.at]...), pairList{rule: a.rule, items: a.items})
		size += listSize(a.rule, a.items)
		next = a.at
	}
	return ShapePairLists{lists: append(out, l.lists[next:]...), size: size}
}

// pairEdit builds the ShapePairLists that follows base by changes one
// rule at a time (Decode, expiry, rule deletion and the move from the
// earlier layout; ProcessElement changes lists in place and adds new ones
// with ShapePairLists.with): lists is the
// working copy, made at the first change and returned by done as the new
// value. Lookups walk from the last one found, from the start when a rule
// comes before it.
type pairEdit struct {
	base   ShapePairLists
	lists  []pairList
	edited bool
	pos    int
	size   int // listSize summed over lists, once edited
}

// locate returns the index of rule's list in the current lists, or where
// it would go.
func (e *pairEdit) locate(rule string) (int, bool) {
	lists := e.base.lists
	if e.edited {
		lists = e.lists
	}
	if e.pos > len(lists) || (e.pos > 0 && lists[e.pos-1].rule >= rule) {
		e.pos = 0
	}
	for e.pos < len(lists) && lists[e.pos].rule < rule {
		e.pos++
	}
	return e.pos, e.pos < len(lists) && lists[e.pos].rule == rule
}

// set makes items rule's list (none: removes it). Every item must be as
// json.Marshal writes it (canonicalItem).
func (e *pairEdit) set(rule string, items []json.RawMessage) {
	i, found := e.locate(rule)
	if !found && len(items) == 0 {
		return
	}
	if !e.edited {
		e.lists = append(make([]pairList, 0, len(e.base.lists)+1), e.base.lists...)
		e.size = e.base.size
		e.edited = true
	}
	if found {
		e.size -= listSize(rule, e.lists[i].items)
	}
	if len(items) > 0 {
		e.size += listSize(rule, items)
	}
	switch {
	case found && len(items) == 0:
		e.lists = slices.Delete(e.lists, i, i+1)
	case found:
		e.lists[i].items = items
	default:
		e.lists = slices.Insert(e.lists, i, pairList{rule: rule, items: items})
	}
}

// done returns the edited lists and whether anything changed.
func (e *pairEdit) done() (ShapePairLists, bool) {
	switch {
	case !e.edited:
		return e.base, false
	case len(e.lists) == 0:
		return ShapePairLists{}, true
	}
	return ShapePairLists{lists: e.lists, size: e.size}, true
}

// ShapePairListsState describes the matcher's keyed state: one
// ShapePairLists per key, held by pointer (the state keeps the pointer it
// is given, so storing a key's changed lists back allocates nothing),
// written as ShapePairListsSerializer writes the lists. It replaced
// ShapePairItemsState (one map entry per key and rule), whose state the
// matcher moves into it when it finds any after a restore.
var ShapePairListsState = state.ValueStateDescriptor[*ShapePairLists]{
	Name:       "shape-pair-lists",
	Serializer: shapePairListsRef{},
}

// shapePairListsRef is ShapePairListsSerializer for a *ShapePairLists
// (nil: no items), with the same bytes and the same sharing: Copy and
// View return the pointer itself.
type shapePairListsRef struct{}

// Name returns "json".
func (shapePairListsRef) Name() string { return ShapePairListsSerializer{}.Name() }

// Append implements state.Serializer: ShapePairListsSerializer.Append of *v.
func (shapePairListsRef) Append(dst []byte, v *ShapePairLists) ([]byte, error) {
	if v == nil {
		return ShapePairListsSerializer{}.Append(dst, ShapePairLists{})
	}
	return ShapePairListsSerializer{}.Append(dst, *v)
}

// AppendKept implements state.HeapSerializer: Append.
func (r shapePairListsRef) AppendKept(dst []byte, v *ShapePairLists) ([]byte, error) {
	return r.Append(dst, v)
}

// Decode implements state.Serializer: ShapePairListsSerializer.Decode, in
// a new ShapePairLists.
func (shapePairListsRef) Decode(b []byte) (*ShapePairLists, error) {
	l, err := ShapePairListsSerializer{}.Decode(b)
	if err != nil {
		return nil, err
	}
	return &l, nil
}

// Copy implements state.HeapSerializer: v itself, which the caller gives
// up to the state.
func (shapePairListsRef) Copy(v *ShapePairLists, _ []*ShapePairLists) (*ShapePairLists, error) {
	return v, nil
}

// View implements state.HeapSerializer: v itself (see
// ShapePairListsSerializer.View).
func (shapePairListsRef) View(v *ShapePairLists) *ShapePairLists { return v }

// Size implements state.HeapSerializer: ShapePairListsSerializer.Size of
// *v.
func (shapePairListsRef) Size(v *ShapePairLists) int {
	if v == nil {
		return ShapePairListsSerializer{}.Size(ShapePairLists{})
	}
	return ShapePairListsSerializer{}.Size(*v)
}

// ShapePairListsSerializer writes a ShapePairLists as the JSON object rule
// name -> array of items, the bytes json.Marshal writes for the
// map[string][]json.RawMessage of the lists (keys sorted, items compact):
// its Name is "json", and state.JSONSerializer of that map reads what it
// writes. It is a state.HeapSerializer, so on Pebble with the write cache
// a key's lists stay decoded between records (Flink's heap state): Decode
// runs on a cache miss, Append when the cache writes the entry to Pebble.
// FuzzShapePairListsSerializer compares it with encoding/json.
type ShapePairListsSerializer struct{}

// Name returns "json".
func (ShapePairListsSerializer) Name() string { return "json" }

// Append appends the JSON object of v ("{}" when it holds no items).
func (ShapePairListsSerializer) Append(dst []byte, v ShapePairLists) ([]byte, error) {
	dst = append(dst, '{')
	first := true
	for _, l := range v.lists {
		if len(l.items) == 0 {
			continue // emptied in place by a match: not stored
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		if plainASCII(l.rule) {
			dst = append(append(append(dst, '"'), l.rule...), '"')
		} else {
			b, _ := json.Marshal(l.rule) // a string always encodes
			dst = append(dst, b...)
		}
		dst = append(dst, ':')
		dst, _ = RawListSerializer{}.AppendKept(dst, l.items) // items are kept as json.Marshal writes them
	}
	return append(dst, '}'), nil
}

// AppendKept implements state.HeapSerializer: Append.
func (s ShapePairListsSerializer) AppendKept(dst []byte, v ShapePairLists) ([]byte, error) {
	return s.Append(dst, v)
}

// Decode decodes the JSON object of rule name -> items, as json.Unmarshal
// into a map[string][]json.RawMessage (null: no items; the last of
// duplicate rules wins; rules without items are left out). Items are
// rewritten as json.Marshal writes them where they are not already.
// Anything but a valid object of arrays goes through json.Unmarshal for
// its error.
func (ShapePairListsSerializer) Decode(b []byte) (ShapePairLists, error) {
	if gjson.ValidBytes(b) {
		buf := append([]byte(nil), b...) // every item is a slice of this one copy of b
		base := unsafe.SliceData(buf)
		r := gjson.Parse(unsafe.String(base, len(buf)))
		switch {
		case r.Type == gjson.Null:
			return ShapePairLists{}, nil
		case r.IsObject():
			var e pairEdit
			ok := true
			r.ForEach(func(k, v gjson.Result) bool {
				if !v.IsArray() && v.Type != gjson.Null {
					ok = false
					return false
				}
				var items []json.RawMessage
				if v.Type == gjson.Null {
					e.set(ruleName(k), nil) // json.Unmarshal: no items, replacing earlier ones
					return true
				}
				v.ForEach(func(_, el gjson.Result) bool {
					i := int(uintptr(unsafe.Pointer(unsafe.StringData(el.Raw))) - uintptr(unsafe.Pointer(base)))
					item := json.RawMessage(buf[i : i+len(el.Raw) : i+len(el.Raw)])
					if !plainItem(item) {
						item, _ = json.Marshal(item) // valid (gjson checked): compacts and escapes
					}
					items = append(items, item)
					return true
				})
				e.set(ruleName(k), items)
				return true
			})
			if ok {
				l, _ := e.done()
				return l, nil
			}
		}
	}
	var m map[string][]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return ShapePairLists{}, fmt.Errorf("operators: json decode: %w", err)
	}
	return ShapePairLists{}, fmt.Errorf("operators: json decode: %.40q is not an object of arrays", b)
}

// ruleName decodes the object key k as json.Unmarshal does: a plain ASCII
// key as it is, anything else (escapes, non-ASCII, invalid UTF-8, which
// becomes U+FFFD) through json.Unmarshal.
func ruleName(k gjson.Result) string {
	if raw := k.Raw; len(raw) >= 2 && plainASCII(raw[1:len(raw)-1]) {
		return k.Str
	}
	var s string
	if json.Unmarshal([]byte(k.Raw), &s) != nil {
		return k.String() // not reached: gjson validated the object
	}
	return s
}

// canonicalItem returns a copy of m as json.Marshal writes it, or its
// error for m that is not valid JSON.
func canonicalItem(m json.RawMessage) (json.RawMessage, error) {
	if plainJSON(m) {
		return append(json.RawMessage(nil), m...), nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("operators: json encode: %w", err)
	}
	return b, nil
}

// Copy implements state.HeapSerializer: v itself, which the caller gives
// up to the state.
func (ShapePairListsSerializer) Copy(v ShapePairLists, _ []ShapePairLists) (ShapePairLists, error) {
	return v, nil
}

// View implements state.HeapSerializer: v itself, sharing everything,
// unlike the interface's general rule: a caller that changes the lists (the
// matcher, once a rule's matches are out) changes the kept value and
// must Update or Clear the state with it before anything else reads it.
func (ShapePairListsSerializer) View(v ShapePairLists) ShapePairLists { return v }

// Size implements state.HeapSerializer: the lists' and items' headers and
// bytes (an item in two lists counts twice).
// The edit that built v counted it: Size does not walk the items.
func (ShapePairListsSerializer) Size(v ShapePairLists) int {
	return 56 + v.size
}
