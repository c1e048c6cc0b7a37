package expression

import (
	"math"
	"math/bits"
	"unsafe"

	"github.com/tidwall/gjson"
)

// ResetChecked makes d the Doc of b, as Reset does, and checks that b is
// one JSON value in the pass that indexes it (index), so that a source
// reads a record once where it read it twice (gjson's check, then the
// index of the first field read). It returns what gjson.ValidBytes
// returns on b (encoding/json's Valid but for nesting deeper than its
// 10000 levels, which gjson accepts): the pass accepts only valid JSON,
// and whatever it does not accept (invalid JSON, but also a key that does
// not decode or nesting deeper than checkDepth) is judged by
// gjson.ValidBytes, so the verdict is gjson's on every input
// (FuzzResetCheckedEqualsValid). After true, d is as Reset(b, true) left
// it, with its fields indexed when the pass could; after false, d must
// not be read. It implements runtime.CheckingJSON.
//
// The pass indexes only when the previous value was read (a reader
// looked at its fields or decoded it): a chain that never reads the
// value (a copy job, a key_by on the Kafka key) keeps gjson's check
// alone. The pass reads b in place, not a string copy of it as index
// does (Doc.lent): b must not change until the next Reset, and what a
// reader keeps of the record is copied when it is handed out.
func (d *Doc) ResetChecked(b []byte) bool {
	fold := d.read
	d.Reset(b, false)
	if !fold || len(b) > math.MaxUint32 {
		d.valid = gjson.ValidBytes(b)
		return d.valid
	}
	// The pass reads b in place; what is read of it later is copied when
	// it is handed out (lent, own).
	d.str, d.lent = unsafe.String(unsafe.SliceData(b), len(b)), true
	if d.fields == nil {
		d.fields = d.inline[:0]
	}
	if d.sub == nil {
		d.sub = d.subInline[:0]
	}
	ok, fieldwise := d.checkIndex(d.str)
	if !ok {
		// Not accepted by the pass: gjson decides, and a valid value is
		// indexed again from scratch on its first read.
		d.fields = resetFields(d.fields, d.inline[:])
		d.sub = resetFields(d.sub, d.subInline[:])
		d.state, d.str, d.lent = 0, "", false
		d.valid = gjson.ValidBytes(b)
		return d.valid
	}
	d.valid = true
	if fieldwise {
		d.state = 1
	} else {
		d.state = -1
	}
	return true
}

// checkDepth bounds the nesting ResetChecked's pass follows; deeper values
// go to gjson.ValidBytes (the pass recurses once per level).
const checkDepth = 64

// checkIndex is index and gjson's check in one pass over s: ok is true
// when s is one valid JSON value (false: not accepted, which is not
// always invalid JSON, see ResetChecked); fieldwise is true when it is an
// object read field by field exactly as the whole decodes, as index
// decides (every key decodes, every number anywhere safeNumber), and then
// d.fields and d.sub hold what index lists.
func (d *Doc) checkIndex(s string) (ok, fieldwise bool) {
	i := skipSpace(s, 0)
	if i >= len(s) {
		return false, false
	}
	c := checker{safe: true}
	if s[i] != '{' {
		end := c.value(s, i, 0)
		return end >= 0 && skipSpace(s, end) == len(s), false
	}
	i = skipSpace(s, i+1)
	if i < len(s) && s[i] == '}' {
		return skipSpace(s, i+1) == len(s), true
	}
	for {
		if i >= len(s) || s[i] != '"' {
			return false, false
		}
		kEnd, key, ok := c.key(s, i)
		if !ok {
			return false, false
		}
		if i = skipSpace(s, kEnd); i >= len(s) || s[i] != ':' {
			return false, false
		}
		from := skipSpace(s, i+1)
		f := docField{name: key, from: uint32(from)}
		var to int
		if from < len(s) && s[from] == '{' {
			f.sub0 = uint32(len(d.sub))
			to = d.checkSub(&c, s, from)
			f.sub1, f.subOK = uint32(len(d.sub)), true
		} else {
			to = c.value(s, from, 1)
		}
		if to < 0 {
			return false, false
		}
		f.to = uint32(to)
		d.fields = append(d.fields, f)
		if i = skipSpace(s, to); i >= len(s) {
			return false, false
		}
		switch s[i] {
		case '}':
			return skipSpace(s, i+1) == len(s), c.safe
		case ',':
			i = skipSpace(s, i+1)
		default:
			return false, false
		}
	}
}

