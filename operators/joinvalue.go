package operators

import (
	"reflect"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"

	"github.com/kstreamd/kstreamd/expression"
	"github.com/kstreamd/kstreamd/runtime"
)

// lazyObject is a JSON object a join's select sees as left or right
// without decoding it whole: a field read (left.id, has(left.id),
// left.?id, left["id"], "id" in left) decodes that field alone from the
// expression.Doc (once per Doc); anything else (size, iteration, equality,
// conversion, the object as a result) decodes the whole value once and
// acts as the map[string]any [expression.DecodeJSON] gives, so select sees
// exactly what it sees of the decoded map (TestLazyObjectEqualsDecoded).
// Only made for a Doc that reads field by field (Doc.Fieldwise), whose
// whole value is that map. Not safe for concurrent use; valid while its
// Doc is.
type lazyObject struct {
	doc   *expression.Doc
	whole ref.Val // the whole value as CEL sees it, once decoded
}

var (
	_ ref.Val       = (*lazyObject)(nil)
	_ traits.Mapper = (*lazyObject)(nil)
)

// reset makes o the object of doc (Fieldwise true).
func (o *lazyObject) reset(doc *expression.Doc) { o.doc, o.whole = doc, nil }

// cel returns the whole value as CEL sees a map[string]any.
func (o *lazyObject) cel() ref.Val {
	if o.whole == nil {
		o.whole = types.DefaultTypeAdapter.NativeToValue(o.doc.Whole())
	}
	return o.whole
}

// FindStringKey is the interpreter's fast path for a field read with a
// constant name (cel-go's stringQualifier): the field's Go value, as a
// map[string]any lookup gives it.
func (o *lazyObject) FindStringKey(name string) (any, bool) {
	if v, found, ok := o.doc.Field(name); ok {
		return v, found
	}
	// Not reached for a Fieldwise Doc; kept exact regardless.
	m, _ := o.doc.Whole().(map[string]any)
	v, found := m[name]
	return v, found
}

// Find implements traits.Mapper.
func (o *lazyObject) Find(key ref.Val) (ref.Val, bool) {
	if s, ok := key.(types.String); ok {
		v, found := o.FindStringKey(string(s))
		if !found {
			return nil, false
		}
		return types.DefaultTypeAdapter.NativeToValue(v), true
	}
	return o.cel().(traits.Mapper).Find(key)
}

// Get implements traits.Indexer.
func (o *lazyObject) Get(key ref.Val) ref.Val {
	if v, found := o.Find(key); found {
		return v
	}
	return o.cel().(traits.Indexer).Get(key) // the map's error for a missing key
}

// Contains implements traits.Container.
func (o *lazyObject) Contains(key ref.Val) ref.Val {
	if s, ok := key.(types.String); ok {
		_, found := o.FindStringKey(string(s))
		return types.Bool(found)
	}
	return o.cel().(traits.Container).Contains(key)
}

// Iterator implements traits.Iterable.
func (o *lazyObject) Iterator() traits.Iterator { return o.cel().(traits.Iterable).Iterator() }

// Size implements traits.Sizer.
func (o *lazyObject) Size() ref.Val { return o.cel().(traits.Sizer).Size() }

// ConvertToNative implements ref.Val.
func (o *lazyObject) ConvertToNative(t reflect.Type) (any, error) { return o.cel().ConvertToNative(t) }

// ConvertToType implements ref.Val.
func (o *lazyObject) ConvertToType(t ref.Type) ref.Val { return o.cel().ConvertToType(t) }

// Equal implements ref.Val.
func (o *lazyObject) Equal(other ref.Val) ref.Val {
	if l, ok := other.(*lazyObject); ok {
		other = l.cel()
	}
	return o.cel().Equal(other)
}

// Type implements ref.Val: a map.
func (o *lazyObject) Type() ref.Type { return types.MapType }

// Value implements ref.Val: the whole map[string]any (what an evaluation
// returning the object gives, expression's native conversion).
func (o *lazyObject) Value() any { return o.doc.Whole() }

// MarshalJSON implements json.Marshaler: the whole value's JSON, as
// expression.EncodeJSON writes it (a lazyObject inside a result map, as
// select: value returns it, goes through encoding/json).
func (o *lazyObject) MarshalJSON() ([]byte, error) { return expression.EncodeJSON(o.doc.Whole()) }

// joinSide is the scratch space for one side of a join's select: the
// value as select sees it, decoded only as far as select reads it.
type joinSide struct {
	doc expression.Doc
	obj lazyObject
}

// value returns the value of raw (text: of a text format) as select sees
// it, what decodeValue returns or a lazyObject standing for it; valid
// until the next call.
func (s *joinSide) value(raw []byte, text bool) any { return s.checked(raw, text, false) }

// record returns the value of the record rec as select sees it, as value
// does, without indexing or checking its JSON again where that was done:
// a Doc rec was handed on with in its chain is read as it is, and a value
// known valid JSON (runtime.Record.CheckedJSON: checked by its source,
// the mark crossing the key_by before the join) is not checked again.
// Valid until the next call.
func (s *joinSide) record(rec *runtime.Record) any {
	text := rec.Format == runtime.FormatText
	if rec.Value == nil || text {
		return decodeValue(rec.Value, text)
	}
	if v, ok := rec.Decoded(); ok {
		if d, ok := v.(*expression.Doc); ok {
			return s.of(d)
		}
	}
	return s.checked(rec.Value, false, rec.CheckedJSON())
}

// checked is value for raw known to be valid JSON when valid is true
// (runtime.Record.CheckedJSON): its Doc does not check it again.
func (s *joinSide) checked(raw []byte, text, valid bool) any {
	if raw == nil || text {
		return decodeValue(raw, text)
	}
	s.doc.Reset(raw, valid)
	return s.of(&s.doc)
}

// of returns doc's value as select sees it (a lazyObject of doc, valid
// until the next call, or doc's whole value).
func (s *joinSide) of(doc *expression.Doc) any {
	if !doc.Fieldwise() {
		return doc.Whole()
	}
	s.obj.reset(doc)
	return &s.obj
}
