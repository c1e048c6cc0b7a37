package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/kstreamd/kstreamd/sdk"
)

// csvParams are the csv format's format_params: the names of the columns,
// in order. At a source each line becomes a JSON object with these fields
// (a column that parses as a number is a number, anything else a string);
// at a sink the same fields of each JSON object are written as one line.
type csvParams struct {
	Fields []string `yaml:"fields"`
}

// CheckParams implements sdk.ParamsChecker: fields is required and each
// name appears once.
func (p *csvParams) CheckParams(report func(field, msg string)) {
	if len(p.Fields) == 0 {
		report("fields", "required: the column names, in order")
	}
	seen := map[string]bool{}
	for i, f := range p.Fields {
		if f == "" || seen[f] {
			report(fmt.Sprintf("fields[%d]", i), fmt.Sprintf("%q: empty or named twice", f))
		}
		seen[f] = true
	}
}

// reasonCSVFields is the bad-record reason of a line whose column count is
// not len(fields), or that is no CSV at all.
const reasonCSVFields = "csv_fields"

// csvFormatFactory declares the format `csv` (format: csv,
// format_params: {fields: [...]}): one RFC 4180 line per value, read and
// written with the standard library's encoding/csv.
func csvFormatFactory() sdk.FormatFactory {
	return sdk.FormatFactory{
		Type:    "csv",
		Doc:     "one CSV line per value, its columns named by format_params.fields (numbers become JSON numbers); a line of another column count is a bad record with reason csv_fields",
		Params:  func() any { return &csvParams{} },
		Reasons: []string{reasonCSVFields},
		New: func(ctx sdk.FormatContext) (sdk.Format, error) {
			return csvFormat{fields: ctx.Params.(*csvParams).Fields}, nil
		},
	}
}

// csvFormat implements sdk.Format for one source or sink subtask.
type csvFormat struct{ fields []string }

// Decode turns a CSV line into a JSON object of the configured fields; a
// line of another column count is a *sdk.RecordError with reason
// csv_fields, which meets the source's on_error policy.
func (f csvFormat) Decode(_ context.Context, rec *sdk.Record) error {
	r := csv.NewReader(bytes.NewReader(rec.Value))
	r.FieldsPerRecord = len(f.fields)
	cols, err := r.Read()
	if err != nil {
		return &sdk.RecordError{Reason: reasonCSVFields, Detail: err.Error()}
	}
	obj := make(map[string]any, len(cols))
	for i, c := range cols {
		if n, err := strconv.ParseFloat(c, 64); err == nil {
			obj[f.fields[i]] = json.Number(strconv.FormatFloat(n, 'f', -1, 64))
		} else {
			obj[f.fields[i]] = c
		}
	}
	v, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	rec.Value = v
	return nil
}

// Encode writes the configured fields of a JSON object as one CSV line (no
// trailing newline); a missing field is an empty column, a number or
// string is written as it reads, anything else as its JSON.
func (f csvFormat) Encode(_ context.Context, _ string, rec *sdk.Record) error {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(rec.Value, &obj); err != nil {
		return &sdk.RecordError{Reason: reasonCSVFields, Detail: "a csv sink needs a JSON object: " + err.Error()}
	}
	cols := make([]string, len(f.fields))
	for i, name := range f.fields {
		raw, ok := obj[name]
		if !ok {
			continue
		}
		var s string
		if json.Unmarshal(raw, &s) == nil {
			cols[i] = s
		} else {
			cols[i] = string(raw)
		}
	}
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	if err := w.Write(cols); err != nil {
		return err
	}
	w.Flush()
	rec.Value = bytes.TrimSuffix(b.Bytes(), []byte("\n"))
	return nil
}
