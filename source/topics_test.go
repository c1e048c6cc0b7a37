package source

import (
	"io"
	"log/slog"
	"slices"
	"testing"
)

// TestAssignSeveralTopics checks a multi-topic subtask's assignment: of each
// topic the partitions AssignPartition gives it (and no others), a restored
// split at its offset, a partition the checkpoint knew but another subtask
// holds left alone, and a topic the checkpoint did not know read from the
// earliest offset.
func TestAssignSeveralTopics(t *testing.T) {
	const par = 3
	topics := map[string]int32{"orders-eu": 4, "orders-us": 2, "orders-new": 3}
	for sub := 0; sub < par; sub++ {
		s := New(Config{Name: "orders", TopicPartitions: topics, Subtask: sub, Parallelism: par,
			StartFrom: Latest, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err := s.assign(); err != nil {
			t.Fatal(err)
		}
		var got, want []string
		for id, off := range s.pos {
			if off != LatestOffset {
				t.Errorf("subtask %d: fresh %s at %d, want LatestOffset", sub, s.tpName(id), off)
			}
			got = append(got, s.tpName(id))
		}
		for _, tp := range []string{"orders-eu", "orders-us", "orders-new"} {
			for p := range topics[tp] {
				if AssignPartition(tp, p, par) == sub {
					want = append(want, tp+"/"+string(rune('0'+p)))
				}
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("subtask %d reads %v, want %v", sub, got, want)
		}
	}

	// A restore: orders-eu/1 at offset 7 is this subtask's; orders-us was
	// known (both partitions, the other one another subtask's);
	// orders-new is new since the checkpoint.
	s := New(Config{Name: "orders", TopicPartitions: topics, Subtask: 0, Parallelism: par, StartFrom: Latest,
		Restored: &Restored{
			Splits:      []Split{{Topic: "orders-eu", Partition: 1, Offset: 7}},
			KnownTopics: map[string][]int32{"orders-eu": {0, 1, 2, 3}, "orders-us": {0, 1}},
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := s.assign(); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for id, off := range s.pos {
		got[s.tpName(id)] = off
	}
	want := map[string]int64{"orders-eu/1": 7}
	for p := range int32(3) {
		if AssignPartition("orders-new", p, par) == 0 {
			want["orders-new/"+string(rune('0'+p))] = EarliestOffset
		}
	}
	if len(got) != len(want) {
		t.Fatalf("restored subtask 0 reads %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("restored subtask 0: %s at %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
}

// TestPartitionIDs checks that the first topic's partition ids are its
// partitions (a single-topic source keys as it always did) and that ids
// of other topics map back to their topic and partition.
func TestPartitionIDs(t *testing.T) {
	s := New(Config{Name: "in", Topic: "items", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if id := s.pid("items", 5); id != 5 {
		t.Errorf("pid(items, 5) = %d, want 5", id)
	}
	id := s.pid("rules", 3)
	if id != 1<<partitionBits|3 {
		t.Errorf("pid(rules, 3) = %d, want %d", id, 1<<partitionBits|3)
	}
	if tp, p := s.tp(id); tp != "rules" || p != 3 {
		t.Errorf("tp(%d) = %s/%d, want rules/3", id, tp, p)
	}
	if got := s.lagLabel("items", 5) + " " + s.lagLabel("rules", 3); got != "5 rules/3" {
		t.Errorf("lag labels %q, want \"5 rules/3\"", got)
	}
}

// TestMatchTopics checks that a topic pattern matches whole names, as
// Java's Pattern.matches does, and never an internal topic.
func TestMatchTopics(t *testing.T) {
	re, err := CompileTopicPattern(`orders-(eu|us)|a|ab|_.*`)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"orders-eu", "orders-us", "orders-eu-dlq", "x-orders-eu", "ab", "a", "__consumer_offsets", "_x"}
	got := MatchTopics(re, names)
	want := []string{"orders-eu", "orders-us", "ab", "a", "_x"}
	if !slices.Equal(got, want) {
		t.Errorf("MatchTopics = %v, want %v", got, want)
	}
	if _, err := CompileTopicPattern("orders-("); err == nil || err.Error() != "error parsing regexp: missing closing ): `orders-(`" {
		t.Errorf("CompileTopicPattern(orders-() error %v, want the pattern as written", err)
	}
}
