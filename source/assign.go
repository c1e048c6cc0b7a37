package source

// AssignPartition returns the source subtask, in [0, parallelism), that
// reads partition of topic. It is Flink's KafkaSourceEnumerator.getSplitOwner:
// the start index ((javaHash(topic) * 31) & 0x7FFFFFFF) % parallelism spreads
// the partitions of several topics over different subtasks, then partitions
// go round-robin from there.
func AssignPartition(topic string, partition int32, parallelism int) int {
	start := int((javaStringHash(topic)*31)&0x7FFFFFFF) % parallelism
	return (start + int(partition)) % parallelism
}

// javaStringHash is Java's String.hashCode over the UTF-16 code units of s.
func javaStringHash(s string) int32 {
	var h int32
	for _, r := range s {
		if r >= 0x10000 {
			r -= 0x10000
			h = 31*h + int32(0xD800+(r>>10))
			h = 31*h + int32(0xDC00+(r&0x3FF))
			continue
		}
		h = 31*h + int32(r)
	}
	return h
}

// PartitionsFor returns the partitions, ascending, that subtask reads of a
// topic with partitions 0..numPartitions-1.
func PartitionsFor(topic string, numPartitions int32, subtask, parallelism int) []int32 {
	var out []int32
	for p := int32(0); p < numPartitions; p++ {
		if AssignPartition(topic, p, parallelism) == subtask {
			out = append(out, p)
		}
	}
	return out
}
