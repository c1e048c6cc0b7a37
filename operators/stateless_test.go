package operators

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
)

// sliceCollector collects records in a slice.
type sliceCollector struct{ recs []runtime.Record }

func (c *sliceCollector) Collect(rec runtime.Record) error {
	c.recs = append(c.recs, rec)
	return nil
}

// mustExpr compiles src as the params field type T would.
func mustExpr[T any, P interface {
	*T
	UnmarshalText([]byte) error
}](t *testing.T, src string) T {
	t.Helper()
	var e T
	if err := P(&e).UnmarshalText([]byte(src)); err != nil {
		t.Fatalf("compile %q: %v", src, err)
	}
	return e
}

// testRecord is a record with every field set.
func testRecord(value string) runtime.Record {
	return runtime.Record{
		Key:       []byte("k1"),
		Value:     []byte(value),
		Timestamp: time.UnixMilli(1_700_000_000_123),
		Headers:   []runtime.Header{{Key: "trace", Value: []byte("t-1")}, {Key: "tenant", Value: []byte("acme")}},
		Origin:    runtime.Origin{Topic: "events", Partition: 2, Offset: 41},
	}
}

// run feeds rec to fn and returns what it emitted and the error.
func run(t *testing.T, fn ProcessFunction, rec runtime.Record) ([]runtime.Record, error) {
	t.Helper()
	if err := fn.Open(OpenContext{}); err != nil {
		t.Fatal(err)
	}
	var c sliceCollector
	err := fn.ProcessElement(context.Background(), rec, &c)
	return c.recs, err
}

// wantEvalError checks that err is a *runtime.RecordError with reason
// eval_error whose detail holds every part of want.
func wantEvalError(t *testing.T, err error, want ...string) {
	t.Helper()
	var re *runtime.RecordError
	if !errors.As(err, &re) || re.Reason != runtime.ReasonEvalError {
		t.Fatalf("error = %v (%T), want a RecordError with reason eval_error", err, err)
	}
	for _, w := range want {
		if !strings.Contains(re.Detail, w) {
			t.Errorf("detail %q does not contain %q", re.Detail, w)
		}
	}
}

func headersString(hs []runtime.Header) string {
	var parts []string
	for _, h := range hs {
		parts = append(parts, h.Key+"="+string(h.Value))
	}
	return strings.Join(parts, ",")
}

func TestFilter(t *testing.T) {
	cases := []struct {
		name, cond, value string
		keep              bool
	}{
		{"field true", "amount > 100", `{"amount":101}`, true},
		{"field false", "amount > 100", `{"amount":100}`, false},
		{"int against double", "amount > 99.5", `{"amount":100}`, true},
		{"nested field", "user.country == 'NL'", `{"user":{"country":"NL"}}`, true},
		{"key", "key == 'k1'", `{}`, true},
		{"timestamp in ms", "timestamp == 1700000000123", `{}`, true},
		{"header", "headers.tenant == 'acme'", `{}`, true},
		{"absent header", "'missing' in headers", `{}`, false},
		{"string value (not JSON)", "value == 'hello world'", `hello world`, true},
		{"non-object JSON value", "value > 3", `7`, true},
		{"presence test", "has(value.card)", `{"amount":1}`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := testRecord(c.value)
			out, err := run(t, NewFilter(&FilterParams{Condition: mustExpr[BoolExpression](t, c.cond)}), rec)
			if err != nil {
				t.Fatal(err)
			}
			if !c.keep {
				if len(out) != 0 {
					t.Fatalf("kept %d records, want none", len(out))
				}
				return
			}
			if len(out) != 1 {
				t.Fatalf("emitted %d records, want 1", len(out))
			}
			got := out[0]
			if string(got.Value) != c.value || string(got.Key) != "k1" || !got.Timestamp.Equal(rec.Timestamp) ||
				headersString(got.Headers) != "trace=t-1,tenant=acme" || got.Origin != rec.Origin {
				t.Errorf("kept record changed: %+v, want %+v", got, rec)
			}
		})
	}
}

