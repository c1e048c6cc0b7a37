package filesink

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/tidwall/gjson"

	"github.com/kstreamd/kstreamd/runtime"
)

// Format names a part file format.
type Format string

// Formats.
const (
	// FormatJSONLines writes one JSON value per line ("\n"-terminated,
	// UTF-8): a JSON record value compacted onto one line, a text value as
	// a JSON string (Flink's row-format SimpleStringEncoder, for JSON).
	FormatJSONLines Format = "json_lines"
	// FormatParquet writes Apache Parquet files with the configured
	// columns (Flink's bulk format ParquetWriterFactory), through
	// parquet-go.
	FormatParquet Format = "parquet"
)

// ColumnType is the type of a Parquet column.
type ColumnType string

// Column types. Every column is optional: a field that is absent or null
// is a null.
const (
	// ColumnString: a UTF-8 string (logical type STRING). A JSON value that
	// is not a string is stored as its JSON text.
	ColumnString ColumnType = "string"
	// ColumnInt64: a signed 64-bit integer; a JSON number with a fraction
	// or a string that is no integer is refused.
	ColumnInt64 ColumnType = "int64"
	// ColumnDouble: a 64-bit float from a JSON number.
	ColumnDouble ColumnType = "double"
	// ColumnBoolean: a JSON true or false.
	ColumnBoolean ColumnType = "boolean"
	// ColumnTimestamp: milliseconds since the Unix epoch (logical type
	// TIMESTAMP(MILLIS, UTC)), from a JSON integer of milliseconds or an
	// RFC 3339 string.
	ColumnTimestamp ColumnType = "timestamp"
	// ColumnJSON: the field's JSON text (logical type JSON).
	ColumnJSON ColumnType = "json"
)

// ColumnTypes lists the column types.
var ColumnTypes = []ColumnType{ColumnString, ColumnInt64, ColumnDouble, ColumnBoolean, ColumnTimestamp, ColumnJSON}

// Column is one Parquet column.
type Column struct {
	// Name is the column name. Required, unique.
	Name string
	// Type is one of ColumnTypes.
	Type ColumnType
	// Field is the gjson path of the value's field the column holds
	// ("a.b" for a nested field). Empty means Name. The special paths
	// "$key", "$timestamp" and "$value" are the record key (a string),
	// timestamp and whole value.
	Field string
}

// encoder writes records into one part in a format.
type encoder interface {
	// Write adds rec. A record the format cannot hold is a
	// *runtime.RecordError.
	Write(rec runtime.Record) error
	// Size is the bytes written so far, an estimate for buffering formats.
	Size() int64
	// Close finishes the file (flushes, writes a footer); the part is then
	// complete.
	Close() error
}

// newEncoder returns an encoder of f over w.
type newEncoder func(w io.Writer) encoder

type jsonLines struct {
	w    *bufio.Writer
	size int64
	buf  bytes.Buffer
}

func newJSONLines(w io.Writer) encoder { return &jsonLines{w: bufio.NewWriterSize(w, 64<<10)} }

func (j *jsonLines) Write(rec runtime.Record) error {
	j.buf.Reset()
	switch {
	case rec.Format == runtime.FormatText:
		b, _ := json.Marshal(string(rec.Value))
		j.buf.Write(b)
	case len(rec.Value) == 0:
		j.buf.WriteString("null")
	case bytes.ContainsAny(rec.Value, "\r\n"):
		if err := json.Compact(&j.buf, rec.Value); err != nil {
			return &runtime.RecordError{Reason: runtime.ReasonMalformedJSON, Detail: "file sink: " + err.Error()}
		}
	default:
		j.buf.Write(rec.Value)
	}
	j.buf.WriteByte('\n')
	n, err := j.w.Write(j.buf.Bytes())
	j.size += int64(n)
	return err
}

func (j *jsonLines) Size() int64  { return j.size }
func (j *jsonLines) Close() error { return j.w.Flush() }

// parquetSchema builds the Parquet schema of cols, in their order (the
// config's); every column is optional. index maps each column of cols to
// its leaf index.
func parquetSchema(cols []Column) (*parquet.Schema, []int) {
	g := parquet.Group{}
	for _, c := range cols {
		var n parquet.Node
		switch c.Type {
		case ColumnInt64:
			n = parquet.Int(64)
		case ColumnDouble:
			n = parquet.Leaf(parquet.DoubleType)
		case ColumnBoolean:
			n = parquet.Leaf(parquet.BooleanType)
		case ColumnTimestamp:
			n = parquet.Timestamp(parquet.Millisecond)
		case ColumnJSON:
			n = parquet.JSON()
		default:
			n = parquet.String()
		}
		g[c.Name] = parquet.Optional(n)
	}
	schema := parquet.NewSchema("record", newOrderedGroup(g, cols))
	index := make([]int, len(cols))
	for i, c := range cols {
		leaf, ok := schema.Lookup(c.Name)
		if !ok {
			panic("filesink: column missing from its own schema: " + c.Name)
		}
		index[i] = leaf.ColumnIndex
	}
	return schema, index
}

// orderedGroup is a parquet.Group whose fields come in the order of the
// columns configured, not sorted by name as parquet.Group's do (readers
// show a file's columns in its schema's order).
type orderedGroup struct {
	parquet.Group
	fields []parquet.Field
}

// newOrderedGroup returns g with its fields in the order of cols (each
// column's Name is a field of g).
func newOrderedGroup(g parquet.Group, cols []Column) orderedGroup {
	byName := map[string]parquet.Field{}
	for _, f := range g.Fields() {
		byName[f.Name()] = f
	}
	o := orderedGroup{Group: g, fields: make([]parquet.Field, len(cols))}
	for i, c := range cols {
		o.fields[i] = byName[c.Name]
	}
	return o
}

