package expression

import (
	"math"
	"strings"
	"unsafe"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"github.com/tidwall/gjson"
)

// Doc is one undecoded JSON record value as the expressions of a chain
// read it (Input.Doc): the JSON is checked once, its top-level fields are
// indexed in one pass and each is decoded the first time an expression
// reads it, and the whole value is decoded at most once, however many
// Envs (one per operator of the chain) read it. What an expression sees
// through a Doc is exactly what it sees through Input.JSON: the value
// [DecodeJSON] makes of the bytes, or the string of the bytes when that
// fails (FuzzDocEqualsWholeDecode).
//
// A Doc refers to its JSON without copying it; the bytes must not change
// while it is in use. It caches what it decoded, so it is not safe for
// concurrent use: it is shared by the operators of one chain, which run on
// one goroutine (runtime.Record.SetDecoded keeps it from crossing a
// channel). The values it returns are shared read-only.
type Doc struct {
	json []byte
	// valid: json is known to be valid JSON (a source checked it); the
	// check for a fieldwise read then only looks at its numbers.
	valid bool
	// state is 0 until the JSON was looked at, 1 when it is an object
	// whose fields are read one by one exactly as the whole would decode
	// (fields is its index), -1 when the whole must be decoded.
	state int8
	str   string // json as a string, once state is 1
	// lent: str is json itself seen as a string (ResetChecked's pass), not
	// a copy, so nothing read from it may outlive the record: a read that
	// hands out a value of str (field, Clone) takes a copy first (own),
	// and the direct evaluator copies a string result it returns. A read
	// that does not keep what it reads (a comparison, a map literal
	// written to JSON, a number) reads the record's bytes in place.
	lent   bool
	fields []docField
	// inline holds the fields of a small object: one allocation per Doc.
	inline [6]docField
	// sub holds the fields of the top-level fields' object values, listed
	// in the same pass as the top-level fields (index): a field's
	// sub0:sub1 when its subOK (bid of {"event_type":2,"bid":{...}} is
	// then not scanned a second time when bid.price is read).
	sub       []docField
	subInline [8]docField

	whole     any // the whole value, once wholeDone
	wholeDone bool
	// read: a reader looked at the value since the last Reset (look,
	// Whole), which makes ResetChecked index the next value in its check.
	read bool
}

// look notes a read of d and indexes its fields on the first.
func (d *Doc) look() {
	d.read = true
	if d.state == 0 {
		d.index()
	}
}

// docField is one top-level field of a Doc's object, in the order of the
// JSON (a repeated key appears twice; the last one counts).
type docField struct {
	name       string
	value      any    // decoded, once done
	from, to   uint32 // the undecoded JSON of the field's value: str[from:to]
	sub0, sub1 uint32 // a top-level object value's fields: Doc.sub[sub0:sub1], when subOK
	done       bool
	subOK      bool
	plain      bool // a string whose value is str[from+1:to-1] (docField.rawScalar)
}

// NewDoc returns the Doc of the JSON value b (which need not be valid: a
// Doc of invalid JSON reads as the string of b, as Input.JSON does).
func NewDoc(b []byte) *Doc { return &Doc{json: b} }

// NewValidDoc is NewDoc for b known to be valid JSON (gjson.ValidBytes or
// encoding/json's Valid returned true on it): the Doc does not check it
// again. Given invalid JSON its results are undefined.
func NewValidDoc(b []byte) *Doc { return &Doc{json: b, valid: true} }

// JSON returns the bytes d reads.
func (d *Doc) JSON() []byte { return d.json }

// CheckedJSON reports whether d's bytes are known to be one valid JSON
// value: d was made valid (NewValidDoc, Reset with valid true) or its
// fields were indexed, which checks the JSON (a Doc whose fields could
// not be read one by one reports false even when its JSON is valid). It
// implements runtime.JSONChecker: a record handed on with d crosses a
// channel marked runtime.ValidJSON, so the operator after a key_by does
// not check its JSON again.
func (d *Doc) CheckedJSON() bool { return d.valid || d.state == 1 }

// Whole returns the whole value decoded by DecodeJSON, or the string of
// the bytes when DecodeJSON fails; it decodes at most once.
func (d *Doc) Whole() any {
	d.read = true
	if !d.wholeDone {
		v, err := DecodeJSON(d.json)
		if err != nil {
			v = string(d.json)
		}
		d.whole, d.wholeDone = v, true
	}
	return d.whole
}

