package operators

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	krt "github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// TestTableJoinOutputsOwnBytes: the output values the latest join writes
// into shared blocks (selectValue) are each exactly its record's value
// after thousands more were written (several blocks), and appending to
// one does not change the next.
func TestTableJoinOutputsOwnBytes(t *testing.T) {
	for _, kind := range []string{state.KindHashmap, state.KindPebble} {
		t.Run(kind, func(t *testing.T) {
			p := TableJoinParams{Mode: TableJoinLatest, Join: TableJoinLeft, Select: compiled(t, tableJoinSelect)}
			h := newTableJoinHarness(t, kind, t.TempDir(), nil, p)
			h.send(1, user("u1", "NL", 1))
			const n = 1500
			pad := strings.Repeat("x", 40)
			var got []krt.Record
			for i := range n {
				h.send(0, clickOf(fmt.Sprintf("c%d-%s", i, pad), "u1", int64(i)))
				if i%500 == 499 {
					got = append(got, h.emitted()...)
				}
			}
			if len(got) != n {
				t.Fatalf("%d outputs, want %d", len(got), n)
			}
			for i, r := range got {
				if want := fmt.Sprintf(`{"click":"c%d-%s","country":"NL"}`, i, pad); string(r.Value) != want {
					t.Fatalf("output %d: %s, want %s", i, r.Value, want)
				}
			}
			second := string(got[1].Value)
			_ = append(got[0].Value, "garbage"...)
			if string(got[1].Value) != second {
				t.Fatalf("appending to output 0 changed output 1: %s", got[1].Value)
			}
			h.finish()
		})
	}
}

// TestTableJoinAllocs: on Pebble (the write cache keeping the row), a
// stream record joined with a row already read costs one allocation, the
// string of its JSON its Doc indexes: the row is not decoded again and
// the output value is written into a shared block. One known valid JSON
// (marked ValidJSON, as a record crossing the key_by from a json source
// is) costs none: the raw select writes its output from its bytes. A table update and
// the first stream record joined with it allocate less than 640 bytes in
// all for a small row (an expression.Doc per row took about 1 KiB).
// Counted without the race detector only (it allocates for itself).
func TestTableJoinAllocs(t *testing.T) {
	p := TableJoinParams{Mode: TableJoinLatest, Join: TableJoinLeft, Select: compiled(t, tableJoinSelect)}
	h := newTableJoinHarness(t, state.KindPebble, t.TempDir(), nil, p)
	click := krt.Record{Key: []byte("u1"), Value: []byte(`{"id":7,"note":"a click"}`)}
	h.send(1, user("u1", "NL", 1))
	h.send(0, click)
	h.emitted()
	drain := func() {
		for len(h.ch) > 0 {
			<-h.ch
		}
	}
	if n := testing.AllocsPerRun(200, func() { h.send(0, click); drain() }); n > 1 && !raceEnabled {
		t.Errorf("a stream record joined with a kept row: %v allocations, want at most 1", n)
	}
	checked := click
	checked.SetDecoded(krt.ValidJSON{})
	if n := testing.AllocsPerRun(200, func() { h.send(0, checked); drain() }); n > 0 && !raceEnabled {
		t.Errorf("a stream record of checked JSON joined with a kept row: %v allocations, want none", n)
	}
	h.send(0, checked)
	if got := h.emitted(); len(got) != 1 || string(got[0].Value) != `{"click":7,"country":"NL"}` {
		t.Fatalf("outputs %s", tableJoinLines(got))
	}
	const rows = 2000
	updates := make([]krt.Record, rows)
	for i := range updates {
		updates[i] = krt.Record{Key: []byte("u1"), Value: fmt.Appendf(nil, `{"country":"C%d"}`, i), Change: krt.ChangeUpdateAfter}
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range updates {
		h.send(1, updates[i])
		h.send(0, click)
		drain()
	}
	runtime.ReadMemStats(&after)
	per := (after.TotalAlloc - before.TotalAlloc) / rows
	t.Logf("%d bytes per table update and stream record", per)
	if per >= 640 && !raceEnabled {
		t.Errorf("a table update and a stream record joined with it: %d bytes allocated, want less than 640", per)
	}
	h.finish()
}
