package state

import (
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// TestIngestBatches: a restore's pieces are ingested deepest level first,
// each level above L0 in one ingestion sorted by start key, split where
// two pieces overlap or share an object; L0 pieces one by one, oldest
// first.
func TestIngestBatches(t *testing.T) {
	p := func(obj string, level int, seq uint64, start, end string, incl bool) ingestPiece {
		return ingestPiece{ef: pebble.ExternalFile{ObjName: obj, StartKey: []byte(start), EndKey: []byte(end), EndKeyIsInclusive: incl}, level: level, seq: seq}
	}
	in := []ingestPiece{
		p("a", 0, 9, "a", "z", true),
		p("b", 6, 1, "m", "p", false),
		p("c", 6, 2, "a", "f", true),
		p("d", 0, 5, "c", "d", true),
		p("e", 5, 3, "a", "c", true),
		p("f", 5, 4, "c", "e", false), // starts where e ends inclusive: overlap
		p("g", 6, 1, "f", "g", false), // starts where c ends inclusive: overlap
		p("b", 6, 1, "x", "y", true),  // object b again
	}
	var got [][]string
	for _, batch := range ingestBatches(in) {
		var names []string
		for _, q := range batch {
			names = append(names, q.ef.ObjName)
		}
		got = append(got, names)
	}
	want := [][]string{{"c"}, {"g", "b"}, {"b"}, {"e"}, {"f"}, {"d"}, {"a"}}
	if !slices.EqualFunc(got, want, slices.Equal[[]string]) {
		t.Fatalf("batches %v, want %v", got, want)
	}
}