// Decoded returns the whole value and true once Whole decoded it, nil and
// false before.
func (d *Doc) Decoded() (any, bool) { return d.whole, d.wholeDone }

// field returns the top-level field name of the value without decoding
// the whole value: its value and found true, or found false when the
// object lacks it (a key that repeats gives its last value, as DecodeJSON's
// map does); ok is false when the value cannot be read field by field
// (invalid JSON, not an object, a number DecodeJSON could refuse: see
// fieldwise), and then the caller decodes the whole value.
func (d *Doc) field(name string) (v any, found, ok bool) {
	d.look()
	if d.state < 0 {
		return nil, false, false
	}
	for i := len(d.fields) - 1; i >= 0; i-- {
		f := &d.fields[i]
		if f.name != name {
			continue
		}
		if !f.done {
			d.own() // the value (or object) read is handed out
			if f.subOK {
				// An object indexed with the Doc: its fields are copied,
				// so that the docObject stays whole after a Reset.
				o := &docObject{str: d.str, from: f.from, to: f.to, indexed: true}
				o.fields = append(o.inline[:0], d.sub[f.sub0:f.sub1]...)
				f.value, f.done = o, true
				return o, true, true
			}
			v, err := lazyValue(d.str, f.from, f.to)
			if err != nil {
				d.state = -1 // DecodeJSON fails on the whole too
				return nil, false, false
			}
			f.value, f.done = v, true
		}
		return f.value, true, true
	}
	return nil, false, true
}

// lazyValue returns the value of str[from:to], one JSON value of a Doc
// fieldwise readable (index): an object as a *docObject, read field by
// field in turn; a scalar as the CEL value of what DecodeJSON gives
// (types.Int, types.Double, types.String, types.Bool, types.NullValue;
// CEL takes these as they are, where it converts a Go value to them on
// every read); an array as DecodeJSON decodes it.
func lazyValue(str string, from, to uint32) (any, error) {
	raw := str[from:to]
	switch raw[0] {
	case '{':
		return &docObject{str: str, from: from, to: to}, nil
	case '[':
		return decodeGJSON(raw)
	case '"':
		v, err := jsonString(raw)
		return types.String(v), err
	case 't':
		return types.True, nil
	case 'f':
		return types.False, nil
	case 'n':
		return types.NullValue, nil
	}
	if n, ok := plainInt(raw); ok {
		return types.Int(n), nil
	}
	v, err := number(raw)
	switch n := v.(type) {
	case int64:
		return types.Int(n), nil
	case float64:
		return types.Double(n), nil
	}
	return nil, err
}

// plainInt returns the value of raw when it is an integer of at most 18
// digits with an optional minus sign and nothing else (it then fits an
// int64, and number would return the same int64 through ParseInt), for a
// field read without number's two conversions to an interface.
func plainInt(raw string) (int64, bool) {
	s := raw
	if len(s) > 0 && s[0] == '-' {
		s = s[1:]
	}
	if len(s) == 0 || len(s) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if raw[0] == '-' {
		n = -n
	}
	return n, true
}

// docObject is a JSON object inside a Doc's value (a field's value, or a
// field's of one): its fields are indexed on the first read of one and
// each is decoded on its first read, as a Doc's top-level fields are, so
// that bid.price on a record does not build the bid map. CEL reads a field
// of it through FindStringKey (its string-key select, bid.price and
// bid["price"], asks a value for this before converting it); everywhere
// else (the whole object as a value: size(bid), bid == {...}, "x" in bid,
// a result) the docAdapter converts it to the CEL map of its whole
// decoded value, so CEL sees exactly the map DecodeJSON's value would be.
// The Doc's checks (valid JSON, safe numbers) hold for it.
type docObject struct {
	str      string // the Doc's JSON; the object is str[from:to]
	from, to uint32
	indexed  bool
	err      error // a key that did not decode (never on valid JSON)
	fields   []docField
	inline   [7]docField

	whole     any // the decoded object, once wholeDone
	wholeDone bool
}

// FindStringKey returns the value of the object's field name (the last one
// when the key repeats, as DecodeJSON's map keeps) and true, or nil and
// false when it has none.
func (o *docObject) FindStringKey(name string) (any, bool) {
	if !o.indexed {
		o.index()
	}
	if o.err != nil {
		return types.NewErr("%v", o.err), true
	}
	for i := len(o.fields) - 1; i >= 0; i-- {
		f := &o.fields[i]
		if f.name != name {
			continue
		}
		if !f.done {
			v, err := lazyValue(o.str, f.from, f.to)
			if err != nil {
				return types.NewErr("%v", err), true
			}
			f.value, f.done = v, true
		}
		return f.value, true
	}
	return nil, false
}