func TestEvalErrors(t *testing.T) {
	cases := []struct {
		name   string
		fn     func(t *testing.T) ProcessFunction
		value  string
		detail []string
	}{
		{"filter: missing field", func(t *testing.T) ProcessFunction {
			return NewFilter(&FilterParams{Condition: mustExpr[BoolExpression](t, "amount > 100")})
		}, `{"id":1}`, []string{`expression "amount > 100"`, "amount"}},
		{"filter: wrong type", func(t *testing.T) ProcessFunction {
			return NewFilter(&FilterParams{Condition: mustExpr[BoolExpression](t, "amount > 100")})
		}, `{"amount":"12"}`, []string{`expression "amount > 100"`}},
		{"filter: non-bool condition", func(t *testing.T) ProcessFunction {
			return NewFilter(&FilterParams{Condition: mustExpr[BoolExpression](t, "amount")})
		}, `{"amount":5}`, []string{`expression "amount"`, "bool"}},
		{"map: missing field", func(t *testing.T) ProcessFunction {
			return NewMap(&MapParams{Value: mustExpr[Expression](t, `{"id": id, "amount": amount}`)})
		}, `{"id":1}`, []string{`expression "{\"id\": id, \"amount\": amount}"`, "amount"}},
		{"map: key of wrong type", func(t *testing.T) ProcessFunction {
			return NewMap(&MapParams{Key: mustExpr[Expression](t, "tags")})
		}, `{"tags":["a"]}`, []string{`expression "tags"`, "key must be a string, a number or null, got list"}},
		{"map: header of wrong type", func(t *testing.T) ProcessFunction {
			return NewMap(&MapParams{Headers: map[string]Expression{"x-amount": mustExpr[Expression](t, "amount")}})
		}, `{"amount":3}`, []string{`expression "amount"`, "header x-amount must be a string, got int"}},
		{"flat_map: non-list result", func(t *testing.T) ProcessFunction {
			return NewFlatMap(&FlatMapParams{Values: mustExpr[ListExpression](t, "items")})
		}, `{"items":"a,b"}`, []string{`expression "items"`, "list"}},
		{"flat_map: missing field", func(t *testing.T) ProcessFunction {
			return NewFlatMap(&FlatMapParams{Values: mustExpr[ListExpression](t, "items")})
		}, `{}`, []string{`expression "items"`, "items"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := run(t, c.fn(t), testRecord(c.value))
			wantEvalError(t, err, c.detail...)
			if len(out) != 0 {
				t.Errorf("emitted %d records with the error, want none", len(out))
			}
		})
	}
}

