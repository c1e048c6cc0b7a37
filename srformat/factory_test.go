package srformat

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/kstreamd/kstreamd/connector"
	"github.com/kstreamd/kstreamd/runtime"
)

// TestFactoriesThroughTheSeam registers the three formats in a
// connector.Registry and runs a source and a sink Format of avro through
// the connector.Format interface: decode to JSON, bad records as
// *runtime.RecordError with the documented reasons, encode under the
// topic's subject with auto-registration.
func TestFactoriesThroughTheSeam(t *testing.T) {
	fake, _ := newTestRegistry(t)
	cr := connector.NewRegistry()
	for _, f := range Factories() {
		if err := cr.RegisterFormat(f); err != nil {
			t.Fatal(err)
		}
	}
	if got := strings.Join(cr.FormatTypes(), ","); got != "avro,json_schema,protobuf" {
		t.Fatalf("types %s", got)
	}
	ff, _ := cr.Format("avro")
	if strings.Join(ff.Reasons, ",") != "schema_not_found,decode_error" {
		t.Fatalf("reasons %v", ff.Reasons)
	}
	res := connector.NewResources()
	sections := map[string]any{SectionName: RegistryConfig{URLs: []string{fake.URL()}}}
	id := register(t, fake, "orders-value", sr.TypeAvro, orderV1)

	src, err := ff.New(connector.FormatContext{Vertex: "orders", Role: connector.RoleSource, Topic: "orders", Params: &Params{Schema: orderV2}, Sections: sections, Resources: res})
	if err != nil {
		t.Fatal(err)
	}
	rec := runtime.Record{Value: frame(t, id, orderV1, order(3, nil, "9.5")), Format: runtime.FormatText}
	if err := src.Decode(context.Background(), &rec); err != nil {
		t.Fatal(err)
	}
	want := `{"id":3,"customer":{"name":"ann","tier":"GOLD"},"coupon":null,"items":["a","b"],"placed_at":1700000000123,"amount":"9.50","channel":"web"}`
	if string(rec.Value) != want || rec.Format != runtime.FormatJSON {
		t.Fatalf("decoded %s (format %v)", rec.Value, rec.Format)
	}
	bad := runtime.Record{Value: []byte{0, 0, 0, 0x10, 0, 1}}
	var re *runtime.RecordError
	if err := src.Decode(context.Background(), &bad); !errors.As(err, &re) || re.Reason != ReasonSchemaNotFound || re.Detail != "schema id 4096: schema not found" {
		t.Fatalf("unknown id: %v", err)
	}
	corrupt := runtime.Record{Value: frame(t, id, orderV1, order(3, nil, "9.5"))[:9]}
	if err := src.Decode(context.Background(), &corrupt); !errors.As(err, &re) || re.Reason != ReasonDecodeError || !strings.HasPrefix(re.Detail, "schema id 1: ") {
		t.Fatalf("corrupt: %v", err)
	}

	dir := t.TempDir()
	file := filepath.Join(dir, "out.avsc")
	if err := os.WriteFile(file, []byte(orderV2), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &Params{SchemaFile: file, AutoRegister: true}
	p.CheckParams(func(field, msg string) { t.Fatalf("%s: %s", field, msg) })
	sink, err := ff.New(connector.FormatContext{Vertex: "out", Role: connector.RoleSink, Topic: "enriched", Params: p, Sections: sections, Resources: res})
	if err != nil {
		t.Fatal(err)
	}
	out := runtime.Record{Value: rec.Value}
	if err := sink.Encode(context.Background(), "enriched", &out); err != nil {
		t.Fatal(err)
	}
	ss, ok := fake.GetSchema("enriched-value", 1)
	if !ok || ss.Schema.Schema == "" {
		t.Fatal("the sink's schema was not auto-registered under enriched-value")
	}
	// decoded independently with twmb/avro and the registered schema
	var v map[string]any
	if int(out.Value[4]) != ss.ID || out.Value[0] != 0 {
		t.Fatalf("framing % x, id %d", out.Value[:5], ss.ID)
	}
	if _, err := parseAvroSchema(t, orderV2).Decode(out.Value[5:], &v); err != nil {
		t.Fatal(err)
	}
	if v["channel"] != "web" || v["id"] != int64(3) {
		t.Fatalf("sink wrote %v", v)
	}
	notJSON := runtime.Record{Value: []byte("x"), Format: runtime.FormatText}
	if err := sink.Encode(context.Background(), "enriched", &notJSON); err == nil {
		t.Fatal("a text value was encoded")
	}

	// params checks
	var reports []string
	(&Params{Schema: "x", SchemaFile: file}).CheckParams(func(f, m string) { reports = append(reports, f+": "+m) })
	(&Params{SchemaFile: filepath.Join(dir, "missing")}).CheckParams(func(f, m string) { reports = append(reports, f+": "+m) })
	if len(reports) != 2 || !strings.Contains(reports[0], "schema is also set") || !strings.Contains(reports[1], "cannot read it") {
		t.Fatalf("reports %q", reports)
	}
	pf, _ := cr.Format("protobuf")
	if _, err := pf.New(connector.FormatContext{Vertex: "p", Role: connector.RoleSource, Params: &Params{Schema: "x"}, Sections: sections, Resources: res}); err == nil {
		t.Fatal("a reader schema was accepted for protobuf")
	}
	if _, err := pf.New(connector.FormatContext{Vertex: "p", Role: connector.RoleSource, Sections: nil, Resources: connector.NewResources()}); err == nil || !strings.Contains(err.Error(), "schema_registry section is not set") {
		t.Fatalf("no section: %v", err)
	}
}

// TestSharedRegistryMetrics: the metrics SetMetrics put in the resources
// reach the shared Registry (no deadlock on the resources' lock).
func TestSharedRegistryMetrics(t *testing.T) {
	fake, _ := newTestRegistry(t)
	id := register(t, fake, "orders-value", sr.TypeAvro, orderV1)
	res := connector.NewResources()
	m := NewMetrics(nil)
	SetMetrics(res, m)
	reg, err := SharedRegistry(res, map[string]any{SectionName: RegistryConfig{URLs: []string{fake.URL()}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.SchemaByID(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.Lookups); got != 1 {
		t.Fatalf("lookups %v, want 1", got)
	}
}

// TestAutoRegisterCompilesFirst: a sink schema that does not compile is
// refused before auto_register registers it. The embedded registry
// (srfake) accepts any text, so before, a typo ("strin") was registered as
// version 1 of the subject and stayed there, and only the compile after
// the registration failed.
func TestAutoRegisterCompilesFirst(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		kind   Kind
		schema string
		want   string
	}{
		{KindAvro, `{"type": "record", "name": "X", "fields": [{"name": "a", "type": "strin"}]}`, "strin"},
		{KindJSONSchema, `{not json`, "not JSON"},
		{KindProtobuf, `syntax = "proto3"; message A { strin a = 1; }`, "strin"},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			fake, reg := newTestRegistry(t)
			_, err := NewEncoder(ctx, EncoderConfig{Kind: tc.kind, Registry: reg, Subject: "out-value", Schema: tc.schema, AutoRegister: true})
			if err == nil || !strings.Contains(err.Error(), "subject out-value: the schema to register does not compile") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want the schema refused before registration naming %q", err, tc.want)
			}
			if fake.SubjectExists("out-value") {
				t.Fatal("subject out-value exists: the broken schema was registered")
			}
		})
	}
}