// index lists the object's fields (Doc.index has checked the JSON).
func (o *docObject) index() {
	o.indexed = true
	o.fields = o.inline[:0]
	members(o.str[:o.to], int(o.from), func(keyRaw string, from, to int) bool {
		key, err := memberKey(keyRaw)
		if err != nil {
			o.err = err // not on valid JSON (Doc.index checked it)
			return false
		}
		o.fields = append(o.fields, docField{name: key, from: uint32(from), to: uint32(to)})
		return true
	})
}

// memberKey returns the key of the JSON string literal raw (quotes
// included): its bytes between the quotes when plain ASCII without
// escapes, else as jsonString decodes it.
func memberKey(raw string) (string, error) {
	key := raw[1 : len(raw)-1]
	if strings.IndexByte(key, '\\') < 0 && isASCII(key) {
		return key, nil
	}
	return jsonString(raw)
}

// members calls fn with each member of the JSON object at s[i] (after
// white space), in order: the raw key (a string
// literal, quotes included) and the offsets in s of the member's raw
// value, s[from:to]. The object must be valid JSON (a Doc checked it);
// it reads nothing beyond the object. It returns false when fn does, or
// when s is not an object it can read (then fn may have been called for
// some members).
func members(s string, i int, fn func(keyRaw string, from, to int) bool) bool {
	i = skipSpace(s, i)
	if i >= len(s) || s[i] != '{' {
		return false
	}
	i++
	for {
		kStart, kEnd, from, st := nextMember(s, i)
		if st != memberFound {
			return st == memberEnd
		}
		to := skipValue(s, from)
		if to < 0 || !fn(s[kStart:kEnd], from, to) {
			return false
		}
		i = to
	}
}

// Outcomes of nextMember.
const (
	memberBad   = iota // not an object's member list
	memberEnd          // the object's '}'
	memberFound        // a member
)

// nextMember reads an object's next member from s[i] on (i after the '{'
// or after the previous member's value): for memberFound the bounds of its
// key as a JSON string literal s[kStart:kEnd] and the index of its value's
// first byte; for memberEnd from is the index of the closing '}'.
func nextMember(s string, i int) (kStart, kEnd, from, st int) {
	i = skipSpace(s, i)
	if i >= len(s) {
		return 0, 0, 0, memberBad
	}
	switch s[i] {
	case '}':
		return 0, 0, i, memberEnd
	case ',':
		i = skipSpace(s, i+1)
	}
	if i >= len(s) || s[i] != '"' {
		return 0, 0, 0, memberBad
	}
	kStart, kEnd = i, skipString(s, i)
	if kEnd < 0 {
		return 0, 0, 0, memberBad
	}
	i = skipSpace(s, kEnd)
	if i >= len(s) || s[i] != ':' {
		return 0, 0, 0, memberBad
	}
	return kStart, kEnd, skipSpace(s, i+1), memberFound
}

// skipSpace returns the index of the first byte of s from i on that is
// not JSON white space (len(s) when none).
func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the JSON string literal at s[i]
// ('"'), or -1 when it does not end. A string without a backslash before
// its closing quote (most keys and values) is found with IndexByte; the
// rest byte by byte (skipStringBytewise).
func skipString(s string, i int) int {
	if j := strings.IndexByte(s[i+1:], '"'); j >= 0 && strings.IndexByte(s[i+1:i+1+j], '\\') < 0 {
		return i + j + 2
	}
	return skipStringBytewise(s, i)
}

// skipStringBytewise is skipString read byte by byte.
func skipStringBytewise(s string, i int) int {
	for i++; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return -1
}