func TestMap(t *testing.T) {
	cases := []struct {
		name    string
		params  func(t *testing.T) *MapParams
		value   string
		want    string // value
		key     string // "<nil>" for none
		headers string
	}{
		{"project", func(t *testing.T) *MapParams {
			return &MapParams{Value: mustExpr[Expression](t, `{"id": id, "amount": amount}`)}
		}, `{"id":7,"amount":12,"note":"x"}`, `{"amount":12,"id":7}`, "k1", "trace=t-1,tenant=acme"},
		{"scalar value", func(t *testing.T) *MapParams {
			return &MapParams{Value: mustExpr[Expression](t, `double(amount) * 1.5`)}
		}, `{"amount":2}`, `3`, "k1", "trace=t-1,tenant=acme"},
		{"string key", func(t *testing.T) *MapParams {
			return &MapParams{Key: mustExpr[Expression](t, `user.id`)}
		}, `{"user":{"id":"u-9"}}`, `{"user":{"id":"u-9"}}`, "u-9", "trace=t-1,tenant=acme"},
		{"number key is its JSON text", func(t *testing.T) *MapParams {
			return &MapParams{Key: mustExpr[Expression](t, `id * 10`)}
		}, `{"id":42}`, `{"id":42}`, "420", "trace=t-1,tenant=acme"},
		{"null key removes it", func(t *testing.T) *MapParams {
			return &MapParams{Key: mustExpr[Expression](t, `null`)}
		}, `{}`, `{}`, "<nil>", "trace=t-1,tenant=acme"},
		{"set headers", func(t *testing.T) *MapParams {
			return &MapParams{Headers: map[string]Expression{
				"trace":  mustExpr[Expression](t, `"t-" + string(id)`),
				"region": mustExpr[Expression](t, `region`),
			}}
		}, `{"id":5,"region":"eu"}`, `{"id":5,"region":"eu"}`, "k1", "tenant=acme,region=eu,trace=t-5"},
		{"drop headers", func(t *testing.T) *MapParams {
			return &MapParams{DropHeaders: []string{"trace", "absent"}}
		}, `{}`, `{}`, "k1", "tenant=acme"},
		{"drop every header", func(t *testing.T) *MapParams {
			return &MapParams{DropHeaders: []string{"trace", "tenant"}}
		}, `{}`, `{}`, "k1", ""},
		{"value, key and headers together see the input", func(t *testing.T) *MapParams {
			return &MapParams{
				Value:       mustExpr[Expression](t, `{"n": id}`),
				Key:         mustExpr[Expression](t, `string(id)`),
				Headers:     map[string]Expression{"old-key": mustExpr[Expression](t, `key`)},
				DropHeaders: []string{"tenant"},
			}
		}, `{"id":3}`, `{"n":3}`, "3", "trace=t-1,old-key=k1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := testRecord(c.value)
			out, err := run(t, NewMap(c.params(t)), rec)
			if err != nil {
				t.Fatal(err)
			}
			if len(out) != 1 {
				t.Fatalf("emitted %d records, want 1", len(out))
			}
			got := out[0]
			key := string(got.Key)
			if got.Key == nil {
				key = "<nil>"
			}
			if string(got.Value) != c.want || key != c.key || headersString(got.Headers) != c.headers {
				t.Errorf("got value %s key %s headers %q, want %s %s %q", got.Value, key, headersString(got.Headers), c.want, c.key, c.headers)
			}
			if !got.Timestamp.Equal(rec.Timestamp) || got.Origin != rec.Origin {
				t.Errorf("timestamp %v origin %+v, want those of the input %v %+v", got.Timestamp, got.Origin, rec.Timestamp, rec.Origin)
			}
			if headersString(rec.Headers) != "trace=t-1,tenant=acme" {
				t.Errorf("the input's headers were changed: %q", headersString(rec.Headers))
			}
		})
	}
}

func TestFlatMap(t *testing.T) {
	cases := []struct {
		name, values, value string
		want                []string
	}{
		{"objects", "items", `{"items":[{"sku":"a"},{"sku":"b","n":2}]}`, []string{`{"sku":"a"}`, `{"n":2,"sku":"b"}`}},
		{"scalars", "tags", `{"tags":["x",1,true,null]}`, []string{`"x"`, `1`, `true`, `null`}},
		{"computed", "items.map(i, {'id': id, 'sku': i})", `{"id":9,"items":["a","b"]}`, []string{`{"id":9,"sku":"a"}`, `{"id":9,"sku":"b"}`}},
		{"empty list", "items", `{"items":[]}`, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := testRecord(c.value)
			out, err := run(t, NewFlatMap(&FlatMapParams{Values: mustExpr[ListExpression](t, c.values)}), rec)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range out {
				got = append(got, string(o.Value))
				if string(o.Key) != "k1" || !o.Timestamp.Equal(rec.Timestamp) || o.Origin != rec.Origin ||
					headersString(o.Headers) != "trace=t-1,tenant=acme" {
					t.Errorf("element record %+v lost the input's key, timestamp, headers or origin", o)
				}
			}
			if strings.Join(got, " ") != strings.Join(c.want, " ") {
				t.Errorf("values = %q, want %q", got, c.want)
			}
		})
	}
}

func TestExpressionCompileErrors(t *testing.T) {
	cases := []struct {
		name     string
		compile  func() error
		line     int
		col      int
		contains string
	}{
		{"syntax", func() error { var e BoolExpression; return e.UnmarshalText([]byte("amount >")) }, 1, 9, `expression "amount >"`},
		{"filter result known not bool", func() error { var e BoolExpression; return e.UnmarshalText([]byte("amount + 1")) }, 1, 1, "bool"},
		{"flat_map result known not list", func() error { var e ListExpression; return e.UnmarshalText([]byte("'a'")) }, 1, 1, "list"},
		{"unknown function", func() error { var e Expression; return e.UnmarshalText([]byte("nosuch(user)")) }, 1, 7, "nosuch"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.compile()
			var ce *CompileError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v (%T) is not a *CompileError", err, err)
			}
			if l, col := ce.Position(); l != c.line || col != c.col {
				t.Errorf("position %d:%d, want %d:%d (%v)", l, col, c.line, c.col, err)
			}
			if !strings.Contains(err.Error(), c.contains) {
				t.Errorf("error %q does not contain %q", err, c.contains)
			}
		})
	}
}

