package source

import "testing"

func TestJavaStringHash(t *testing.T) {
	// Values of Java's "...".hashCode().
	for s, want := range map[string]int32{"": 0, "a": 97, "items": 100526016, "hello world": 1794106052} {
		if got := javaStringHash(s); got != want {
			t.Errorf("javaStringHash(%q) = %d, want %d", s, got, want)
		}
	}
}

func TestPartitionsForCoversEachPartitionOnce(t *testing.T) {
	for p := 1; p <= 5; p++ {
		seen := map[int32]int{}
		for i := 0; i < p; i++ {
			for _, part := range PartitionsFor("items", 8, i, p) {
				seen[part]++
			}
		}
		for part := int32(0); part < 8; part++ {
			if seen[part] != 1 {
				t.Fatalf("parallelism %d: partition %d read by %d subtasks", p, part, seen[part])
			}
		}
	}
	// Flink's rule: the start index is ((hash*31) & 0x7FFFFFFF) % p, then round-robin.
	start := int((javaStringHash("items")*31)&0x7FFFFFFF) % 3
	if got := AssignPartition("items", 0, 3); got != start {
		t.Fatalf("partition 0 to subtask %d, want %d", got, start)
	}
	if got := AssignPartition("items", 1, 3); got != (start+1)%3 {
		t.Fatalf("partition 1 to subtask %d, want %d", got, (start+1)%3)
	}
}