// Fields implements parquet.Node: the fields in the columns' order.
func (g orderedGroup) Fields() []parquet.Field { return g.fields }

// GoType implements parquet.Node: a struct of the fields in order.
func (g orderedGroup) GoType() reflect.Type {
	fs := make([]reflect.StructField, len(g.fields))
	for i, f := range g.fields {
		fs[i] = reflect.StructField{Name: fmt.Sprintf("F%d", i), Type: f.GoType(), Tag: reflect.StructTag(`parquet:` + strconv.Quote(f.Name()))}
	}
	return reflect.StructOf(fs)
}

// String implements parquet.Node: the message of the fields in order.
func (g orderedGroup) String() string {
	var b strings.Builder
	_ = parquet.PrintSchema(&b, "", g)
	return b.String()
}

type parquetEncoder struct {
	cols   []Column
	index  []int
	w      *parquet.Writer
	b      *parquet.RowBuilder
	row    []parquet.Row
	schema *parquet.Schema
}

// parquetRowGroupRows bounds a row group: the writer buffers the open row
// group in memory, so this (times the row size, times the open parts)
// bounds the sink's buffer rather than max_part_bytes.
const parquetRowGroupRows = 64 << 10

// newParquet returns the encoder factory of cols, compressed with zstd, in
// row groups of at most parquetRowGroupRows rows.
func newParquet(cols []Column) newEncoder {
	schema, index := parquetSchema(cols)
	return func(w io.Writer) encoder {
		return &parquetEncoder{cols: cols, index: index, schema: schema,
			w: parquet.NewWriter(w, schema, parquet.Compression(&parquet.Zstd), parquet.MaxRowsPerRowGroup(parquetRowGroupRows)),
			b: parquet.NewRowBuilder(schema), row: make([]parquet.Row, 1)}
	}
}

func (p *parquetEncoder) Write(rec runtime.Record) error {
	p.b.Reset()
	for i, c := range p.cols {
		v, err := columnValue(c, rec)
		if err != nil {
			return &runtime.RecordError{Reason: runtime.ReasonWrongType, Detail: fmt.Sprintf("file sink: column %s (%s): %v", c.Name, c.Type, err)}
		}
		if !v.IsNull() {
			p.b.Add(p.index[i], v)
		}
	}
	p.row[0] = p.b.AppendRow(p.row[0][:0])
	_, err := p.w.WriteRows(p.row)
	return err
}

func (p *parquetEncoder) Size() int64  { return p.w.Size() }
func (p *parquetEncoder) Close() error { return p.w.Close() }

// columnValue extracts c's value from rec.
func columnValue(c Column, rec runtime.Record) (parquet.Value, error) {
	field := c.Field
	if field == "" {
		field = c.Name
	}
	var r gjson.Result
	switch field {
	case "$key":
		if rec.Key == nil {
			return parquet.NullValue(), nil
		}
		r = gjson.Result{Type: gjson.String, Str: string(rec.Key), Raw: strconv.Quote(string(rec.Key))}
	case "$timestamp":
		ms := rec.Timestamp.UnixMilli()
		r = gjson.Result{Type: gjson.Number, Num: float64(ms), Raw: strconv.FormatInt(ms, 10)}
	case "$value":
		if rec.Format == runtime.FormatText {
			r = gjson.Result{Type: gjson.String, Str: string(rec.Value), Raw: strconv.Quote(string(rec.Value))}
		} else {
			r = gjson.ParseBytes(rec.Value)
		}
	default:
		if rec.Format == runtime.FormatText {
			return parquet.NullValue(), nil
		}
		r = gjson.GetBytes(rec.Value, field)
	}
	if !r.Exists() || r.Type == gjson.Null {
		return parquet.NullValue(), nil
	}
	switch c.Type {
	case ColumnString:
		if r.Type == gjson.String {
			return parquet.ByteArrayValue([]byte(r.Str)), nil
		}
		return parquet.ByteArrayValue([]byte(r.Raw)), nil
	case ColumnJSON:
		return parquet.ByteArrayValue([]byte(r.Raw)), nil
	case ColumnInt64:
		n, err := strconv.ParseInt(rawNumber(r), 10, 64)
		if err != nil {
			return parquet.Value{}, fmt.Errorf("%s is no 64-bit integer", r.Raw)
		}
		return parquet.Int64Value(n), nil
	case ColumnDouble:
		f, err := strconv.ParseFloat(rawNumber(r), 64)
		if err != nil {
			return parquet.Value{}, fmt.Errorf("%s is no number", r.Raw)
		}
		return parquet.DoubleValue(f), nil
	case ColumnBoolean:
		if r.Type != gjson.True && r.Type != gjson.False {
			return parquet.Value{}, fmt.Errorf("%s is no boolean", r.Raw)
		}
		return parquet.BooleanValue(r.Type == gjson.True), nil
	case ColumnTimestamp:
		if r.Type == gjson.String {
			t, err := time.Parse(time.RFC3339Nano, r.Str)
			if err != nil {
				return parquet.Value{}, fmt.Errorf("%s is no RFC 3339 time", r.Raw)
			}
			return parquet.Int64Value(t.UnixMilli()), nil
		}
		n, err := strconv.ParseInt(rawNumber(r), 10, 64)
		if err != nil {
			return parquet.Value{}, fmt.Errorf("%s is neither integer milliseconds nor an RFC 3339 string", r.Raw)
		}
		return parquet.Int64Value(n), nil
	}
	return parquet.Value{}, fmt.Errorf("unknown column type %q", c.Type)
}

// rawNumber returns r's text for a JSON number, else "" (which no number
// parser takes).
func rawNumber(r gjson.Result) string {
	if r.Type != gjson.Number {
		return ""
	}
	return r.Raw
}