func TestMapParamsCheck(t *testing.T) {
	cases := []struct {
		name   string
		params MapParams
		want   []string
	}{
		{"nothing set", MapParams{}, []string{"value: required (or at least one of key, headers, drop_headers)"}},
		{"header set and dropped", MapParams{
			Headers:     map[string]Expression{"a": mustExpr[Expression](t, "'x'")},
			DropHeaders: []string{"b", "a"},
		}, []string{`drop_headers[1]: header "a" is also set in headers`}},
		{"header without expression", MapParams{Headers: map[string]Expression{"a": {}}}, []string{"headers.a: required: an expression giving the header value"}},
		{"only drop_headers", MapParams{DropHeaders: []string{"a"}}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			c.params.CheckParams(func(field, msg string) { got = append(got, field+": "+msg) })
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("problems %q, want %q", got, c.want)
			}
		})
	}
	var got []string
	(&FilterParams{}).CheckParams(func(field, msg string) { got = append(got, field+": "+msg) })
	(&FlatMapParams{}).CheckParams(func(field, msg string) { got = append(got, field+": "+msg) })
	if strings.Join(got, ";") != "condition: required;values: required" {
		t.Errorf("filter and flat_map without params: %q", got)
	}
}

func TestExpressionKeySelector(t *testing.T) {
	cases := []struct {
		name, keyBy, value string
		key                string // when reason is ""
		reason             string
		detail             string
	}{
		{"string", "user.country + '/' + user.city", `{"user":{"country":"NL","city":"Ams"}}`, "NL/Ams", "", ""},
		{"number is its JSON text", "id * 2", `{"id":21}`, "42", "", ""},
		{"double", "double(id) / 4.0", `{"id":2}`, "0.5", "", ""},
		{"kafka key", "key", `{"key":"field"}`, "k1", "", ""},
		{"value prefix", "value.id", `{"id":"v"}`, "v", "", ""},
		{"header", "headers.tenant", `{}`, "acme", "", ""},
		{"null", "value.?id.orValue(null)", `{}`, "", runtime.ReasonMissingKey, `key_by "value.?id.orValue(null)": result is null`},
		{"bool", "id > 1", `{"id":2}`, "", runtime.ReasonWrongType, `key_by "id > 1": result is a bool, not a string or number`},
		{"map", "{'a': id}", `{"id":2}`, "", runtime.ReasonWrongType, `result is a map`},
		{"list", "[id]", `{"id":2}`, "", runtime.ReasonWrongType, `result is a list`},
		{"missing field", "id + 1", `{}`, "", runtime.ReasonEvalError, `expression "id + 1"`},
		{"wrong type", "id + 1", `{"id":"x"}`, "", runtime.ReasonEvalError, `expression "id + 1"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sel, err := NewKeySelector(c.keyBy)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := sel.(*FieldKeySelector); ok { // key_by: key is the Kafka key, without an evaluation
				t.Fatalf("NewKeySelector(%q) = %T, want an expression selector", c.keyBy, sel)
			}
			rec := testRecord(c.value)
			key, err := sel.SelectKey(&rec)
			if c.reason == "" {
				if err != nil || string(key) != c.key {
					t.Fatalf("key = %q, %v; want %q", key, err, c.key)
				}
				return
			}
			var re *runtime.RecordError
			if !errors.As(err, &re) || re.Reason != c.reason || !strings.Contains(re.Detail, c.detail) {
				t.Fatalf("error = %v, want reason %s with %q in the detail", err, c.reason, c.detail)
			}
		})
	}
	if sel, err := NewKeySelector("user.id"); err != nil {
		t.Fatal(err)
	} else if _, ok := sel.(*FieldKeySelector); !ok {
		t.Errorf("NewKeySelector(user.id) = %T, want a field selector", sel)
	}
	_, err := NewKeySelector("user +")
	var ce *CompileError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), `expression "user +"`) {
		t.Errorf("NewKeySelector(user +) error = %v, want a CompileError naming the expression", err)
	}
}

// TestFilterPassesTombstones: a table source's tombstone (-D, null value)
// passes a filter on a value field unevaluated (it would otherwise be a bad
// record, skipped by default, and the deleted row would stay in an upsert
// sink's topic); a -D carrying its row (an aggregate's, a
// changelog_normalize's) is still filtered by its row.
func TestFilterPassesTombstones(t *testing.T) {
	f := NewFilter(&FilterParams{Condition: mustExpr[BoolExpression](t, `country == "NL"`)})
	tomb := runtime.Record{Key: []byte("u1"), Change: runtime.ChangeDelete, Format: runtime.FormatJSON}
	out, err := run(t, f, tomb)
	if err != nil || len(out) != 1 || out[0].Change != runtime.ChangeDelete || string(out[0].Key) != "u1" || out[0].Value != nil {
		t.Fatalf("tombstone: out %+v, err %v; want the tombstone passed on", out, err)
	}
	for value, n := range map[string]int{`{"country":"NL"}`: 1, `{"country":"DE"}`: 0} {
		rec := testRecord(value)
		rec.Change = runtime.ChangeDelete
		out, err := run(t, f, rec)
		if err != nil || len(out) != n {
			t.Fatalf("-D %s: %d records, err %v; want %d", value, len(out), err, n)
		}
	}
}

// TestMapKeepsTombstones: a table source's tombstone (-D, null value)
// passes a map with a value expression over value fields as a tombstone of
// its key (it would otherwise be a bad record, skipped by default, and the
// deleted row would stay in an upsert sink's topic); a key expression over
// the Kafka key still applies.
func TestMapKeepsTombstones(t *testing.T) {
	m := NewMap(&MapParams{Value: mustExpr[Expression](t, `{"c": country}`), Key: mustExpr[Expression](t, `"user-" + key`)})
	tomb := runtime.Record{Key: []byte("u1"), Change: runtime.ChangeDelete, Format: runtime.FormatJSON}
	out, err := run(t, m, tomb)
	if err != nil || len(out) != 1 || out[0].Change != runtime.ChangeDelete || string(out[0].Key) != "user-u1" || out[0].Value != nil {
		t.Fatalf("tombstone: out %+v, err %v; want a tombstone of user-u1", out, err)
	}
	rec := testRecord(`{"country":"NL"}`)
	rec.Change = runtime.ChangeDelete
	out, err = run(t, m, rec)
	if err != nil || len(out) != 1 || string(out[0].Value) != `{"c":"NL"}` {
		t.Fatalf("-D with its row: out %+v, err %v; want the row mapped", out, err)
	}
}

// TestFlatMapPassesTombstones: a table source's tombstone (-D, null value)
// passes a flat_map once, unchanged, instead of failing values (a bad
// record, skipped by default, left the deleted row in an upsert sink's
// compacted topic); a -D carrying its row is expanded as any record.
func TestFlatMapPassesTombstones(t *testing.T) {
	f := NewFlatMap(&FlatMapParams{Values: mustExpr[ListExpression](t, `items`)})
	tomb := runtime.Record{Key: []byte("u1"), Change: runtime.ChangeDelete, Format: runtime.FormatJSON}
	out, err := run(t, f, tomb)
	if err != nil || len(out) != 1 || out[0].Change != runtime.ChangeDelete || string(out[0].Key) != "u1" || out[0].Value != nil {
		t.Fatalf("tombstone: out %+v, err %v; want the tombstone of u1", out, err)
	}
	rec := testRecord(`{"items":[1,2]}`)
	rec.Change = runtime.ChangeDelete
	out, err = run(t, f, rec)
	if err != nil || len(out) != 2 || string(out[0].Value) != "1" || string(out[1].Value) != "2" || out[1].Change != runtime.ChangeDelete {
		t.Fatalf("-D with its row: out %+v, err %v; want two -D records 1 and 2", out, err)
	}
}
