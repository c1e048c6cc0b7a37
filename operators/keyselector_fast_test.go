package operators

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/kstreamd/kstreamd/expression"
	"github.com/kstreamd/kstreamd/runtime"
)

// fieldKeyCases are values and paths on which the fast key path must
// agree with encoding/json's (or leave the value to it).
var fieldKeyCases = []struct{ value, path string }{
	{`{"user":"u1"}`, "user"},
	{`{"user":42}`, "user"},
	{` {"user" : -1.5e3 } `, "user"},
	{`{"user":{"id":"a","id":"b"}}`, "user.id"},      // the last repeated key wins
	{`{"user":"a","user":7}`, "user"},                // the last, of another type
	{`{"user":"caf\u00e9"}`, "user"},                 // an escape: general path
	{`{"user":"café"}`, "user"},                      // non-ASCII: general path
	{`{"us\u0065r":"x","user":"y"}`, "user"},         // an escaped key
	{`{"user":null}`, "user"},                        // null: missing_key
	{`{"other":1}`, "user"},                          // absent
	{`{"user":true}`, "user"},                        // wrong_type
	{`{"user":[1]}`, "user"},                         // wrong_type
	{`{"user":{"id":1}}`, "user"},                    // wrong_type
	{`[1,2]`, "user"},                                // not_object
	{`{"user":1}x`, "user"},                          // malformed
	{`{"user":01}`, "user"},                          // malformed number
	{`{"user":1,}`, "user"},                          // malformed
	{`{"user":"a` + "\x01" + `"}`, "user"},           // a control character: malformed
	{`{"user":{"id":{"x":"deep"}}}`, "user.id.x"},    // nested
	{`{"user":{"id":"a"},"user":"flat"}`, "user.id"}, // the last user is not an object
	{`{"a":"\"","user":"q"}`, "user"},                // an escape elsewhere
	{`{"user":""}`, "user"},                          // the empty string
	{"{\"user\":\"\xff\"}", "user"},                  // invalid UTF-8: general path
	{`{"bid":{"auction":1007,"bidder":1001}}`, "bid.auction"},
}

// TestFieldKeyFast: wherever the fast path answers, its key is the one
// encoding/json's path gives without error; it answers the common cases
// (plain string and number fields, nested, repeated keys).
func TestFieldKeyFast(t *testing.T) {
	answered := 0
	for _, c := range fieldKeyCases {
		checkFieldKeyFast(t, []byte(c.value), c.path)
		if _, ok := fieldKeyFast([]byte(c.value), strings.Split(c.path, "."), false); ok {
			answered++
		}
	}
	if answered != 9 {
		t.Errorf("the fast path answered %d cases, want 9", answered)
	}
}

func checkFieldKeyFast(t *testing.T, value []byte, path string) {
	t.Helper()
	s := NewFieldKeySelector(path)
	fast, ok := fieldKeyFast(value, s.path, false)
	if json.Valid(value) {
		// Known valid (the source checked it): the same answer without
		// json.Valid.
		if cf, cok := fieldKeyFast(value, s.path, true); cok != ok || string(cf) != string(fast) {
			t.Errorf("%s on %q: checked %q, %v; unchecked %q, %v", path, value, cf, cok, fast, ok)
		}
	}
	if !ok {
		return
	}
	slow, err := s.selectKey(value)
	if err != nil || string(slow) != string(fast) {
		t.Errorf("%s on %q: fast %q, encoding/json %q (%v)", path, value, fast, slow, err)
	}
}

// FuzzFieldKeyFast compares the fast path with encoding/json's on any
// value.
func FuzzFieldKeyFast(f *testing.F) {
	for _, c := range fieldKeyCases {
		f.Add([]byte(c.value), c.path)
	}
	f.Fuzz(func(t *testing.T, value []byte, path string) {
		if !IsFieldPath(path) {
			return
		}
		checkFieldKeyFast(t, value, path)
	})
}

// selectKeyResult is a key selector's result as one comparable text.
func selectKeyResult(sel runtime.KeySelector, rec *runtime.Record) string {
	key, err := sel.SelectKey(rec)
	var re *runtime.RecordError
	if errors.As(err, &re) {
		return "error " + re.Reason + ": " + re.Detail
	}
	if err != nil {
		return "error " + err.Error()
	}
	return "key " + string(key)
}

