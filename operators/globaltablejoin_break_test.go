package operators

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kstreamd/kstreamd/runtime"
)

// TestGlobalTableJoinFormat2EveryByte: a table changed between
// checkpoints by upserts and tombstones (keys and values with NUL, invalid
// UTF-8, quotes, backslashes, U+2028, an empty key, keys longer than a
// one-byte length, values nil, empty, text and 200 KB), checkpointed in
// format 2 and indented as _metadata indents it, restores the very rows
// the model holds (value bytes, text, nil or empty), as does the list the
// base wrote for the same rows; the restored table checkpoints to the same
// bytes; and every key with valid UTF-8 is looked up from a record whose
// buffer is overwritten after the lookup, joined with its row.
func TestGlobalTableJoinFormat2EveryByte(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(46, 13))
	keys := []string{"", "\x00", "a\x00b", "\xff\xfe", "\"q\"", `b\s`, "\u2028\u2029", "é日本", "<&>",
		strings.Repeat("k", 200), strings.Repeat("\x80", 130), "u1", "u2", "7"}
	values := []func() ([]byte, runtime.Format){
		func() ([]byte, runtime.Format) { return nil, runtime.FormatJSON },
		func() ([]byte, runtime.Format) { return []byte{}, runtime.FormatJSON },
		func() ([]byte, runtime.Format) { return []byte{}, runtime.FormatText },
		func() ([]byte, runtime.Format) { return nil, runtime.FormatText },
		func() ([]byte, runtime.Format) { return []byte(`{"c":"BE","s":"\u2028\\\"<"}`), runtime.FormatJSON },
		func() ([]byte, runtime.Format) { return []byte("text \x00\xff\"\\\u2028"), runtime.FormatText },
		func() ([]byte, runtime.Format) { return []byte("not json \xff"), runtime.FormatJSON },
		func() ([]byte, runtime.Format) {
			return []byte(`{"big":"` + strings.Repeat("x", 200<<10) + `"}`), runtime.FormatJSON
		},
	}
	p := &GlobalTableJoinParams{Key: compiled(t, "user"), Join: TableJoinLeft, Select: compiled(t, `{"user": left.user, "row": right}`)}
	j := NewGlobalTableJoin(p)
	model := map[string]*tableRow{}
	for round := range 12 {
		for range 1 + rng.IntN(10) {
			k := keys[rng.IntN(len(keys))]
			switch rng.IntN(4) {
			case 0:
				if err := j.ProcessBroadcastElement(ctx, runtime.Record{Key: []byte(k), Change: runtime.ChangeDelete}, &sliceCollector{}); err != nil {
					t.Fatal(err)
				}
				delete(model, k)
			case 1:
				if err := j.ProcessBroadcastElement(ctx, runtime.Record{Key: []byte(k), Value: []byte("old"), Change: runtime.ChangeUpdateBefore}, &sliceCollector{}); err != nil {
					t.Fatal(err)
				}
			default:
				v, f := values[rng.IntN(len(values))]()
				buf := append([]byte(k), v...) // the record's buffer, reused after
				rec := runtime.Record{Key: buf[:len(k):len(k)], Format: f, Change: runtime.ChangeUpdateAfter}
				if v != nil {
					rec.Value = buf[len(k):]
				}
				if err := j.ProcessBroadcastElement(ctx, rec, &sliceCollector{}); err != nil {
					t.Fatal(err)
				}
				for i := range buf {
					buf[i] = '#'
				}
				model[k] = &tableRow{raw: v, text: f == runtime.FormatText}
			}
		}
		m, err := j.SnapshotBroadcastState()
		if err != nil {
			t.Fatal(err)
		}
		indented, err := json.MarshalIndent(map[string]json.RawMessage{GlobalTableState: m[GlobalTableState]}, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		var meta map[string]json.RawMessage
		if err := json.Unmarshal(indented, &meta); err != nil {
			t.Fatal(err)
		}
		var list []globalTableSnapshot // what the base wrote for the same rows
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range model {
				if !yield(k) {
					return
				}
			}
		}) {
			list = append(list, globalTableSnapshot{Key: []byte(k), Value: model[k].raw, Text: model[k].text})
		}
		oldList, err := json.Marshal(list)
		if err != nil {
			t.Fatal(err)
		}
		if list == nil {
			oldList = []byte("[]")
		}
		for name, raw := range map[string]json.RawMessage{"format 2": meta[GlobalTableState], "list": oldList} {
			r := NewGlobalTableJoin(p)
			if err := r.RestoreBroadcastState(map[string]json.RawMessage{GlobalTableState: raw}); err != nil {
				t.Fatalf("round %d, %s: %v", round, name, err)
			}
			if len(r.rows) != len(model) {
				t.Fatalf("round %d, %s: %d rows, want %d", round, name, len(r.rows), len(model))
			}
			for k, want := range model {
				got := r.rows[k]
				if got == nil || !bytes.Equal(got.raw, want.raw) || (got.raw == nil) != (want.raw == nil) || got.text != want.text {
					t.Fatalf("round %d, %s: row %q = %+v, want %+v", round, name, k, got, want)
				}
			}
			again, err := r.SnapshotBroadcastState()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again[GlobalTableState], m[GlobalTableState]) {
				t.Fatalf("round %d, %s: restored table checkpoints to other bytes", round, name)
			}
			for _, k := range keys {
				if !utf8.ValidString(k) {
					continue
				}
				kj, _ := json.Marshal(k)
				buf := append(append([]byte(`{"user":`), kj...), '}')
				out := &sliceCollector{}
				if err := r.ProcessElement(ctx, runtime.Record{Value: buf, Format: runtime.FormatJSON}, out); err != nil {
					t.Fatal(err)
				}
				for i := range buf {
					buf[i] = ' '
				}
				var right any
				if row := model[k]; row != nil {
					right = decodeValue(row.raw, row.text)
				}
				want, _ := json.Marshal(map[string]any{"row": right, "user": k})
				var gotV, wantV any
				if len(out.recs) != 1 || json.Unmarshal(out.recs[0].Value, &gotV) != nil || json.Unmarshal(want, &wantV) != nil || !jsonEqual(gotV, wantV) {
					t.Fatalf("round %d, %s: key %q joined %d records %.200q, want %.200s", round, name, k, len(out.recs), joinRecs(out.recs), want)
				}
			}
		}
	}
}

// jsonEqual compares two decoded JSON values.
func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}
