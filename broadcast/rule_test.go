package broadcast

import (
	"errors"
	"slices"
	"testing"
)

func TestDecodeRule(t *testing.T) {
	for _, tc := range []struct {
		name       string
		key, value []byte
		want       RuleUpdate
		err        string
	}{
		{"put", []byte("R1"), []byte(`{"name":"R1","first":"RECTANGLE","second":"TRIANGLE"}`),
			RuleUpdate{Name: "R1", Rule: &Rule{Name: "R1", First: "RECTANGLE", Second: "TRIANGLE"}}, ""},
		{"put without key", nil, []byte(`{"name":"R2","first":"CIRCLE","second":"CIRCLE"}`),
			RuleUpdate{Name: "R2", Rule: &Rule{Name: "R2", First: "CIRCLE", Second: "CIRCLE"}}, ""},
		{"delete", []byte("R1"), nil, RuleUpdate{Name: "R1"}, ""},
		{"delete without key", nil, nil, RuleUpdate{}, "broadcast: bad rule: deletion (null value) without a key"},
		{"not json", []byte("R1"), []byte(`{nope`), RuleUpdate{}, "broadcast: bad rule: invalid character 'n' looking for beginning of object key string"},
		{"unknown field", []byte("R1"), []byte(`{"name":"R1","first":"A","second":"B","third":"C"}`), RuleUpdate{}, `broadcast: bad rule: json: unknown field "third"`},
		{"empty first", []byte("R1"), []byte(`{"name":"R1","second":"B"}`), RuleUpdate{}, `broadcast: bad rule: rule "R1": first is empty`},
		{"empty second", []byte("R1"), []byte(`{"name":"R1","first":"A"}`), RuleUpdate{}, `broadcast: bad rule: rule "R1": second is empty`},
		{"no name", nil, []byte(`{"first":"A","second":"B"}`), RuleUpdate{}, "broadcast: bad rule: name is empty"},
		{"key differs", []byte("R9"), []byte(`{"name":"R1","first":"A","second":"B"}`), RuleUpdate{}, `broadcast: bad rule: key "R9" differs from name "R1"`},
		{"trailing", []byte("R1"), []byte(`{"name":"R1","first":"A","second":"B"} {}`), RuleUpdate{}, "broadcast: bad rule: trailing data after the JSON object"},
		{"empty value", []byte("R1"), []byte{}, RuleUpdate{}, "broadcast: bad rule: EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeRule(tc.key, tc.value)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err || !errors.Is(err, ErrBadRule) {
					t.Fatalf("err = %v, want %q wrapping ErrBadRule", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Name != tc.want.Name || (got.Rule == nil) != (tc.want.Rule == nil) || (got.Rule != nil && *got.Rule != *tc.want.Rule) {
				t.Fatalf("got %+v (%+v), want %+v (%+v)", got, got.Rule, tc.want, tc.want.Rule)
			}
		})
	}
}

func FuzzDecodeRule(f *testing.F) {
	f.Add([]byte("R1"), []byte(`{"name":"R1","first":"RECTANGLE","second":"TRIANGLE"}`))
	f.Add([]byte(""), []byte(`{"name":"x","first":"a","second":"b"}`))
	f.Add([]byte("R1"), []byte(`[]`))
	f.Fuzz(func(t *testing.T, key, value []byte) {
		up, err := DecodeRule(key, value)
		if err != nil {
			if !errors.Is(err, ErrBadRule) {
				t.Fatalf("error %v does not wrap ErrBadRule", err)
			}
			return
		}
		if up.Name == "" {
			t.Fatal("accepted an update without a name")
		}
		if up.Rule != nil && (up.Rule.First == "" || up.Rule.Second == "" || up.Rule.Name != up.Name) {
			t.Fatalf("accepted an incomplete rule %+v", up.Rule)
		}
	})
}

func TestStateEntriesAscending(t *testing.T) {
	s := NewState[string, int]("rules")
	for _, k := range []string{"R3", "R1", "R2"} {
		s.Put(k, len(k))
	}
	if !s.Remove("R2") || s.Remove("R2") {
		t.Fatal("Remove reports presence wrongly")
	}
	var keys []string
	for k := range s.Entries() {
		keys = append(keys, k)
	}
	if !slices.Equal(keys, []string{"R1", "R3"}) || s.Len() != 2 || !s.Contains("R1") || s.Contains("R2") {
		t.Fatalf("entries %v len %d", keys, s.Len())
	}
	var ro ReadOnlyState[string, int] = s
	if v, ok := ro.Get("R3"); !ok || v != 2 {
		t.Fatalf("Get(R3) = %d, %v", v, ok)
	}
}