// TestFieldKeySelectorCheckedRecord: a record whose value the source
// checked (marked ValidJSON, or carrying its checked expression.Doc) gets
// the same key or bad-record error as the same bytes unmarked, on every
// valid case of fieldKeyCases, the fast path answering without json.Valid
// (fieldKeyFast's checked); the exact keys of the answered cases.
func TestFieldKeySelectorCheckedRecord(t *testing.T) {
	want := map[string]string{
		`{"user":"u1"}`:                "key u1",
		`{"user":42}`:                  "key 42",
		` {"user" : -1.5e3 } `:         "key -1.5e3",
		`{"user":{"id":"a","id":"b"}}`: "key b",
		`{"user":{"id":{"x":"deep"}}}`: "key deep",
		`{"user":null}`:                "error missing_key: key_by user: user is null",
	}
	valid := 0
	for _, c := range fieldKeyCases {
		if !json.Valid([]byte(c.value)) {
			continue
		}
		valid++
		sel := NewFieldKeySelector(c.path)
		plain := runtime.Record{Value: []byte(c.value)}
		marked := runtime.Record{Value: []byte(c.value)}
		marked.SetDecoded(runtime.ValidJSON{})
		doc := new(expression.Doc)
		withDoc := runtime.Record{Value: []byte(c.value)}
		if !doc.ResetChecked(withDoc.Value) {
			t.Fatalf("%q: ResetChecked refused valid JSON", c.value)
		}
		withDoc.SetDecoded(doc)
		if !marked.CheckedJSON() {
			t.Fatalf("%q: the marked record is not CheckedJSON", c.value)
		}
		p, m, d := selectKeyResult(sel, &plain), selectKeyResult(sel, &marked), selectKeyResult(sel, &withDoc)
		if m != p || d != p {
			t.Errorf("%s on %q: marked %q, with its Doc %q; unmarked %q", c.path, c.value, m, d, p)
		}
		if w, ok := want[c.value]; ok && p != w {
			t.Errorf("%s on %q: %q, want %q", c.path, c.value, p, w)
		}
	}
	if valid != 20 {
		t.Errorf("%d valid cases, want 20", valid)
	}
}

// TestExpressionKeySelectorConcurrent: one ExpressionKeySelector shared by
// several goroutines (subtasks), each evaluating in an environment of the
// pool, gives every record its own key (Nexmark q8's dedup key), and a
// key stays as it was after the environment moved on to other records.
func TestExpressionKeySelectorConcurrent(t *testing.T) {
	sel, err := NewKeySelector("string(auction.seller) + '@' + string(auction.dateTime - auction.dateTime % 10000)")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var keys [][]byte
			for i := range 500 {
				seller := g*1000 + i
				rec := runtime.Record{Value: fmt.Appendf(nil, `{"event_type":1,"auction":{"seller":%d,"dateTime":%d}}`, seller, 1700000000000+int64(i)*7919)}
				if i%2 == 0 { // the source's checked Doc, as in the job
					doc := new(expression.Doc)
					doc.ResetChecked(rec.Value)
					rec.SetDecoded(doc)
				}
				key, err := sel.SelectKey(&rec)
				if err != nil {
					errs <- err.Error()
					return
				}
				keys = append(keys, key)
			}
			for i, key := range keys {
				ts := 1700000000000 + int64(i)*7919
				if want := fmt.Sprintf("%d@%d", g*1000+i, ts-ts%10000); string(key) != want {
					errs <- fmt.Sprintf("goroutine %d record %d: key %q, want %q", g, i, key, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestExpressionKeySelectorAllocs: the q8 dedup key on a record carrying
// its checked Doc allocates at most 6 times (the direct evaluator's
// strings and the key); a9c897c also allocated a RecordEnv per record
// and evaluated the key in CEL's interpreter (25 allocations).
func TestExpressionKeySelectorAllocs(t *testing.T) {
	sel, err := NewKeySelector("string(auction.seller) + '@' + string(auction.dateTime - auction.dateTime % 10000)")
	if err != nil {
		t.Fatal(err)
	}
	rec := runtime.Record{Value: []byte(`{"event_type":1,"auction":{"id":1000,"seller":1234,"dateTime":1700000012345,"expires":1700000022345}}`)}
	doc := new(expression.Doc)
	doc.ResetChecked(rec.Value)
	rec.SetDecoded(doc)
	var key []byte
	allocs := testing.AllocsPerRun(200, func() {
		if key, err = sel.SelectKey(&rec); err != nil {
			t.Fatal(err)
		}
	})
	if string(key) != "1234@1700000010000" {
		t.Fatalf("key %q", key)
	}
	// The two numbers' texts, the two string +, the result's copy from
	// the record's lent bytes and the key's bytes.
	if allocs > 6 {
		t.Errorf("%.1f allocations per key, want at most 6", allocs)
	}
}
