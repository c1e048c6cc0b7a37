package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/avro"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// orderSchemaV1 has a nested record, an enum, a union, an array,
// timestamp-millis and decimal; V2 adds a field with a default.
const orderSchemaV1 = `{"type":"record","name":"Order","namespace":"shop","fields":[
 {"name":"id","type":"long"},
 {"name":"customer","type":{"type":"record","name":"Customer","fields":[
   {"name":"name","type":"string"},
   {"name":"tier","type":{"type":"enum","name":"Tier","symbols":["BRONZE","SILVER","GOLD"]}}]}},
 {"name":"coupon","type":["null","string"],"default":null},
 {"name":"items","type":{"type":"array","items":"string"}},
 {"name":"placed_at","type":{"type":"long","logicalType":"timestamp-millis"}},
 {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}}]}`

var orderSchemaV2 = strings.Replace(orderSchemaV1, `"scale":2}}]}`, `"scale":2}},
 {"name":"channel","type":"string","default":"web"}]}`, 1)

// confluentFrame is the Confluent wire format of body under schema id:
// magic byte 0, the id big-endian, the body.
func confluentFrame(id int, body []byte) []byte {
	out := make([]byte, 5, 5+len(body))
	binary.BigEndian.PutUint32(out[1:], uint32(id))
	return append(out, body...)
}

// tierTotals is what the example's aggregate holds for one tier.
type tierTotals struct {
	total                  float64
	orders, items, coupons int64
}

