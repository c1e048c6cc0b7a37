package srformat

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/encoding/protowire"
)

// shopProto has a nested message, a repeated field and an enum; Refund is
// the second message (index [1]), Line nested in Order ([0, 0]).
const shopProto = `syntax = "proto3";
package shop;
enum Tier { BRONZE = 0; SILVER = 1; GOLD = 2; }
message Order {
  message Line { string sku = 1; int32 qty = 2; }
  int64 id = 1;
  Customer customer = 2;
  repeated Line lines = 3;
  Tier tier = 4;
  int32 cents = 5;
}
message Refund { int64 order_id = 1; }
message Customer { string name = 1; }
`

// protoOrder builds the wire bytes of an Order by hand (protowire), not
// through the code under test.
func protoOrder(id int64, name string, lines [][2]any, tier int, cents int32) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(id))
	var c []byte
	c = protowire.AppendTag(c, 1, protowire.BytesType)
	c = protowire.AppendString(c, name)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendBytes(b, c)
	for _, l := range lines {
		var lb []byte
		lb = protowire.AppendTag(lb, 1, protowire.BytesType)
		lb = protowire.AppendString(lb, l[0].(string))
		lb = protowire.AppendTag(lb, 2, protowire.VarintType)
		lb = protowire.AppendVarint(lb, uint64(l[1].(int)))
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendBytes(b, lb)
	}
	if tier != 0 {
		b = protowire.AppendTag(b, 4, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(tier))
	}
	b = protowire.AppendTag(b, 5, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(cents))
	return b
}

func framed(id int, index []int, body []byte) []byte {
	out, err := header.AppendEncode(nil, id, index)
	if err != nil {
		panic(err)
	}
	return append(out, body...)
}

