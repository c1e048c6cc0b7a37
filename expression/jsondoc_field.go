package expression

// Fieldwise reports whether d's value is a JSON object whose top-level
// fields d reads one by one (Field) exactly as [DecodeJSON] decodes the
// whole value: then [Doc.Whole] is a map[string]any holding, under each
// name Field finds, the value Field returns. It indexes the fields on
// first call (one pass over the JSON, nothing decoded). False for invalid
// JSON, a value that is not an object, and an object holding a number
// DecodeJSON could refuse; Whole then gives what DecodeJSON gives (or the
// string of the bytes). For an operator that hands a record's value to an
// expression as one field of a larger value (a join's left and right).
func (d *Doc) Fieldwise() bool {
	d.look()
	return d.state > 0
}

// Field returns the top-level field name of d's value, decoded alone and
// kept for the next read: its value and found true, or found false when the
// object has no such field (of a repeated name the last value, as
// DecodeJSON's map keeps it). ok is false when the value is not read field
// by field (Fieldwise false): then the caller reads Whole instead.
func (d *Doc) Field(name string) (v any, found, ok bool) { return d.field(name) }
