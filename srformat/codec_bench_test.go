package srformat

import (
	"context"
	"strings"
	"testing"

	hamba "github.com/hamba/avro/v2"
	"github.com/twmb/avro"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/kstreamd/kstreamd/runtime"
)

// The Avro codec comparison behind the choice of github.com/twmb/avro (see
// README.md, "Formats"): decode + encode of one representative record (the
// acceptance schema orderV1: a nested record with an enum, a nullable
// union, an array, timestamp-millis and decimal) into and out of the
// generic Go values a schema-less pipeline handles (map[string]any),
// with each library.
//
//	go test -run '^$' -bench 'AvroCodec' -benchmem ./srformat/

func benchOrderBytes(b *testing.B) []byte {
	c := "SAVE10"
	body, err := avro.MustParse(orderV1).Encode(order(7, &c, "1234.5"))
	if err != nil {
		b.Fatal(err)
	}
	return body
}

func BenchmarkAvroCodecTwmb(b *testing.B) {
	s := avro.MustParse(orderV1)
	body := benchOrderBytes(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	var out []byte
	for b.Loop() {
		var v any
		if _, err := s.Decode(body, &v, avro.TaggedUnions()); err != nil {
			b.Fatal(err)
		}
		var err error
		if out, err = s.AppendEncode(out[:0], v); err != nil {
			b.Fatal(err)
		}
	}
	if string(out) != string(body) {
		b.Fatal("round trip differs")
	}
}

func BenchmarkAvroCodecHamba(b *testing.B) {
	s := hamba.MustParse(orderV1)
	body := benchOrderBytes(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	var out []byte
	for b.Loop() {
		var v any
		if err := hamba.Unmarshal(s, body, &v); err != nil {
			b.Fatal(err)
		}
		var err error
		if out, err = hamba.Marshal(s, v); err != nil {
			b.Fatal(err)
		}
	}
	// hamba writes arrays in sized blocks (valid Avro, other bytes):
	// compare what the bytes hold
	var v any
	tw := avro.MustParse(orderV1)
	if _, err := tw.Decode(out, &v, avro.TaggedUnions()); err != nil {
		b.Fatal(err)
	}
	if again, _ := tw.Encode(v); string(again) != string(body) {
		b.Fatal("round trip differs")
	}
}

// BenchmarkAvroToJSONAndBack is the format's own cost per record: framed
// Avro to the JSON record model at a source, and back at a sink.
func BenchmarkAvroToJSONAndBack(b *testing.B) {
	fake, reg := newTestRegistryB(b)
	id, _, err := fake.RegisterSchema("orders-value", sr.Schema{Schema: orderV1})
	if err != nil {
		b.Fatal(err)
	}
	d, _ := NewDecoder(DecoderConfig{Kind: KindAvro, Registry: reg})
	enc, err := NewEncoder(context.Background(), EncoderConfig{Kind: KindAvro, Registry: reg, Subject: "orders-value"})
	if err != nil {
		b.Fatal(err)
	}
	framedIn, _ := header.AppendEncode(nil, id, nil)
	framedIn = append(framedIn, benchOrderBytes(b)...)
	b.ReportAllocs()
	b.SetBytes(int64(len(framedIn)))
	var js, out []byte
	for b.Loop() {
		if js, err = d.Decode(context.Background(), js[:0], framedIn); err != nil {
			b.Fatal(err)
		}
		if out, err = enc.Encode(out[:0], js); err != nil {
			b.Fatal(err)
		}
	}
	if string(out) != string(framedIn) {
		b.Fatalf("round trip differs: % x vs % x", out, framedIn)
	}
}

// BenchmarkAvroFormatCopy is what a job's avro source and sink do per
// record (kstreamd bench --scenario avro-copy): Format.Decode of a framed
// value into a fresh JSON value, then Format.Encode of it into a fresh
// framed value (neither buffer is reused: each belongs to its record).
// Cases: the acceptance schema orderV1, and the bench's flat item (a
// long, two short strings, a long and a 35-byte string).
//
//	go test -run '^$' -bench 'AvroFormatCopy' -benchmem ./srformat/
func BenchmarkAvroFormatCopy(b *testing.B) {
	item := `{"type":"record","name":"Item","namespace":"bench","fields":[
  {"name":"id","type":"long"},{"name":"key","type":"string"},{"name":"shape","type":"string"},
  {"name":"amount","type":"long"},{"name":"note","type":"string"}]}`
	itemBody, err := avro.MustParse(item).Encode(map[string]any{"id": int64(123456), "key": "k000042", "shape": "TRIANGLE", "amount": int64(512), "note": strings.Repeat("x", 35)})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name, schema string
		body         []byte
	}{{"order", orderV1, benchOrderBytes(b)}, {"item", item, itemBody}} {
		b.Run(c.name, func(b *testing.B) {
			fake, reg := newTestRegistryB(b)
			id, _, err := fake.RegisterSchema("t-value", sr.Schema{Schema: c.schema})
			if err != nil {
				b.Fatal(err)
			}
			d, _ := NewDecoder(DecoderConfig{Kind: KindAvro, Registry: reg})
			f := &Format{kind: KindAvro, reg: reg, dec: d, subject: "t-value", vertex: "bench"}
			framed, _ := header.AppendEncode(nil, id, nil)
			framed = append(framed, c.body...)
			ctx := context.Background()
			b.ReportAllocs()
			b.SetBytes(int64(len(framed)))
			var rec runtime.Record
			for b.Loop() {
				rec = runtime.Record{Value: framed}
				if err := f.Decode(ctx, &rec); err != nil {
					b.Fatal(err)
				}
				if err := f.Encode(ctx, "t", &rec); err != nil {
					b.Fatal(err)
				}
			}
			if string(rec.Value) != string(framed) {
				b.Fatalf("round trip differs: % x vs % x", rec.Value, framed)
			}
		})
	}
}