func TestProtobufDecode(t *testing.T) {
	fake, reg := newTestRegistry(t)
	id := register(t, fake, "orders-value", sr.TypeProtobuf, shopProto)
	d, err := NewDecoder(DecoderConfig{Kind: KindProtobuf, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	body := protoOrder(9, "ann", [][2]any{{"x", 2}, {"y", 1}}, 2, 1250)
	for _, tc := range []struct {
		in   []byte
		want string
	}{
		// index [0] is written as the single byte 0 (Confluent's shortcut)
		{framed(id, []int{0}, body), `{"id":"9","customer":{"name":"ann"},"lines":[{"sku":"x","qty":2},{"sku":"y","qty":1}],"tier":"GOLD","cents":1250}`},
		{framed(id, []int{0}, protoOrder(1, "", nil, 0, 0)), `{"id":"1","customer":{"name":""},"lines":[],"tier":"BRONZE","cents":0}`},
		{framed(id, []int{1}, protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 77)), `{"order_id":"77"}`},
		{framed(id, []int{0, 0}, protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 3)), `{"sku":"","qty":3}`},
	} {
		got, err := d.Decode(context.Background(), nil, tc.in)
		if err != nil {
			t.Fatal(err)
		}
		// protojson randomises its whitespace: compare compacted
		if c := compact(t, got); c != tc.want {
			t.Errorf("got  %s\nwant %s", c, tc.want)
		}
	}
	for name, in := range map[string][]byte{
		"bad index":   framed(id, []int{5}, body),
		"bad body":    framed(id, []int{0}, []byte{0x0a, 0x7f, 1}),
		"bad varints": append([]byte{0, 0, 0, 0, byte(id)}, 0xff),
	} {
		_, err := d.Decode(context.Background(), nil, in)
		var de *DecodeError
		if !errors.As(err, &de) || de.Reason != ReasonDecodeError || de.SchemaID != id {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// compact removes the whitespace protojson randomises (outside strings).
func compact(t *testing.T, b []byte) string {
	t.Helper()
	if !json.Valid(b) {
		t.Fatalf("not JSON: %s", b)
	}
	out := make([]byte, 0, len(b))
	inStr, esc := false, false
	for _, c := range b {
		switch {
		case inStr:
			out = append(out, c)
			if esc {
				esc = false
			} else if c == '\\' {
				esc = true
			} else if c == '"' {
				inStr = false
			}
		case c == '"':
			inStr = true
			out = append(out, c)
		case c == ' ' || c == '\n' || c == '\t' || c == '\r':
		default:
			out = append(out, c)
		}
	}
	return string(out)
}

func TestProtobufEncodeRoundTrip(t *testing.T) {
	fake, reg := newTestRegistry(t)
	register(t, fake, "refunds-value", sr.TypeProtobuf, shopProto)
	enc, err := NewEncoder(context.Background(), EncoderConfig{Kind: KindProtobuf, Registry: reg, Subject: "refunds-value", MessageName: "shop.Order.Line"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := enc.Encode(nil, []byte(`{"sku":"z","qty":4,"extra":true}`))
	if err != nil {
		t.Fatal(err)
	}
	// framing: magic, id, indexes [0,0] as count 2 then two zig-zag zeros
	if want := []byte{0, 0, 0, 0, byte(enc.SchemaID()), 4, 0, 0}; string(out[:8]) != string(want) {
		t.Fatalf("header % x, want % x", out[:8], want)
	}
	want := protowire.AppendVarint(protowire.AppendTag(protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "z"), 2, protowire.VarintType), 4)
	if string(out[8:]) != string(want) {
		t.Fatalf("body % x, want % x", out[8:], want)
	}
	d, _ := NewDecoder(DecoderConfig{Kind: KindProtobuf, Registry: reg})
	got, err := d.Decode(context.Background(), nil, out)
	if err != nil || compact(t, got) != `{"sku":"z","qty":4}` {
		t.Fatalf("%s %v", got, err)
	}
	if _, err := enc.Encode(nil, []byte(`{"qty":"many"}`)); err == nil || !strings.Contains(err.Error(), "shop.Order.Line") {
		t.Fatalf("bad value: %v", err)
	}
	if _, err := NewEncoder(context.Background(), EncoderConfig{Kind: KindProtobuf, Registry: reg, Subject: "refunds-value", MessageName: "shop.Nope"}); err == nil || !strings.Contains(err.Error(), "no message shop.Nope") {
		t.Fatalf("unknown message: %v", err)
	}
}

func TestProtobufReferences(t *testing.T) {
	fake, reg := newTestRegistry(t)
	register(t, fake, "common", sr.TypeProtobuf, `syntax = "proto3"; package common; message Money { int64 cents = 1; string currency = 2; }`)
	id, _, err := fake.RegisterSchema("pay-value", sr.Schema{Type: sr.TypeProtobuf,
		Schema:     `syntax = "proto3"; package pay; import "common/money.proto"; message Payment { common.Money amount = 1; }`,
		References: []sr.SchemaReference{{Name: "common/money.proto", Subject: "common", Version: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := NewDecoder(DecoderConfig{Kind: KindProtobuf, Registry: reg})
	var money []byte
	money = protowire.AppendVarint(protowire.AppendTag(money, 1, protowire.VarintType), 250)
	money = protowire.AppendString(protowire.AppendTag(money, 2, protowire.BytesType), "EUR")
	body := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), money)
	got, err := d.Decode(context.Background(), nil, framed(id, []int{0}, body))
	if err != nil || compact(t, got) != `{"amount":{"cents":"250","currency":"EUR"}}` {
		t.Fatalf("%s %v", got, err)
	}
}

func TestJSONSchema(t *testing.T) {
	const schema = `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",
	 "properties":{"id":{"type":"integer"},"tags":{"type":"array","items":{"type":"string"}}},"required":["id"]}`
	fake, reg := newTestRegistry(t)
	enc, err := NewEncoder(context.Background(), EncoderConfig{Kind: KindJSONSchema, Registry: reg, Subject: "j-value", Schema: schema, AutoRegister: true})
	if err != nil {
		t.Fatal(err)
	}
	if ss, ok := fake.GetSchema("j-value", 1); !ok || ss.ID != enc.SchemaID() || ss.Type != sr.TypeJSON {
		t.Fatalf("auto-registered: %+v %v", ss, ok)
	}
	out, err := enc.Encode(nil, []byte(`{"id":3,"tags":["a"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(out[5:]) != `{"id":3,"tags":["a"]}` || out[0] != 0 {
		t.Fatalf("framed %q", out)
	}
	d, _ := NewDecoder(DecoderConfig{Kind: KindJSONSchema, Registry: reg})
	got, err := d.Decode(context.Background(), nil, append(out[:5:5], " {\"id\": 3, \"tags\": [\"a\"]} "...))
	if err != nil || string(got) != `{"id":3,"tags":["a"]}` {
		t.Fatalf("%s %v", got, err)
	}
	for in, want := range map[string]string{
		`{"tags":["a"]}`:         "missing property 'id'",
		`{"id":1,"tags":[2]}`:    "/tags/0",
		`{"id":1} {"id":2}`:      "data after the value",
		`{"id":`:                 "not JSON",
		`{"id":1.5,"tags":[""]}`: "/id",
	} {
		_, err := d.Decode(context.Background(), nil, append(out[:5:5], in...))
		var de *DecodeError
		if !errors.As(err, &de) || de.Reason != ReasonDecodeError || !strings.Contains(de.Detail(), want) {
			t.Errorf("decode %s: %v, want %q", in, err, want)
		}
		if _, err := enc.Encode(nil, []byte(in)); err == nil {
			t.Errorf("encode %s: no error", in)
		}
	}
	if _, err := compileJSONSchema(`{"$ref":"http://example.com/x.json"}`); err == nil || !strings.Contains(err.Error(), "self-contained") {
		t.Fatalf("remote ref: %v", err)
	}
}

// TestEncoderSubjectResolution: without auto-registration the schema must
// already be under the subject; with it, it is registered; an empty schema
// takes the subject's latest version.
func TestEncoderSubjectResolution(t *testing.T) {
	fake, reg := newTestRegistry(t)
	ctx := context.Background()
	_, err := NewEncoder(ctx, EncoderConfig{Kind: KindAvro, Registry: reg, Subject: "orders-value", Schema: orderV1})
	if err == nil || !strings.Contains(err.Error(), "not registered") {
		t.Fatalf("unregistered without auto_register: %v", err)
	}
	if fake.SubjectExists("orders-value") {
		t.Fatal("the subject was created without auto_register")
	}
	e1, err := NewEncoder(ctx, EncoderConfig{Kind: KindAvro, Registry: reg, Subject: "orders-value", Schema: orderV1, AutoRegister: true})
	if err != nil {
		t.Fatal(err)
	}
	e2, err := NewEncoder(ctx, EncoderConfig{Kind: KindAvro, Registry: reg, Subject: "orders-value", Schema: orderV2, AutoRegister: true})
	if err != nil {
		t.Fatal(err)
	}
	latest, err := NewEncoder(ctx, EncoderConfig{Kind: KindAvro, Registry: reg, Subject: "orders-value"})
	if err != nil {
		t.Fatal(err)
	}
	same, err := NewEncoder(ctx, EncoderConfig{Kind: KindAvro, Registry: reg, Subject: "orders-value", Schema: orderV1})
	if err != nil {
		t.Fatal(err)
	}
	if e1.SchemaID() == e2.SchemaID() || latest.SchemaID() != e2.SchemaID() || same.SchemaID() != e1.SchemaID() {
		t.Fatalf("ids v1 %d v2 %d latest %d lookup %d", e1.SchemaID(), e2.SchemaID(), latest.SchemaID(), same.SchemaID())
	}
	if _, err := NewEncoder(ctx, EncoderConfig{Kind: KindProtobuf, Registry: reg, Subject: "orders-value"}); err == nil || !strings.Contains(err.Error(), "is avro, not protobuf") {
		t.Fatalf("kind mismatch: %v", err)
	}
}

// TestRegistryDownIsRetried: a registry answering 503 (then nothing) is
// retried with back-off, counted and reported as down, and the record
// decodes once it is back; it is never turned into a bad record.
func TestRegistryDownIsRetried(t *testing.T) {
	fake, _ := newTestRegistry(t)
	id := register(t, fake, "orders-value", sr.TypeAvro, orderV1)
	var failing atomic.Int32
	failing.Store(3)
	fake.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		if failing.Add(-1) >= 0 {
			http.Error(w, `{"error_code":50001,"message":"store down"}`, http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	m := NewMetrics(nil)
	var logs strings.Builder
	var logMu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, nil))
	reg, err := NewRegistry(RegistryConfig{URLs: []string{fake.URL()}, MinBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond, Metrics: m, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := NewDecoder(DecoderConfig{Kind: KindAvro, Registry: reg})
	got, err := d.Decode(context.Background(), nil, frame(t, id, orderV1, order(5, nil, "5")))
	if err != nil || !strings.HasPrefix(string(got), `{"id":5,`) {
		t.Fatalf("%s %v", got, err)
	}
	if n := testutil.ToFloat64(m.Retries); n != 3 {
		t.Errorf("retries %v, want 3", n)
	}
	if up := testutil.ToFloat64(m.Up); up != 1 {
		t.Errorf("up %v after recovery", up)
	}
	logMu.Lock()
	logged := logs.String()
	logMu.Unlock()
	if n := strings.Count(logged, `msg="schema registry request failed; retrying" request="get schema id 1"`); n != 3 || !strings.Contains(logged, "store down") {
		t.Errorf("%d retry warnings, want 3 naming the request and the error:\n%s", n, logged)
	}
	// a registry that never answers: the decode waits until ctx ends and
	// returns ctx's error, not a DecodeError
	failing.Store(1 << 30)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = d.Decode(ctx, nil, frame(t, id+1, orderV1, order(5, nil, "5")))
	var de *DecodeError
	if !errors.Is(err, context.DeadlineExceeded) || errors.As(err, &de) {
		t.Fatalf("got %v", err)
	}
	if up := testutil.ToFloat64(m.Up); up != 0 {
		t.Errorf("up %v while failing", up)
	}
}

func TestRegistryConfigErrors(t *testing.T) {
	if _, err := NewRegistry(RegistryConfig{}); err == nil {
		t.Error("no urls accepted")
	}
	if _, err := NewRegistry(RegistryConfig{URLs: []string{"http://x"}, Username: "u", BearerToken: "t"}); err == nil {
		t.Error("basic and bearer accepted together")
	}
	if _, err := NewDecoder(DecoderConfig{Kind: "xml", Registry: &Registry{}}); err == nil {
		t.Error("unknown kind accepted")
	}
	if _, err := NewDecoder(DecoderConfig{Kind: KindProtobuf, Registry: &Registry{}, ReaderSchema: orderV1}); err == nil {
		t.Error("reader schema for protobuf accepted")
	}
}

// TestRegistryAuth: basic and bearer credentials reach the registry.
func TestRegistryAuth(t *testing.T) {
	fake, _ := newTestRegistry(t)
	id := register(t, fake, "orders-value", sr.TypeAvro, orderV1)
	var seen atomic.Value
	fake.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		seen.Store(r.Header.Get("Authorization"))
		return false
	})
	for cfg, want := range map[*RegistryConfig]string{
		{Username: "u", Password: "p"}: "Basic dTpw",
		{BearerToken: "tok"}:           "Bearer tok",
	} {
		cfg.URLs = []string{fake.URL()}
		reg, err := NewRegistry(*cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := reg.SchemaByID(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		if got, _ := seen.Load().(string); got != want {
			t.Errorf("authorization %q, want %q", got, want)
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// TestMetricsReregistered: a job built again registers the same metrics
// and gets the collectors it had, not a panic.
func TestMetricsReregistered(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := NewMetrics(reg)
	a.Retries.Add(2)
	b := NewMetrics(reg)
	if testutil.ToFloat64(b.Retries) != 2 {
		t.Fatal("the second NewMetrics did not reuse the registered counter")
	}
}