// checkSub is indexSub with the check: it appends the members of the
// object at s[i] to d.sub and returns the index just past it, -1 when it
// is not valid (or a key does not decode).
func (d *Doc) checkSub(c *checker, s string, i int) int {
	i = skipSpace(s, i+1)
	if i < len(s) && s[i] == '}' {
		return i + 1
	}
	for {
		if i >= len(s) || s[i] != '"' {
			return -1
		}
		kEnd, key, ok := c.key(s, i)
		if !ok {
			return -1
		}
		if i = skipSpace(s, kEnd); i >= len(s) || s[i] != ':' {
			return -1
		}
		from := skipSpace(s, i+1)
		to := c.value(s, from, 2)
		if to < 0 {
			return -1
		}
		d.sub = append(d.sub, docField{name: key, from: uint32(from), to: uint32(to)})
		if i = skipSpace(s, to); i >= len(s) {
			return -1
		}
		switch s[i] {
		case '}':
			return i + 1
		case ',':
			i = skipSpace(s, i+1)
		default:
			return -1
		}
	}
}

// checker checks JSON values (RFC 8259's grammar, as encoding/json's
// Valid does: a string's bytes are not checked as UTF-8) and notes
// whether every number it met is safe (safeNumber).
type checker struct {
	safe bool
}

// value returns the index just past the valid JSON value at s[i] (no
// white space before it), or -1; depth is the nesting of s[i].
func (c *checker) value(s string, i, depth int) int {
	if i >= len(s) {
		return -1
	}
	switch s[i] {
	case '"':
		return c.str(s, i)
	case '{':
		return c.object(s, i, depth+1)
	case '[':
		return c.array(s, i, depth+1)
	case 't':
		return literal(s, i, "true")
	case 'f':
		return literal(s, i, "false")
	case 'n':
		return literal(s, i, "null")
	}
	return c.number(s, i)
}

// literal returns the index just past lit at s[i], or -1.
func literal(s string, i int, lit string) int {
	if len(s)-i < len(lit) || s[i:i+len(lit)] != lit {
		return -1
	}
	return i + len(lit)
}

// object returns the index just past the valid object at s[i] ('{'), or -1.
func (c *checker) object(s string, i, depth int) int {
	if depth > checkDepth {
		return -1
	}
	i = skipSpace(s, i+1)
	if i < len(s) && s[i] == '}' {
		return i + 1
	}
	for {
		if i >= len(s) || s[i] != '"' {
			return -1
		}
		if i = c.str(s, i); i < 0 {
			return -1
		}
		if i = skipSpace(s, i); i >= len(s) || s[i] != ':' {
			return -1
		}
		if i = c.value(s, skipSpace(s, i+1), depth); i < 0 {
			return -1
		}
		if i = skipSpace(s, i); i >= len(s) {
			return -1
		}
		switch s[i] {
		case '}':
			return i + 1
		case ',':
			i = skipSpace(s, i+1)
		default:
			return -1
		}
	}
}

// array returns the index just past the valid array at s[i] ('['), or -1.
func (c *checker) array(s string, i, depth int) int {
	if depth > checkDepth {
		return -1
	}
	i = skipSpace(s, i+1)
	if i < len(s) && s[i] == ']' {
		return i + 1
	}
	for {
		if i = c.value(s, i, depth); i < 0 {
			return -1
		}
		if i = skipSpace(s, i); i >= len(s) {
			return -1
		}
		switch s[i] {
		case ']':
			return i + 1
		case ',':
			i = skipSpace(s, i+1)
		default:
			return -1
		}
	}
}

// strByte classifies a byte inside a JSON string literal for str and key:
// strPlain for a byte that stands for itself (0x20 and above, not '"' nor
// '\\'; bytes from 0x80 on are not checked as UTF-8, as encoding/json's
// Valid does not), strQuote, strEscape, or strBad (a control byte).
var strByte = func() (t [256]uint8) {
	for b := range t {
		switch {
		case b == '"':
			t[b] = strQuote
		case b == '\\':
			t[b] = strEscape
		case b < 0x20:
			t[b] = strBad
		}
	}
	return t
}()

const (
	strPlain = iota
	strQuote
	strEscape
	strBad
)

