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

// TestIngestBatchesL0Runs: L0 pieces, oldest first, are ingested in runs
// of pieces whose keys are disjoint and whose objects differ (each run
// sorted by start key); a piece overlapping one of the run, or repeating
// its object, starts the next run, so overlapping pieces keep their
// order.
func TestIngestBatchesL0Runs(t *testing.T) {
	p := func(obj string, seq uint64, start, end string, incl bool) ingestPiece {
		return ingestPiece{ef: pebble.ExternalFile{ObjName: obj, StartKey: []byte(start), EndKey: []byte(end), EndKeyIsInclusive: incl}, level: 0, seq: seq}
	}
	in := []ingestPiece{
		p("h2", 3, "m", "z", true), // the other half of the same flush as h1 (another snapshot)
		p("h1", 3, "a", "m", false),
		p("x", 4, "b", "c", true),  // overlaps h1: a new run
		p("y", 5, "n", "o", true),  // disjoint from x
		p("x", 6, "q", "r", true),  // object x again: a new run
		p("w", 7, "c", "d", true),  // overlaps x@b-c, in an older run; disjoint from x@q-r
		p("v", 8, "d", "e", false), // starts where w ends inclusive: overlap
	}
	var got [][]string
	for _, batch := range ingestBatches(in) {
		var names []string
		for _, q := range batch {
			names = append(names, q.ef.ObjName)
		}
		got = append(got, names)
	}
	want := [][]string{{"h1", "h2"}, {"x", "y"}, {"w", "x"}, {"v"}}
	if !slices.EqualFunc(got, want, slices.Equal[[]string]) {
		t.Fatalf("batches %v, want %v", got, want)
	}
}