// TestExampleAvro runs configs/examples/avro.yaml against a kfake broker
// and an srfake registry: 10,000 Avro orders (half written with schema v1,
// half with v2, which adds a field with a default: a writer-schema change
// mid-stream) pass the filter, map and aggregate, and the output, decoded
// independently with the schema registered under order-totals-value, is
// exactly every tier's running totals: per tier one output per kept order,
// counts 1..n, the last with the exact total, items and coupon count. An
// order with an unknown schema id and one with corrupted bytes are dead
// letters with the reasons schema_not_found and decode_error naming the id.
func TestExampleAvro(t *testing.T) {
	t.Parallel()
	_, broker := startKfake(t, []string{"orders", "order-totals", "orders-dlq"})
	fake := srfake.New()
	t.Cleanup(fake.Close)
	idV1, _, err := fake.RegisterSchema("orders-value", sr.Schema{Schema: orderSchemaV1})
	if err != nil {
		t.Fatal(err)
	}
	idV2, _, err := fake.RegisterSchema("orders-value", sr.Schema{Schema: orderSchemaV2})
	if err != nil {
		t.Fatal(err)
	}
	v1, v2 := avro.MustParse(orderSchemaV1), avro.MustParse(orderSchemaV2)

	const n = 10000
	tiers := []string{"BRONZE", "SILVER", "GOLD"}
	want := map[string]*tierTotals{}
	recs := make([]*kgo.Record, 0, n+2)
	base := time.UnixMilli(1700000000000).UTC()
	for i := range n {
		// amounts in quarters: every sum is exact in float64, in any order
		cents := (i%200)*100 + (i%4)*25
		amount := new(big.Rat).SetFrac64(int64(cents), 100)
		items := make([]any, i%4)
		for j := range items {
			items[j] = fmt.Sprintf("sku-%d", j)
		}
		var coupon any
		if i%5 == 0 {
			coupon = "SAVE5"
		}
		tier := tiers[i%3]
		o := map[string]any{"id": int64(i), "customer": map[string]any{"name": fmt.Sprintf("c%d", i%50), "tier": tier},
			"coupon": coupon, "items": items, "placed_at": base.Add(time.Duration(i) * time.Millisecond), "amount": amount}
		schema, id := v1, idV1
		if i >= n/2 {
			o["channel"] = "app"
			schema, id = v2, idV2
		}
		body, err := schema.Encode(o)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Topic: "orders", Key: fmt.Appendf(nil, "c%d", i%50), Value: confluentFrame(id, body)})
		if cents >= 5000 && len(items) > 0 {
			w := want[tier]
			if w == nil {
				w = &tierTotals{}
				want[tier] = w
			}
			w.total += float64(cents) / 100
			w.orders++
			w.items += int64(len(items))
			if coupon != nil {
				w.coupons++
			}
		}
	}
	good, _ := v1.Encode(map[string]any{"id": int64(1), "customer": map[string]any{"name": "x", "tier": "GOLD"},
		"coupon": nil, "items": []any{"a"}, "placed_at": base, "amount": big.NewRat(100, 1)})
	recs = append(recs,
		&kgo.Record{Topic: "orders", Key: []byte("unknown"), Value: confluentFrame(9999, good)},
		&kgo.Record{Topic: "orders", Key: []byte("corrupt"), Value: confluentFrame(idV1, good[:len(good)-4])})
	kept := int64(0)
	for _, w := range want {
		kept += w.orders
	}

	dir, metrics := t.TempDir(), testkit.FreeAddr(t)
	cfg := exampleConfig(t, "avro.yaml", dir, broker, metrics)
	for _, r := range [][2]string{
		{"  # urls: [http://schema-registry:8081]", "  urls: [" + fake.URL() + "] #"},
		{"    enabled: true\n", "    enabled: false\n"}, // the embedded registry (exampleConfig turned the broker's off)
	} {
		if !strings.Contains(cfg, r[0]) {
			t.Fatalf("avro.yaml has no %q line to replace", r[0])
		}
		cfg = strings.Replace(cfg, r[0], r[1], 1)
	}
	d := startDaemon(t, dir, cfg, broker, metrics)
	produce(t, newClient(t, broker, kgo.ProducerBatchMaxBytes(1<<20)), recs...)
	testkit.WaitMetric(t, 60*time.Second, d.url(), "kstreamd_operator_records_out_total", map[string]string{"operator": "order-totals"}, float64(kept))
	last, _ := testkit.Scrape(d.url(), "kstreamd_checkpoint_last_completed_id", nil)
	waitCheckpointAfter(t, d, last)

	// the output, decoded independently: the schema by the id in each value
	ss, ok := fake.GetSchema("order-totals-value", 1)
	if !ok {
		t.Fatal("the sink did not register its schema under order-totals-value")
	}
	out := avro.MustParse(ss.Schema.Schema)
	seen := map[string][]int64{}
	for _, r := range testkit.ReadTopic(t, []string{broker}, "order-totals", 20*time.Second) {
		if len(r.Value) < 5 || r.Value[0] != 0 || int(binary.BigEndian.Uint32(r.Value[1:5])) != ss.ID {
			t.Fatalf("output % x is not framed with schema id %d", r.Value[:min(len(r.Value), 5)], ss.ID)
		}
		var v struct {
			Key        string  `avro:"key"`
			Total      float64 `avro:"total"`
			Orders     int64   `avro:"orders"`
			Items      int64   `avro:"items"`
			WithCoupon int64   `avro:"with_coupon"`
		}
		if rest, err := out.Decode(r.Value[5:], &v); err != nil || len(rest) > 0 {
			t.Fatalf("output does not decode: %v (%d bytes left)", err, len(rest))
		}
		seen[v.Key] = append(seen[v.Key], v.Orders)
		w := want[v.Key]
		if w == nil {
			t.Fatalf("output for tier %q", v.Key)
		}
		if v.Orders == w.orders {
			if got := (tierTotals{v.Total, v.Orders, v.Items, v.WithCoupon}); got != *w {
				t.Errorf("tier %s final totals %+v, want %+v", v.Key, got, *w)
			}
		}
	}
	for tier, w := range want {
		counts := seen[tier]
		slices.Sort(counts)
		if int64(len(counts)) != w.orders || counts[0] != 1 || counts[len(counts)-1] != w.orders {
			t.Errorf("tier %s: %d outputs (counts %d..%d), want one per kept order, 1..%d", tier, len(counts), counts[0], counts[len(counts)-1], w.orders)
		}
	}

	dlq := testkit.ReadTopic(t, []string{broker}, "orders-dlq", 10*time.Second)
	reasons := map[string]string{}
	for _, r := range dlq {
		for _, h := range r.Headers {
			if h.Key == "kstreamd.error" {
				reasons[string(r.Key)] = string(h.Value)
			}
		}
	}
	if len(dlq) != 2 || reasons["unknown"] != "schema_not_found: schema id 9999: schema not found" ||
		!strings.HasPrefix(reasons["corrupt"], fmt.Sprintf("decode_error: schema id %d: ", idV1)) {
		t.Fatalf("dead letters %d: %q", len(dlq), reasons)
	}
	if code := d.stop(t); code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
}

