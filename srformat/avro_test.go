package srformat

import (
	"context"
	"encoding/binary"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/twmb/avro"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/kstreamd/kstreamd/runtime"
)

// orderV1 has a nested record, a union, an array, timestamp-millis and
// decimal: the acceptance schema of issue 24.
const orderV1 = `{"type":"record","name":"Order","namespace":"shop","fields":[
 {"name":"id","type":"long"},
 {"name":"customer","type":{"type":"record","name":"Customer","fields":[
   {"name":"name","type":"string"},
   {"name":"tier","type":{"type":"enum","name":"Tier","symbols":["BRONZE","SILVER","GOLD"]}}]}},
 {"name":"coupon","type":["null","string"],"default":null},
 {"name":"items","type":{"type":"array","items":"string"}},
 {"name":"placed_at","type":{"type":"long","logicalType":"timestamp-millis"}},
 {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}}]}`

// orderV2 adds a field with a default (a compatible writer change).
const orderV2 = `{"type":"record","name":"Order","namespace":"shop","fields":[
 {"name":"id","type":"long"},
 {"name":"customer","type":{"type":"record","name":"Customer","fields":[
   {"name":"name","type":"string"},
   {"name":"tier","type":{"type":"enum","name":"Tier","symbols":["BRONZE","SILVER","GOLD"]}}]}},
 {"name":"coupon","type":["null","string"],"default":null},
 {"name":"items","type":{"type":"array","items":"string"}},
 {"name":"placed_at","type":{"type":"long","logicalType":"timestamp-millis"}},
 {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}},
 {"name":"channel","type":"string","default":"web"}]}`

func newTestRegistry(t *testing.T) (*srfake.Registry, *Registry) { return newTestRegistryB(t) }

