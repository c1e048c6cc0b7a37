package runtime

// ValidJSON is the decoded form (Record.SetDecoded) of a record value
// known to be one valid JSON value, nothing of it decoded yet: a Kafka
// source of format json attaches it once it checked the value, and an
// operator that wrote the value as JSON itself attaches it, so that the
// first operator of the chain to read the value does not check it again
// (the JSON is checked once per record per chain). It is the one decoded
// form that crosses a channel: a Writer turns it into a mark that holds no
// pointer into the sending chain (sentValidJSON), and the receiving
// OperatorTask attaches ValidJSON again in a slot of its own, so an
// operator after a key_by does not check the JSON again either.
type ValidJSON struct{}

// sentValidJSON is the decoded form a Writer leaves on a record it sends
// whose value was marked ValidJSON: shared by every such record, tied to
// no bytes (n is -1, so Decoded and TakeDecoded never return it), and
// never written. OperatorTask.record turns it back into ValidJSON for the
// record's own bytes (DecodedSlot); anything else receiving the record
// sees no decoded form, as before.
var sentValidJSON = &decodedValue{n: -1, v: ValidJSON{}}

// JSONChecker is a decoded form (Record.SetDecoded) that may know its
// bytes to be one valid JSON value: a Kafka source's shared
// expression.Doc, or one an operator's expressions read and handed on.
// CheckedJSON reports whether they are (checked by a source, or read whole
// or field by field and found valid); a Record whose decoded form says so
// counts as marked ValidJSON (Record.CheckedJSON), and a Writer sends it
// with ValidJSON's mark.
type JSONChecker interface {
	CheckedJSON() bool
}

// CheckedJSON reports whether r's value is known to be one valid JSON
// value: its decoded form is ValidJSON, or a JSONChecker whose CheckedJSON
// is true. It allocates nothing.
func (r *Record) CheckedJSON() bool {
	if r.decoded == nil {
		return false
	}
	v, ok := r.Decoded()
	if !ok {
		return false
	}
	switch d := v.(type) {
	case ValidJSON:
		return true
	case JSONChecker:
		return d.CheckedJSON()
	}
	return false
}

// sendDecoded returns the decoded form a Writer sends r with: sentValidJSON
// when r's value is known valid JSON (CheckedJSON: marked ValidJSON, or a
// decoded form that checked it), else nil (a decoded value stays within
// its chain).
func (r *Record) sendDecoded() *decodedValue {
	if r.CheckedJSON() {
		return sentValidJSON
	}
	return nil
}

// receiveDecoded is the receiving side of sendDecoded: a record sent with
// sentValidJSON gets ValidJSON for its bytes, kept in slot.
func (r *Record) receiveDecoded(slot *DecodedSlot) {
	if r.decoded == sentValidJSON {
		r.SetDecodedIn(slot, ValidJSON{})
	}
}

// TakeDecoded gives r the decoded form attached to from (SetDecoded) when
// from's value is r's (the same bytes, not equal ones); otherwise r is
// left as it is. It copies no value and allocates nothing: for a subtask
// that evaluates on a scratch copy of its record.
func (r *Record) TakeDecoded(from *Record) {
	if d := from.decoded; d != nil && d.n == len(r.Value) && (d.n == 0 || d.of == &r.Value[0]) {
		r.decoded = d
	}
}

// DecodedSlot holds a decoded form that a subtask attaches to record after
// record without allocating (SetDecodedIn): each record given the slot
// reads it back (Decoded) only while the slot describes that record's
// bytes; once it holds the next record's, Decoded on an earlier record
// returns false, as for a record nothing was attached to. Only for the
// subtask's own goroutine, which runs its chain (a Writer drops the
// decoded form, so it never crosses a channel; only ValidJSON's mark does,
// which points to no slot).
type DecodedSlot struct{ d decodedValue }

// Clear makes the slot describe no record: Decoded on every record given
// the slot returns false from now on, until the slot is given again. For a
// subtask about to change (reuse) the value it keeps in the slot.
func (s *DecodedSlot) Clear() { s.d = decodedValue{n: -1} }

// SetDecodedIn is SetDecoded keeping v in slot instead of a new
// allocation; see DecodedSlot.
func (r *Record) SetDecodedIn(slot *DecodedSlot, v any) {
	slot.d = decodedValue{n: len(r.Value), v: v}
	if len(r.Value) > 0 {
		slot.d.of = &r.Value[0]
	}
	r.decoded = &slot.d
}

// ReusableJSON is a decoded form of a JSON record value that a source
// resets for each record it emits and hands to every operator chained to
// it, so the value is indexed once per record however many branches read
// it (expression.Doc implements it: the source declares what it needs and
// does not import expression, STYLE.md section 1). Reset ties it to value,
// whose JSON was checked already when valid is true.
type ReusableJSON interface {
	Reset(value []byte, valid bool)
}

// CheckingJSON is a ReusableJSON that can check a value's JSON in the
// pass that indexes it (expression.Doc does): ResetChecked ties it to
// value as Reset(value, true) does when value is one valid JSON value, and
// returns whether it is, with the verdict of encoding/json's Valid (and
// gjson.ValidBytes); after false the form must not be read. A source that
// would check the JSON and then hand the record to readers that index it
// reads the value once instead of twice.
type CheckingJSON interface {
	ReusableJSON
	ResetChecked(value []byte) bool
}