// registryJob is a job reading topic "in" and writing topic "out" in
// format (format_params of the sink: sinkParams, indented 6 spaces) with
// the registry at url: operators filter, map and aggregate (key_by tier),
// and on_error dead-letter to "dlq".
func registryJob(dir, broker, metrics, url, format, filter, project, aggregates, sinkParams string) string {
	return jobHead("registry-"+strings.ReplaceAll(format, "_", "-"), 2, dir, brokersKafka(broker), metrics, "info") + fmt.Sprintf(`schema_registry:
  urls: [%s]
checkpoints:
  interval: 200ms
sources:
  - name: in
    topic: in
    format: %s
    on_error: dead-letter
    dead_letter_topic: dlq
operators:
  - name: keep
    type: filter
    input: in
    params:
      condition: %s
  - name: project
    type: map
    input: keep
    params:
      value: '%s'
  - name: totals
    type: aggregate
    input: project
    key_by: tier
    params:
      aggregates:
%s
sinks:
  - name: out
    input: totals
    topic: out
    format: %s
    format_params:
%s
    delivery: exactly-once
    transaction_timeout: 1m
`, url, format, filter, project, aggregates, format, sinkParams)
}

// runRegistryJob runs cfg on broker with recs produced to "in"; it returns
// the read_committed values of "out" once the sink wrote want records and
// a checkpoint after them completed, and the dead letters' kstreamd.error
// headers by record key.
func runRegistryJob(t *testing.T, dir, cfg, broker, metrics string, recs []*kgo.Record, want int64) ([][]byte, map[string]string) {
	t.Helper()
	d := startDaemon(t, dir, cfg, broker, metrics)
	produce(t, newClient(t, broker, kgo.ProducerBatchMaxBytes(1<<20)), recs...)
	testkit.WaitMetric(t, 60*time.Second, d.url(), "kstreamd_operator_records_out_total", map[string]string{"operator": "out"}, float64(want))
	last, _ := testkit.Scrape(d.url(), "kstreamd_checkpoint_last_completed_id", nil)
	waitCheckpointAfter(t, d, last)
	var out [][]byte
	for _, r := range testkit.ReadTopic(t, []string{broker}, "out", 20*time.Second) {
		out = append(out, r.Value)
	}
	reasons := map[string]string{}
	for _, r := range testkit.ReadTopic(t, []string{broker}, "dlq", 10*time.Second) {
		for _, h := range r.Headers {
			if h.Key == "kstreamd.error" {
				reasons[string(r.Key)] = string(h.Value)
			}
		}
	}
	if code := d.stop(t); code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
	return out, reasons
}

