package state

import (
	"context"
	"encoding/json"
	"testing"
	"time"
)

type nilPoint struct{ X int }

// updateNilCase is one value type of TestValueUpdateNilClears: a non-nil
// value, the type's nil, and values that look empty but are not nil.
type updateNilCase[T any] struct {
	name    string
	ser     Serializer[T]
	present T
	nilV    T
	notNil  []T // stored as present values
}

// TestValueUpdateNilClears: Update of a nil value clears the current key's
// value (Flink's update(null) = clear()), sync and async, on both backends,
// with and without TTL: Value then returns false and the backend stores no
// entry for it. Empty but non-nil values ([]byte{}, JSON null, an empty
// map, an interface holding a typed nil pointer) stay stored values.
func TestValueUpdateNilClears(t *testing.T) {
	var typedNil *nilPoint
	runUpdateNil(t, updateNilCase[[]byte]{"bytes", BytesSerializer{}, []byte("x"), nil, [][]byte{{}}})
	runUpdateNil(t, updateNilCase[json.RawMessage]{"raw_message", JSONSerializer[json.RawMessage]{}, json.RawMessage(`{"a":1}`), nil, []json.RawMessage{json.RawMessage("null")}})
	runUpdateNil(t, updateNilCase[*nilPoint]{"pointer", JSONSerializer[*nilPoint]{}, &nilPoint{X: 1}, nil, nil})
	runUpdateNil(t, updateNilCase[map[string]int]{"map", JSONSerializer[map[string]int]{}, map[string]int{"a": 1}, nil, []map[string]int{{}}})
	runUpdateNil(t, updateNilCase[any]{"interface", JSONSerializer[any]{}, any("x"), nil, []any{any(typedNil)}})
}

func runUpdateNil[T any](t *testing.T, c updateNilCase[T]) {
	for _, kind := range backendKinds {
		for _, ttl := range []*StateTtlConfig{nil, {TTL: time.Hour}} {
			name := c.name + "/" + kind
			if ttl != nil {
				name += "/ttl"
			}
			d := ValueStateDescriptor[T]{Name: "v", Serializer: c.ser, TTL: ttl}
			t.Run(name+"/sync", func(t *testing.T) {
				b := open(t, testConfig(t, kind))
				s := must1(GetValueState(b, d))(t)
				b.SetCurrentKey([]byte("k"))
				must(t, s.Update(c.present))
				if _, ok := must2(s.Value())(t); !ok {
					t.Fatal("Value after Update(non-nil) is absent")
				}
				must(t, s.Update(c.nilV))
				if v, ok := must2(s.Value())(t); ok {
					t.Fatalf("Value after Update(nil) = %v, present; want absent", v)
				}
				if n := must1(EntryCount(b))(t); n != 0 {
					t.Fatalf("stored entries after Update(nil) = %d, want 0", n)
				}
				for _, v := range c.notNil {
					must(t, s.Update(v))
					if _, ok := must2(s.Value())(t); !ok {
						t.Fatalf("Value after Update(%#v) is absent; only nil clears", v)
					}
				}
			})
			t.Run(name+"/async", func(t *testing.T) {
				b := open(t, testConfig(t, kind))
				aec, err := NewAsyncExecutionController(b, newTestMailbox())
				if err != nil {
					t.Fatal(err)
				}
				defer aec.Close()
				s := must1(GetAsyncValueState(aec, d))(t)
				var got []bool
				run := func(fn func() error) {
					t.Helper()
					ctx := context.Background()
					must(t, aec.Process(ctx, []byte("k"), fn))
					must(t, aec.Drain(ctx))
				}
				read := func(o Optional[T]) error { got = append(got, o.OK); return nil }
				run(func() error {
					s.AsyncUpdate(c.present)
					s.AsyncValue().ThenAccept(read)
					return nil
				})
				run(func() error {
					// Reading first makes the update wait for the read: the
					// queued path as well as the immediate one.
					s.AsyncValue().ThenAccept(read)
					s.AsyncUpdate(c.nilV)
					s.AsyncValue().ThenAccept(read)
					return nil
				})
				if want := []bool{true, true, false}; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
					t.Fatalf("async reads present = %v, want %v", got, want)
				}
				if n := must1(EntryCount(b))(t); n != 0 {
					t.Fatalf("stored entries after AsyncUpdate(nil) = %d, want 0", n)
				}
			})
		}
	}
}

// must2 is must1 for calls returning a value, a bool and an error.
func must2[T any](v T, ok bool, err error) func(testing.TB) (T, bool) {
	return func(t testing.TB) (T, bool) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v, ok
	}
}
