package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/state/keygroup"
)

// queryJSON returns r as the JSON the HTTP API writes.
func queryJSON(t *testing.T, r KeyQueryResult) string {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestQueryKey reads value, list and map states of one key with QueryKey on
// both backends and checks the exact JSON of each answer: decoded values,
// a map's entries in user-key order, an unknown key (found false, no
// value), TTL honoured (an expired value absent, an expired list element
// and map entry left out) without refreshing an OnReadAndWrite timestamp
// or removing what expired, the current key left alone, a state the
// backend does not hold (*UnknownStateError naming those it holds) and a
// key of another subtask's key group (*KeyGroupError).
func TestQueryKey(t *testing.T) {
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			clock := newFakeClock()
			cfg := testConfig(t, kind)
			cfg.Clock = clock
			b := open(t, cfg)
			ttl := &StateTtlConfig{TTL: 10 * time.Second, UpdateType: OnReadAndWrite}
			count, err := GetValueState(b, ValueStateDescriptor[int64]{Name: "count", Serializer: Int64Serializer{}})
			if err != nil {
				t.Fatal(err)
			}
			names, err := GetListState(b, ListStateDescriptor[string]{Name: "names", Serializer: StringSerializer{}, TTL: ttl})
			if err != nil {
				t.Fatal(err)
			}
			seen, err := GetMapState(b, MapStateDescriptor[string, int64]{Name: "seen", KeySerializer: StringSerializer{}, ValueSerializer: Int64Serializer{}, TTL: ttl})
			if err != nil {
				t.Fatal(err)
			}
			last, err := GetValueState(b, ValueStateDescriptor[map[string]any]{Name: "last", Serializer: JSONSerializer[map[string]any]{}, TTL: ttl})
			if err != nil {
				t.Fatal(err)
			}
			b.SetCurrentKey([]byte("apple"))
			must(t, count.Update(3))
			must(t, names.Add("first"))
			must(t, seen.Put("b", 2))
			must(t, seen.Put("a", 1))
			must(t, last.Update(map[string]any{"n": 1.5, "s": "x"}))
			clock.at(6 * time.Second)
			must(t, names.Add("second"))
			must(t, seen.Put("c", 3))
			b.SetCurrentKey([]byte("other"))

			q := func(name, key string) string {
				t.Helper()
				r, err := QueryKey(b, name, []byte(key))
				if err != nil {
					t.Fatalf("QueryKey(%s, %s): %v", name, key, err)
				}
				return queryJSON(t, r)
			}
			kg := keygroup.Assign([]byte("apple"), testMaxP)
			ts0, ts6 := epoch.UnixMilli(), epoch.Add(6*time.Second).UnixMilli()
			for _, tc := range []struct{ name, state, key, want string }{
				{"value", "count", "apple", `{"state":"count","kind":"value","serializer":"int64","ttl":false,"key_group":%d,"found":true,"value":3}`},
				{"list", "names", "apple", `{"state":"names","kind":"list","serializer":"string","ttl":true,"key_group":%d,"found":true,"value":["first","second"],"ttl_timestamps":[%d,%d]}`},
				{"map", "seen", "apple", `{"state":"seen","kind":"map","serializer":"string/int64","ttl":true,"key_group":%d,"found":true,"entries":[{"key":"a","value":1,"ttl_timestamp":%d},{"key":"b","value":2,"ttl_timestamp":%d},{"key":"c","value":3,"ttl_timestamp":%d}]}`},
				{"json value", "last", "apple", `{"state":"last","kind":"value","serializer":"json","ttl":true,"key_group":%d,"found":true,"value":{"n":1.5,"s":"x"},"ttl_timestamp":%d}`},
			} {
				want := tc.want
				switch tc.name {
				case "value":
					want = fmt.Sprintf(want, kg)
				case "list":
					want = fmt.Sprintf(want, kg, ts0, ts6)
				case "map":
					want = fmt.Sprintf(want, kg, ts0, ts0, ts6)
				default:
					want = fmt.Sprintf(want, kg, ts0)
				}
				if got := q(tc.state, tc.key); got != want {
					t.Errorf("%s:\n got %s\nwant %s", tc.name, got, want)
				}
			}
			// An unknown key: found false, nothing else but the key group.
			if got, want := q("count", "nokey"), fmt.Sprintf(`{"state":"count","kind":"value","serializer":"int64","ttl":false,"key_group":%d,"found":false}`, keygroup.Assign([]byte("nokey"), testMaxP)); got != want {
				t.Errorf("unknown key:\n got %s\nwant %s", got, want)
			}
			if got, want := q("seen", "nokey"), fmt.Sprintf(`{"state":"seen","kind":"map","serializer":"string/int64","ttl":true,"key_group":%d,"found":false}`, keygroup.Assign([]byte("nokey"), testMaxP)); got != want {
				t.Errorf("unknown key of a map:\n got %s\nwant %s", got, want)
			}
			// At 12 s what was written at 0 expired (TTL 10 s); the
			// queries above did not refresh it (OnReadAndWrite would).
			clock.at(12 * time.Second)
			if got, want := q("names", "apple"), fmt.Sprintf(`{"state":"names","kind":"list","serializer":"string","ttl":true,"key_group":%d,"found":true,"value":["second"],"ttl_timestamps":[%d]}`, kg, ts6); got != want {
				t.Errorf("list after expiry:\n got %s\nwant %s", got, want)
			}
			if got, want := q("seen", "apple"), fmt.Sprintf(`{"state":"seen","kind":"map","serializer":"string/int64","ttl":true,"key_group":%d,"found":true,"entries":[{"key":"c","value":3,"ttl_timestamp":%d}]}`, kg, ts6); got != want {
				t.Errorf("map after expiry:\n got %s\nwant %s", got, want)
			}
			if got, want := q("last", "apple"), fmt.Sprintf(`{"state":"last","kind":"value","serializer":"json","ttl":true,"key_group":%d,"found":false}`, kg); got != want {
				t.Errorf("expired value:\n got %s\nwant %s", got, want)
			}
			clock.at(17 * time.Second)
			if got := q("seen", "apple"); got != fmt.Sprintf(`{"state":"seen","kind":"map","serializer":"string/int64","ttl":true,"key_group":%d,"found":false}`, kg) {
				t.Errorf("map all expired: %s", got)
			}
			// Nothing was removed or refreshed by the queries: the stored
			// entries are still there (1 value + 1 list + 3 map entries +
			// 1 json value).
			if n := storedEntries(t, b); n != 6 {
				t.Errorf("stored entries after the queries = %d, want 6 (queries remove nothing)", n)
			}
			if string(b.CurrentKey()) != "other" {
				t.Errorf("current key %q after the queries, want other", b.CurrentKey())
			}

			_, err = QueryKey(b, "nope", []byte("apple"))
			var use *UnknownStateError
			if !errors.As(err, &use) || !errors.Is(err, ErrUnknownState) || !reflect.DeepEqual(use.Known, []string{"count", "last", "names", "seen"}) {
				t.Errorf("unknown state: %v, want *UnknownStateError listing count, last, names, seen", err)
			} else if want := `state: no keyed state "nope"; the operator holds count, last, names, seen`; err.Error() != want {
				t.Errorf("unknown state message %q, want %q", err, want)
			}
		})
	}
}

// TestQueryKeyOtherKeyGroup checks that a backend owning half the key
// groups refuses a key of the other half with a *KeyGroupError.
func TestQueryKeyOtherKeyGroup(t *testing.T) {
	cfg := testConfig(t, KindHashmap)
	cfg.KeyGroupRange = keygroup.RangeFor(testMaxP, 2, 0)
	b := open(t, cfg)
	if _, err := GetValueState(b, ValueStateDescriptor[int64]{Name: "count", Serializer: Int64Serializer{}}); err != nil {
		t.Fatal(err)
	}
	var key []byte
	for i := 0; key == nil; i++ {
		k := []byte{byte('a' + i%26), byte('a' + i/26)}
		if !cfg.KeyGroupRange.Contains(keygroup.Assign(k, testMaxP)) {
			key = k
		}
	}
	_, err := QueryKey(b, "count", key)
	var kge *KeyGroupError
	if !errors.As(err, &kge) || kge.KeyGroup != keygroup.Assign(key, testMaxP) {
		t.Fatalf("QueryKey of key group %d outside %s: %v, want *KeyGroupError", keygroup.Assign(key, testMaxP), cfg.KeyGroupRange, err)
	}
}