// skipValue returns the index just past the valid JSON value at s[i], or
// -1 when it does not end within s.
func skipValue(s string, i int) int {
	if i >= len(s) {
		return -1
	}
	switch s[i] {
	case '"':
		return skipString(s, i)
	case '{', '[':
		depth := 0
		for ; i < len(s); i++ {
			switch s[i] {
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			case '"':
				if i = skipString(s, i); i < 0 {
					return -1
				}
				i-- // the loop's i++ steps past the string
			}
		}
		return -1
	}
	// A number, true, false or null: up to the next delimiter.
	for ; i < len(s); i++ {
		switch s[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
	}
	return i
}

// decoded returns the object as DecodeJSON decodes it, decoding it once.
func (o *docObject) decoded() (any, error) {
	if !o.wholeDone {
		v, err := decodeGJSON(o.str[o.from:o.to])
		if err != nil {
			return nil, err
		}
		o.whole, o.wholeDone = v, true
	}
	return o.whole, nil
}

// docAdapter is the CEL type adapter of every Program: CEL's own
// (base), with a *docObject converted to the CEL value of its decoded
// object, so that it is everywhere but in a field read the very map
// DecodeJSON's value gives.
type docAdapter struct{ base types.Adapter }

// NativeToValue implements types.Adapter.
func (a docAdapter) NativeToValue(v any) ref.Val {
	if o, ok := v.(*docObject); ok {
		w, err := o.decoded()
		if err != nil {
			return types.NewErr("%v", err)
		}
		return a.base.NativeToValue(w)
	}
	return a.base.NativeToValue(v)
}

// index checks that the JSON is read field by field as the whole decodes
// and lists its top-level fields; state is 1 when it is, -1 otherwise.
// It reads the JSON once (after gjson's check when it is not known
// valid): the top-level members, the members of their object values
// (sub), and every number on the way, which must be safe (safeNumber).
func (d *Doc) index() {
	d.state = -1
	if len(d.json) > math.MaxUint32 || (!d.valid && !gjson.ValidBytes(d.json)) {
		return
	}
	d.str = string(d.json)
	if d.fields == nil {
		d.fields = d.inline[:0]
	}
	if d.sub == nil {
		d.sub = d.subInline[:0]
	}
	if d.indexMembers(d.str) {
		d.state = 1
	}
}

// indexMembers lists the members of the valid JSON object s (after white
// space) into d.fields, and those of each member's object value into
// d.sub; false when s is not an object, a key does not decode, or a
// number anywhere in s is not safe (then Whole decides).
func (d *Doc) indexMembers(s string) bool {
	i := skipSpace(s, 0)
	if i >= len(s) || s[i] != '{' {
		return false
	}
	i++
	for {
		kStart, kEnd, from, st := nextMember(s, i)
		if st != memberFound {
			return st == memberEnd
		}
		key, err := memberKey(s[kStart:kEnd])
		if err != nil {
			return false
		}
		f := docField{name: key, from: uint32(from)}
		var to int
		if from < len(s) && s[from] == '{' {
			f.sub0 = uint32(len(d.sub))
			to = d.indexSub(s, from)
			f.sub1, f.subOK = uint32(len(d.sub)), true
		} else {
			to = skipSafeValue(s, from)
		}
		if to < 0 {
			return false
		}
		f.to = uint32(to)
		d.fields = append(d.fields, f)
		i = to
	}
}

// indexSub appends the members of the object at s[i] to d.sub, and
// returns the index just past it; -1 when a key does not decode or a
// number in it is not safe.
func (d *Doc) indexSub(s string, i int) int {
	i++ // '{'
	for {
		kStart, kEnd, from, st := nextMember(s, i)
		switch st {
		case memberEnd:
			return from + 1
		case memberBad:
			return -1
		}
		key, err := memberKey(s[kStart:kEnd])
		if err != nil {
			return -1
		}
		to := skipSafeValue(s, from)
		if to < 0 {
			return -1
		}
		d.sub = append(d.sub, docField{name: key, from: uint32(from), to: uint32(to)})
		i = to
	}
}

// skipSafeValue is skipValue that also checks every number of the value
// (nested ones included): -1 when one is not safe.
func skipSafeValue(s string, i int) int { return SkipSafeJSONValue(s, i, 0) }

// SkipSafeJSONValue returns the index just past the JSON value at s[i] (s
// valid JSON), or -1 when the value does not end within s, nests deeper
// than maxDepth levels (0: no limit) or holds a number, nested ones
// included, that is not safe to copy as it is (an exponent, a run of more
// than 300 digits): the values the direct evaluator and table_join's raw
// select write without decoding. Strings are skipped whatever they hold.
func SkipSafeJSONValue(s string, i, maxDepth int) int {
	if i >= len(s) {
		return -1
	}
	switch s[i] {
	case '"':
		return skipString(s, i)
	case '{', '[':
		depth, digits := 0, 0
		for ; i < len(s); i++ {
			c := s[i]
			switch {
			case c >= '0' && c <= '9':
				if digits++; digits > 300 {
					return -1
				}
				continue
			case c == 'e' || c == 'E':
				// Outside a string, an e after a digit or '.' is an
				// exponent (true and false have theirs after a letter).
				if p := s[i-1]; p == '.' || (p >= '0' && p <= '9') {
					return -1
				}
			case c == '{' || c == '[':
				if depth++; maxDepth > 0 && depth > maxDepth {
					return -1
				}
			case c == '}' || c == ']':
				if depth--; depth == 0 {
					return i + 1
				}
			case c == '"':
				if i = skipString(s, i); i < 0 {
					return -1
				}
				i-- // the loop's i++ steps past the string
			}
			digits = 0
		}
		return -1
	}
	to := skipValue(s, i)
	if to < 0 || !safeNumber(s[i:to]) {
		return -1
	}
	return to
}

// safeNumber reports whether the scalar JSON value raw (a number, true,
// false or null) decodes as DecodeJSON decodes it inside a whole value:
// not a number with an exponent (it could be out of the float64 range)
// nor one with a run of more than 300 digits (which could be); such a
// number anywhere makes DecodeJSON fail on the whole value, which is then
// seen as a string. The check is conservative (1e5 also sends the record
// to the whole decode).
func safeNumber(raw string) bool {
	if c := raw[0]; c != '-' && (c < '0' || c > '9') {
		return true // true, false, null
	}
	digits := 0
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case c >= '0' && c <= '9':
			if digits++; digits > 300 {
				return false
			}
			continue
		case c == 'e' || c == 'E':
			return false
		}
		digits = 0
	}
	return true
}