// checkRunningTotals checks outputs (one per kept record, per tier counts
// 1..n) against want, the final totals per tier; got gives an output's tier
// and totals.
func checkRunningTotals(t *testing.T, outs [][]byte, want map[string]*tierTotals, got func([]byte) (string, tierTotals)) {
	t.Helper()
	seen := map[string][]int64{}
	for _, o := range outs {
		tier, v := got(o)
		w := want[tier]
		if w == nil {
			t.Fatalf("output for tier %q", tier)
		}
		seen[tier] = append(seen[tier], v.orders)
		if v.orders == w.orders && v != *w {
			t.Errorf("tier %s final totals %+v, want %+v", tier, v, *w)
		}
	}
	for tier, w := range want {
		counts := seen[tier]
		slices.Sort(counts)
		if int64(len(counts)) != w.orders || counts[0] != 1 || counts[len(counts)-1] != w.orders {
			t.Errorf("tier %s: %d outputs, want one per kept record (counts 1..%d)", tier, len(counts), w.orders)
		}
	}
}

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
message Customer { string name = 1; }
`

const totalsProto = `syntax = "proto3";
package shop;
message TierTotals { string key = 1; int64 total = 2; int64 orders = 3; int64 items = 4; }
`

// TestProtobufThroughRegistry: 5,000 Protobuf orders (a nested message, a
// repeated nested message, an enum), framed with message indexes, pass
// filter, map and aggregate and are written as Protobuf under the
// auto-registered subject out-value; decoded by hand (protowire), the
// output is exactly every tier's running totals. Unknown id and corrupt
// bytes are dead letters with their reasons.
func TestProtobufThroughRegistry(t *testing.T) {
	t.Parallel()
	_, broker := startKfake(t, []string{"in", "out", "dlq"})
	fake := srfake.New()
	t.Cleanup(fake.Close)
	id, _, err := fake.RegisterSchema("in-value", sr.Schema{Schema: shopProto, Type: sr.TypeProtobuf})
	if err != nil {
		t.Fatal(err)
	}
	tiers := []string{"BRONZE", "SILVER", "GOLD"}
	want := map[string]*tierTotals{}
	var recs []*kgo.Record
	const n = 5000
	for i := range n {
		var b []byte
		b = protowire.AppendVarint(protowire.AppendTag(b, 1, protowire.VarintType), uint64(i))
		cust := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), fmt.Sprintf("c%d", i%50))
		b = protowire.AppendBytes(protowire.AppendTag(b, 2, protowire.BytesType), cust)
		for j := range i % 4 {
			var l []byte
			l = protowire.AppendString(protowire.AppendTag(l, 1, protowire.BytesType), fmt.Sprintf("sku-%d", j))
			l = protowire.AppendVarint(protowire.AppendTag(l, 2, protowire.VarintType), uint64(j+1))
			b = protowire.AppendBytes(protowire.AppendTag(b, 3, protowire.BytesType), l)
		}
		if i%3 != 0 {
			b = protowire.AppendVarint(protowire.AppendTag(b, 4, protowire.VarintType), uint64(i%3))
		}
		cents := (i % 200) * 50
		b = protowire.AppendVarint(protowire.AppendTag(b, 5, protowire.VarintType), uint64(cents))
		// message index [0] is the single byte 0
		recs = append(recs, &kgo.Record{Topic: "in", Key: fmt.Appendf(nil, "o%d", i), Value: append(confluentFrame(id, []byte{0}), b...)})
		if cents >= 5000 && i%4 > 0 {
			w := want[tiers[i%3]]
			if w == nil {
				w = &tierTotals{}
				want[tiers[i%3]] = w
			}
			w.total += float64(cents)
			w.orders++
			w.items += int64(i % 4)
		}
	}
	recs = append(recs,
		&kgo.Record{Topic: "in", Key: []byte("unknown"), Value: confluentFrame(4242, []byte{0, 8, 1})},
		&kgo.Record{Topic: "in", Key: []byte("corrupt"), Value: confluentFrame(id, []byte{0, 0x1a, 0x7f, 1})})
	var kept int64
	for _, w := range want {
		kept += w.orders
	}
	dir, metrics := t.TempDir(), testkit.FreeAddr(t)
	cfg := registryJob(dir, broker, metrics, fake.URL(), "protobuf", "cents >= 5000 && size(lines) > 0",
		`{"tier": tier, "cents": cents, "qty": size(lines)}`,
		"        - {name: total, fn: sum, of: cents}\n        - {name: orders, fn: count}\n        - {name: items, fn: sum, of: qty}",
		"      auto_register: true\n      message: shop.TierTotals\n      schema: |\n"+indent(totalsProto, "        "))
	outs, reasons := runRegistryJob(t, dir, cfg, broker, metrics, recs, kept)
	ss, ok := fake.GetSchema("out-value", 1)
	if !ok || ss.Type != sr.TypeProtobuf {
		t.Fatalf("out-value: %+v %v", ss, ok)
	}
	checkRunningTotals(t, outs, want, func(v []byte) (string, tierTotals) {
		// magic, id, message index [0] (one 0 byte), then TierTotals
		if len(v) < 6 || v[0] != 0 || int(binary.BigEndian.Uint32(v[1:5])) != ss.ID || v[5] != 0 {
			t.Fatalf("output % x is not framed with id %d and index [0]", v[:min(len(v), 6)], ss.ID)
		}
		var tier string
		var tt tierTotals
		for b := v[6:]; len(b) > 0; {
			num, typ, n := protowire.ConsumeTag(b)
			b = b[n:]
			switch {
			case num == 1 && typ == protowire.BytesType:
				s, m := protowire.ConsumeString(b)
				tier, b = s, b[m:]
			case typ == protowire.VarintType:
				x, m := protowire.ConsumeVarint(b)
				b = b[m:]
				switch num {
				case 2:
					tt.total = float64(x)
				case 3:
					tt.orders = int64(x)
				case 4:
					tt.items = int64(x)
				}
			default:
				t.Fatalf("unexpected field %d type %d", num, typ)
			}
		}
		return tier, tt
	})
	if reasons["unknown"] != "schema_not_found: schema id 4242: schema not found" ||
		!strings.HasPrefix(reasons["corrupt"], fmt.Sprintf("decode_error: schema id %d: ", id)) {
		t.Fatalf("dead letters %q", reasons)
	}
}

const paymentJSONSchema = `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",
 "properties":{"tier":{"enum":["BRONZE","SILVER","GOLD"]},"cents":{"type":"integer","minimum":0},"tags":{"type":"array","items":{"type":"string"}}},
 "required":["tier","cents"]}`

const totalsJSONSchema = `{"type":"object","properties":{"key":{"type":"string"},"total":{"type":"integer"},"orders":{"type":"integer"}},"required":["key","total","orders"],"additionalProperties":false}`

// TestJSONSchemaThroughRegistry: JSON values framed for a JSON Schema pass
// filter, map and aggregate and are written framed under out-value, each
// valid; a value that does not validate is a decode_error dead letter.
func TestJSONSchemaThroughRegistry(t *testing.T) {
	t.Parallel()
	_, broker := startKfake(t, []string{"in", "out", "dlq"})
	fake := srfake.New()
	t.Cleanup(fake.Close)
	id, _, err := fake.RegisterSchema("in-value", sr.Schema{Schema: paymentJSONSchema, Type: sr.TypeJSON})
	if err != nil {
		t.Fatal(err)
	}
	tiers := []string{"BRONZE", "SILVER", "GOLD"}
	want := map[string]*tierTotals{}
	var recs []*kgo.Record
	for i := range 3000 {
		cents := (i % 100) * 10
		v := fmt.Sprintf(`{"tier":%q,"cents":%d,"tags":["t%d"]}`, tiers[i%3], cents, i%7)
		recs = append(recs, &kgo.Record{Topic: "in", Key: fmt.Appendf(nil, "p%d", i), Value: confluentFrame(id, []byte(v))})
		if cents >= 300 {
			w := want[tiers[i%3]]
			if w == nil {
				w = &tierTotals{}
				want[tiers[i%3]] = w
			}
			w.total += float64(cents)
			w.orders++
		}
	}
	recs = append(recs, &kgo.Record{Topic: "in", Key: []byte("invalid"), Value: confluentFrame(id, []byte(`{"tier":"TIN","cents":-1}`))})
	var kept int64
	for _, w := range want {
		kept += w.orders
	}
	dir, metrics := t.TempDir(), testkit.FreeAddr(t)
	cfg := registryJob(dir, broker, metrics, fake.URL(), "json_schema", "cents >= 300",
		`{"tier": tier, "cents": cents}`,
		"        - {name: total, fn: sum, of: cents}\n        - {name: orders, fn: count}",
		"      auto_register: true\n      schema: '"+totalsJSONSchema+"'")
	outs, reasons := runRegistryJob(t, dir, cfg, broker, metrics, recs, kept)
	ss, ok := fake.GetSchema("out-value", 1)
	if !ok || ss.Type != sr.TypeJSON {
		t.Fatalf("out-value: %+v %v", ss, ok)
	}
	checkRunningTotals(t, outs, want, func(v []byte) (string, tierTotals) {
		if len(v) < 5 || v[0] != 0 || int(binary.BigEndian.Uint32(v[1:5])) != ss.ID {
			t.Fatalf("output %q is not framed with id %d", v, ss.ID)
		}
		var o struct {
			Key    string  `json:"key"`
			Total  float64 `json:"total"`
			Orders int64   `json:"orders"`
		}
		if err := json.Unmarshal(v[5:], &o); err != nil {
			t.Fatal(err)
		}
		return o.Key, tierTotals{total: o.Total, orders: o.Orders}
	})
	if !strings.HasPrefix(reasons["invalid"], fmt.Sprintf("decode_error: schema id %d: does not validate: ", id)) || len(reasons) != 1 {
		t.Fatalf("dead letters %q", reasons)
	}
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n")
}