// str returns the index just past the valid string literal at s[i] ('"'),
// or -1: no byte below 0x20, every escape one of \" \\ \/ \b \f \n \r \t
// \uXXXX.
func (c *checker) str(s string, i int) int {
	end, _ := strEnd(s, i+1)
	return end
}

// key is str for an object's key at s[i]: it also returns the key's
// value as memberKey does (the bytes between the quotes when there is no
// escape and every byte is ASCII, else jsonString's decoding), from the
// same scan; ok is false when the literal is not valid or does not
// decode (memberKey's error).
func (c *checker) key(s string, i int) (end int, key string, ok bool) {
	end, plain := strEnd(s, i+1)
	if end < 0 {
		return -1, "", false
	}
	if plain {
		return end, s[i+1 : end-1], true
	}
	key, err := jsonString(s[i:end])
	return end, key, err == nil
}

// strEnd returns the index just past the closing quote of the string
// literal whose content starts at s[i], or -1 when it is not valid (see
// str); plain is true when the content has no escape and no byte from
// 0x80 on (memberKey and jsonString then take its bytes as they are).
// It reads eight bytes at a time while none of them is a quote, a
// backslash or a control byte (specialBytes), and byte by byte from the
// first one that is.
func strEnd(s string, i int) (end int, plain bool) {
	var high uint64 // the OR of the plain bytes: bit 7 of a byte set for a non-ASCII one
	plain = true
	for i < len(s) {
		if len(s)-i >= 8 {
			x := load64(s, i)
			m := specialBytes(x)
			if m == 0 {
				high |= x
				i += 8
				continue
			}
			// The bytes before the first special one are plain.
			k := bits.TrailingZeros64(m) / 8
			high |= x & (1<<(8*k) - 1)
			i += k
		}
		b := s[i]
		switch strByte[b] {
		case strPlain:
			high |= uint64(b)
			i++
			continue
		case strQuote:
			return i + 1, plain && high&swarHighs == 0
		case strBad:
			return -1, false
		}
		// An escape.
		plain = false
		if i++; i >= len(s) {
			return -1, false
		}
		switch s[i] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		case 'u':
			if len(s)-i < 5 || !isHex(s[i+1]) || !isHex(s[i+2]) || !isHex(s[i+3]) || !isHex(s[i+4]) {
				return -1, false
			}
			i += 4
		default:
			return -1, false
		}
		i++
	}
	return -1, false
}

// Byte-parallel constants for eight bytes in a uint64 (specialBytes).
const (
	swarOnes  = 0x0101010101010101
	swarHighs = 0x8080808080808080
)

// load64 returns s[i:i+8] as a little-endian uint64 (s[i] in the low
// byte); the compiler makes it one load.
func load64(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// specialBytes returns, for eight bytes of a string literal's content
// (load64), a word whose bit 7 of byte k is set when byte k is a quote, a
// backslash or a control byte (below 0x20), at least for the first such
// byte: the lowest bit set is exact (a byte above a special one may be
// flagged when it is not, from the subtraction's borrow), and the word is
// 0 when none of the eight is special. Bytes from 0x80 on are not
// special.
func specialBytes(x uint64) uint64 {
	q := x ^ (swarOnes * '"')
	e := x ^ (swarOnes * '\\')
	return ((q-swarOnes)&^q | (e-swarOnes)&^e | (x-swarOnes*0x20)&^x) & swarHighs
}

func isHex(b byte) bool {
	return (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F')
}

// number returns the index just past the valid number at s[i], or -1
// (-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?); a number with an
// exponent or a run of more than 300 digits clears c.safe (safeNumber).
func (c *checker) number(s string, i int) int {
	if i < len(s) && s[i] == '-' {
		i++
	}
	if i >= len(s) {
		return -1
	}
	switch {
	case s[i] == '0':
		i++
	case s[i] >= '1' && s[i] <= '9':
		i = c.digits(s, i)
	default:
		return -1
	}
	if i < len(s) && s[i] == '.' {
		if i++; i >= len(s) || s[i] < '0' || s[i] > '9' {
			return -1
		}
		i = c.digits(s, i)
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		c.safe = false
		if i++; i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if i >= len(s) || s[i] < '0' || s[i] > '9' {
			return -1
		}
		i = c.digits(s, i)
	}
	return i
}

// digits returns the index of the first byte from s[i] on that is not a
// digit, clearing c.safe when there are more than 300.
func (c *checker) digits(s string, i int) int {
	j := i
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	if j-i > 300 {
		c.safe = false
	}
	return j
}