// Reset makes d the Doc of b (as NewDoc, or NewValidDoc when valid),
// reusing its memory: for an operator that reads record after record and
// hands none of its Docs on (or hands on a Clone).
func (d *Doc) Reset(b []byte, valid bool) {
	if d.state == 0 && !d.wholeDone {
		// Nothing read since the last Reset (or ever): nothing else to
		// clear. A source's Doc of a record no operator read (a copy job)
		// costs two stores, not a clear of the whole struct.
		d.json, d.valid = b, valid
		return
	}
	// Only what the last record's reads wrote is cleared, not the whole
	// struct (its inline arrays are most of it).
	d.fields = resetFields(d.fields, d.inline[:])
	d.sub = resetFields(d.sub, d.subInline[:])
	d.json, d.valid, d.state, d.str, d.lent = b, valid, 0, "", false
	d.whole, d.wholeDone, d.read = nil, false, false
}

// own makes str a copy of json when it is lent (the view ResetChecked
// indexed), moving the fields' names that pointed into the view to the
// copy, so that what is read from str next may be kept after the record.
func (d *Doc) own() {
	if !d.lent {
		return
	}
	view := d.str
	d.str, d.lent = string(d.json), false
	if len(view) == 0 {
		return
	}
	base := uintptr(unsafe.Pointer(unsafe.StringData(view)))
	for _, fs := range [2][]docField{d.fields, d.sub} {
		for i := range fs {
			name := fs[i].name
			if len(name) == 0 {
				continue
			}
			// A key without escapes is a slice of the view; one decoded
			// by jsonString is a string of its own.
			if off := uintptr(unsafe.Pointer(unsafe.StringData(name))) - base; off < uintptr(len(view)) {
				fs[i].name = d.str[off : off+uintptr(len(name))]
			}
		}
	}
}

// resetFields clears the fields listed in s, one of a Doc's lists, and
// returns it emptied for the Doc's next record; inline is the Doc's own
// array for it, which holds nothing beyond the fields listed while s is
// in it (else it is cleared too). Nil when s is empty or another Doc's
// inline array (the Doc was copied): index then takes inline again.
func resetFields(s, inline []docField) []docField {
	clear(s)
	if cap(s) == 0 {
		return nil
	}
	if &s[:1][0] == &inline[0] {
		return s[:0]
	}
	clear(inline) // s outgrew it: the fields listed before are there
	if cap(s) == len(inline) {
		return nil
	}
	return s[:0]
}

// Clone returns a copy of d on the heap sharing what d decoded (read-only),
// for a Doc reused with Reset to be handed on.
func (d *Doc) Clone() *Doc {
	d.own()
	c := new(Doc)
	*c = *d
	if len(d.fields) <= len(d.inline) {
		c.fields = append(c.inline[:0], d.fields...)
	} else {
		c.fields = append([]docField(nil), d.fields...)
	}
	if len(d.sub) <= len(d.subInline) {
		c.sub = append(c.subInline[:0], d.sub...)
	} else {
		c.sub = append([]docField(nil), d.sub...)
	}
	return c
}