func newTestRegistryB(t testing.TB) (*srfake.Registry, *Registry) {
	t.Helper()
	fake := srfake.New()
	t.Cleanup(fake.Close)
	reg, err := NewRegistry(RegistryConfig{URLs: []string{fake.URL()}, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return fake, reg
}

func register(t *testing.T, fake *srfake.Registry, subject string, typ sr.SchemaType, text string) int {
	t.Helper()
	id, _, err := fake.RegisterSchema(subject, sr.Schema{Schema: text, Type: typ})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// frame encodes v (a Go value twmb/avro takes) with text, framed with id,
// independently of the code under test.
func frame(t *testing.T, id int, text string, v any) []byte {
	t.Helper()
	s := avro.MustParse(text)
	body, err := s.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	out := []byte{0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(out[1:], uint32(id))
	return append(out, body...)
}

func order(id int64, coupon *string, amount string) map[string]any {
	r, _ := new(big.Rat).SetString(amount)
	m := map[string]any{
		"id":        id,
		"customer":  map[string]any{"name": "ann", "tier": "GOLD"},
		"items":     []any{"a", "b"},
		"placed_at": time.UnixMilli(1700000000123).UTC(),
		"amount":    r,
	}
	if coupon != nil {
		m["coupon"] = *coupon
	} else {
		m["coupon"] = nil
	}
	return m
}

func TestAvroDecodeJSONShape(t *testing.T) {
	fake, reg := newTestRegistry(t)
	id := register(t, fake, "orders-value", sr.TypeAvro, orderV1)
	d, err := NewDecoder(DecoderConfig{Kind: KindAvro, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	c := "SAVE10"
	for _, tc := range []struct {
		in   map[string]any
		want string
	}{
		{order(7, &c, "1234.5"), `{"id":7,"customer":{"name":"ann","tier":"GOLD"},"coupon":"SAVE10","items":["a","b"],"placed_at":1700000000123,"amount":"1234.50"}`},
		{order(-1, nil, "-0.07"), `{"id":-1,"customer":{"name":"ann","tier":"GOLD"},"coupon":null,"items":["a","b"],"placed_at":1700000000123,"amount":"-0.07"}`},
	} {
		got, err := d.Decode(context.Background(), nil, frame(t, id, orderV1, tc.in))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tc.want {
			t.Errorf("decoded\n%s\nwant\n%s", got, tc.want)
		}
	}
}

func TestAvroLogicalTypesRoundTrip(t *testing.T) {
	const schema = `{"type":"record","name":"L","fields":[
	 {"name":"d","type":{"type":"int","logicalType":"date"}},
	 {"name":"tm","type":{"type":"long","logicalType":"timestamp-micros"}},
	 {"name":"tms","type":["null",{"type":"long","logicalType":"timestamp-millis"}]},
	 {"name":"t","type":{"type":"int","logicalType":"time-millis"}},
	 {"name":"fx","type":{"type":"fixed","name":"F4","size":4,"logicalType":"decimal","precision":9,"scale":3}},
	 {"name":"u","type":{"type":"string","logicalType":"uuid"}},
	 {"name":"b","type":"bytes"},
	 {"name":"f","type":"float"},
	 {"name":"x","type":"double"},
	 {"name":"m","type":{"type":"map","values":"int"}},
	 {"name":"un","type":["null","int","string",{"type":"record","name":"R","fields":[{"name":"a","type":"int"}]}]}]}`
	fake, reg := newTestRegistry(t)
	id := register(t, fake, "l-value", sr.TypeAvro, schema)
	enc, err := NewEncoder(context.Background(), EncoderConfig{Kind: KindAvro, Registry: reg, Subject: "l-value", Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if enc.SchemaID() != id {
		t.Fatalf("encoder id %d, registered %d", enc.SchemaID(), id)
	}
	d, _ := NewDecoder(DecoderConfig{Kind: KindAvro, Registry: reg})
	for _, in := range []string{
		`{"d":"2024-02-29","tm":1700000000123456,"tms":1700000000123,"t":45296789,"fx":"-12.345","u":"6ba7b810-9dad-11d1-80b4-00c04fd430c8","b":"AAEC/w==","f":1.5,"x":0.1,"m":{"a":1,"b":-2},"un":{"a":5}}`,
		`{"d":"1969-12-31","tm":-1,"tms":null,"t":0,"fx":"0.000","u":"","b":"","f":"NaN","x":"-Infinity","m":{},"un":"s"}`,
		`{"d":"2024-02-29","tm":0,"tms":0,"t":0,"fx":"1.000","u":"","b":"","f":0,"x":1e+300,"m":{},"un":3}`,
	} {
		framed, err := enc.Encode(nil, []byte(in))
		if err != nil {
			t.Fatalf("encode %s: %v", in, err)
		}
		out, err := d.Decode(context.Background(), nil, framed)
		if err != nil {
			t.Fatalf("decode %s: %v", in, err)
		}
		if string(out) != in {
			t.Errorf("round trip\n in  %s\n out %s", in, out)
		}
	}
	// encoding also takes a JSON number for a decimal and days for a date
	framed, err := enc.Encode(nil, []byte(`{"d":1,"tm":0,"tms":null,"t":0,"fx":2.5,"u":"","b":"","f":0,"x":0,"m":{},"un":null}`))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := d.Decode(context.Background(), nil, framed)
	if want := `{"d":"1970-01-02","tm":0,"tms":null,"t":0,"fx":"2.500","u":"","b":"","f":0,"x":0,"m":{},"un":null}`; string(out) != want {
		t.Errorf("got %s want %s", out, want)
	}
}

func TestAvroEncodeErrors(t *testing.T) {
	fake, reg := newTestRegistry(t)
	register(t, fake, "orders-value", sr.TypeAvro, orderV1)
	enc, err := NewEncoder(context.Background(), EncoderConfig{Kind: KindAvro, Registry: reg, Subject: "orders-value"})
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{
		`{"id":1}`: "missing field customer",
		`{"id":"x","customer":{"name":"a","tier":"GOLD"},"items":[],"placed_at":0,"amount":"1"}`:          "value.id: a string is not an integer",
		`{"id":1,"customer":{"name":"a","tier":"PLATINUM"},"items":[],"placed_at":0,"amount":"1"}`:        "value.customer.tier: a string is not a symbol of enum Tier",
		`{"id":1,"customer":{"name":"a","tier":"GOLD"},"coupon":5,"items":[],"placed_at":0,"amount":"1"}`: "no union branch fits",
		`{"id":1,"customer":{"name":"a","tier":"GOLD"},"items":["a",2],"placed_at":0,"amount":"1"}`:       "value.items[1]: a number is not a string",
		`[1]`: "an array is not an object",
		`{"id":1,"customer":{"name":"a","tier":"GOLD"},"items":[],"placed_at":0,"amount":"abc"}`: "not a decimal",
	} {
		_, err := enc.Encode(nil, []byte(in))
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "subject orders-value") {
			t.Errorf("encode %s: %v, want an error containing %q", in, err, want)
		}
	}
	// a missing field with a default takes it
	framed, err := enc.Encode(nil, []byte(`{"id":1,"customer":{"name":"a","tier":"GOLD"},"items":[],"placed_at":0,"amount":"1"}`))
	if err != nil {
		t.Fatal(err)
	}
	d, _ := NewDecoder(DecoderConfig{Kind: KindAvro, Registry: reg})
	out, _ := d.Decode(context.Background(), nil, framed)
	if want := `{"id":1,"customer":{"name":"a","tier":"GOLD"},"coupon":null,"items":[],"placed_at":0,"amount":"1.00"}`; string(out) != want {
		t.Errorf("got %s want %s", out, want)
	}
}

// TestAvroWriterSchemaChange: a writer schema change mid-stream (v2 adds a
// field with a default) decodes in each writer's shape without a reader
// schema, and in the reader's shape with one, in both directions.
func TestAvroWriterSchemaChange(t *testing.T) {
	fake, reg := newTestRegistry(t)
	id1 := register(t, fake, "orders-value", sr.TypeAvro, orderV1)
	id2 := register(t, fake, "orders-value", sr.TypeAvro, orderV2)
	if id1 == id2 {
		t.Fatal("same id for two schemas")
	}
	v1 := frame(t, id1, orderV1, order(1, nil, "1"))
	o2 := order(2, nil, "2")
	o2["channel"] = "app"
	v2 := frame(t, id2, orderV2, o2)
	const base = `"customer":{"name":"ann","tier":"GOLD"},"coupon":null,"items":["a","b"],"placed_at":1700000000123,`
	plain, _ := NewDecoder(DecoderConfig{Kind: KindAvro, Registry: reg})
	withV2, err := NewDecoder(DecoderConfig{Kind: KindAvro, Registry: reg, ReaderSchema: orderV2})
	if err != nil {
		t.Fatal(err)
	}
	withV1, _ := NewDecoder(DecoderConfig{Kind: KindAvro, Registry: reg, ReaderSchema: orderV1})
	for _, tc := range []struct {
		d    *Decoder
		in   []byte
		want string
	}{
		{plain, v1, `{"id":1,` + base + `"amount":"1.00"}`},
		{plain, v2, `{"id":2,` + base + `"amount":"2.00","channel":"app"}`},
		{withV2, v1, `{"id":1,` + base + `"amount":"1.00","channel":"web"}`},
		{withV2, v2, `{"id":2,` + base + `"amount":"2.00","channel":"app"}`},
		{withV1, v2, `{"id":2,` + base + `"amount":"2.00"}`},
	} {
		got, err := tc.d.Decode(context.Background(), nil, tc.in)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tc.want {
			t.Errorf("got  %s\nwant %s", got, tc.want)
		}
	}
	// a reader the writer cannot resolve to: decode_error naming the id
	bad, _ := NewDecoder(DecoderConfig{Kind: KindAvro, Registry: reg, ReaderSchema: `{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"nope","type":"int"}]}`})
	_, err = bad.Decode(context.Background(), nil, v1)
	var de *DecodeError
	if !errors.As(err, &de) || de.Reason != ReasonDecodeError || de.SchemaID != id1 || !strings.Contains(de.Detail(), "schema id 1: ") {
		t.Fatalf("got %v", err)
	}
}

func TestDecodeErrorReasons(t *testing.T) {
	fake, reg := newTestRegistry(t)
	id := register(t, fake, "orders-value", sr.TypeAvro, orderV1)
	d, _ := NewDecoder(DecoderConfig{Kind: KindAvro, Registry: reg})
	good := frame(t, id, orderV1, order(1, nil, "1"))
	unknown := append([]byte(nil), good...)
	binary.BigEndian.PutUint32(unknown[1:], 4242)
	for _, tc := range []struct {
		name   string
		in     []byte
		reason string
		id     int
		detail string
	}{
		{"unknown id", unknown, ReasonSchemaNotFound, 4242, "schema id 4242: schema not found"},
		{"truncated", good[:len(good)-3], ReasonDecodeError, id, "schema id 1: "},
		{"trailing", append(append([]byte(nil), good...), 9), ReasonDecodeError, id, "1 bytes left after the value"},
		{"no magic", []byte(`{"id":1}`), ReasonDecodeError, -1, "not in the Confluent wire format"},
		{"short", []byte{0, 0, 1}, ReasonDecodeError, -1, "not in the Confluent wire format"},
	} {
		_, err := d.Decode(context.Background(), nil, tc.in)
		var de *DecodeError
		if !errors.As(err, &de) {
			t.Fatalf("%s: %v is not a *DecodeError", tc.name, err)
		}
		if de.Reason != tc.reason || de.SchemaID != tc.id || !strings.Contains(de.Detail(), tc.detail) {
			t.Errorf("%s: reason %s id %d detail %q; want %s %d %q", tc.name, de.Reason, de.SchemaID, de.Detail(), tc.reason, tc.id, tc.detail)
		}
	}
	// the unknown id is remembered: registering it later shows after NotFoundTTL only
	// (the cache is per Registry; a new registry sees it at once)
	fake.SeedSchema("late-value", 1, 4242, sr.Schema{Schema: orderV1})
	if _, err := d.Decode(context.Background(), nil, unknown); err == nil {
		t.Fatal("an id answered not found was asked again within NotFoundTTL")
	}
	reg.mu.Lock()
	reg.now = func() time.Time { return time.Now().Add(DefaultNotFoundTTL + time.Second) }
	reg.mu.Unlock()
	got, err := d.Decode(context.Background(), nil, unknown)
	if err != nil || !strings.HasPrefix(string(got), `{"id":1,`) {
		t.Fatalf("after the ttl: %s, %v", got, err)
	}
}

func TestDecoderRejectsOtherSchemaType(t *testing.T) {
	fake, reg := newTestRegistry(t)
	id := register(t, fake, "j-value", sr.TypeJSON, `{"type":"object"}`)
	d, _ := NewDecoder(DecoderConfig{Kind: KindAvro, Registry: reg})
	v := []byte{0, 0, 0, 0, byte(id), '{', '}'}
	_, err := d.Decode(context.Background(), nil, v)
	var de *DecodeError
	if !errors.As(err, &de) || de.Reason != ReasonDecodeError || !strings.Contains(de.Detail(), "the schema is json_schema, not avro") {
		t.Fatalf("got %v", err)
	}
}

func parseAvroSchema(t *testing.T, text string) *avro.Schema {
	t.Helper()
	s, err := avro.Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestAvroFormatCopyAllocations: a job's avro source and sink take one
// allocation per record each for the value they produce (the JSON, the
// framed encoding) and none per field: no path of a field is allocated
// unless its value fails (paths tracked again only for the error, as
// value.items[1] in TestAvroEncodeErrors), and the output buffers are
// sized once instead of grown, and the sink parses the JSON in place.
// Before: 18 allocations per record of the bench's five-field item (20
// with this one's map of arrays).
func TestAvroFormatCopyAllocations(t *testing.T) {
	item := `{"type":"record","name":"Item","namespace":"bench","fields":[
  {"name":"id","type":"long"},{"name":"key","type":"string"},{"name":"shape","type":"string"},
  {"name":"amount","type":"long"},{"name":"note","type":"string"},
  {"name":"tags","type":{"type":"map","values":{"type":"array","items":"long"}}}]}`
	fake, reg := newTestRegistry(t)
	register(t, fake, "t-value", sr.TypeAvro, item)
	d, _ := NewDecoder(DecoderConfig{Kind: KindAvro, Registry: reg})
	f := &Format{kind: KindAvro, reg: reg, dec: d, subject: "t-value", vertex: "t"}
	enc, err := NewEncoder(context.Background(), EncoderConfig{Kind: KindAvro, Registry: reg, Subject: "t-value"})
	if err != nil {
		t.Fatal(err)
	}
	framed, err := enc.Encode(nil, []byte(`{"id":123456,"key":"k000042","shape":"TRIANGLE","amount":512,"note":"`+strings.Repeat("x", 35)+`","tags":{"a":[1,2],"b":[]}}`))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var rec runtime.Record
	allocs := testing.AllocsPerRun(200, func() {
		rec = runtime.Record{Value: framed}
		if err := f.Decode(ctx, &rec); err != nil {
			t.Fatal(err)
		}
		if err := f.Encode(ctx, "t", &rec); err != nil {
			t.Fatal(err)
		}
	})
	if string(rec.Value) != string(framed) {
		t.Fatalf("round trip % x, want % x", rec.Value, framed)
	}
	if allocs > 2 {
		t.Errorf("%v allocations per record, want at most 2", allocs)
	}
}
