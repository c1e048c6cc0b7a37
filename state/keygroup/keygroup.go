// Package keygroup is the pure key-group arithmetic of kstreamd: how a key is
// hashed to a key group, how key groups are split into contiguous ranges, and
// which subtask owns a key group. It is the one leaf package every layer may
// import.
//
// The arithmetic follows Apache Flink's KeyGroupRangeAssignment, with one
// difference: the hash is xxhash64 over the serialized key bytes (Flink uses
// murmur over Java's hashCode). The hash is part of the checkpoint format and
// must never change: a key written to key group g by one version must be
// found in key group g by every later version.
package keygroup

import (
	"fmt"

	"github.com/cespare/xxhash/v2"
)

// UpperBoundMaxParallelism is the largest max parallelism kstreamd accepts
// (Flink's KeyGroupRangeAssignment.UPPER_BOUND_MAX_PARALLELISM is 32768 too).
const UpperBoundMaxParallelism = 1 << 15

// DefaultLowerBoundMaxParallelism is the smallest max parallelism
// DefaultMaxParallelism derives (Flink's DEFAULT_LOWER_BOUND_MAX_PARALLELISM).
const DefaultLowerBoundMaxParallelism = 128

// Hash returns the 64-bit hash of the serialized key: xxhash64, seed 0.
// Fixed forever: it decides key groups, which are part of the checkpoint format.
func Hash(key []byte) uint64 { return xxhash.Sum64(key) }

// Assign returns the key group of a serialized key, in [0, maxParallelism).
// maxParallelism must be in [1, UpperBoundMaxParallelism]; Assign panics on
// a non-positive value, as that is a programming error caught by validation.
func Assign(key []byte, maxParallelism int) int {
	return int(Hash(key) % uint64(maxParallelism))
}

// DefaultMaxParallelism derives the max parallelism for an operator of
// parallelism p as Flink does: min(max(roundUpToPowerOfTwo(p + p/2), 128), 32768).
func DefaultMaxParallelism(p int) int {
	n := roundUpPowerOfTwo(p + p/2)
	if n < DefaultLowerBoundMaxParallelism {
		n = DefaultLowerBoundMaxParallelism
	}
	if n > UpperBoundMaxParallelism {
		n = UpperBoundMaxParallelism
	}
	return n
}

func roundUpPowerOfTwo(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

// OperatorIndex returns the subtask, in [0, parallelism), that owns key group
// kg: kg * parallelism / maxParallelism (Flink's
// computeOperatorIndexForKeyGroup). 0 <= kg < maxParallelism.
func OperatorIndex(kg, maxParallelism, parallelism int) int {
	return kg * parallelism / maxParallelism
}

// SubtaskForKey returns the subtask, in [0, parallelism), that owns the
// serialized key.
func SubtaskForKey(key []byte, maxParallelism, parallelism int) int {
	return OperatorIndex(Assign(key, maxParallelism), maxParallelism, parallelism)
}

// Range is a contiguous, inclusive range of key groups [Start, End]. An empty
// range has End < Start.
type Range struct {
	Start int // first key group, inclusive
	End   int // last key group, inclusive
}

// RangeFor returns the key groups subtask i of parallelism p owns when the
// max parallelism is maxP: [ceil(i*maxP/p), ceil((i+1)*maxP/p) - 1] (Flink's
// computeKeyGroupRangeForOperatorIndex). It is the exact inverse of
// OperatorIndex: OperatorIndex(kg, maxP, p) == i for every kg in the range.
func RangeFor(maxP, p, i int) Range {
	start := (i*maxP + p - 1) / p
	end := ((i+1)*maxP+p-1)/p - 1
	return Range{Start: start, End: end}
}

// Contains reports whether kg is in the range.
func (r Range) Contains(kg int) bool { return kg >= r.Start && kg <= r.End }

// Len returns the number of key groups in the range; 0 for an empty range.
func (r Range) Len() int {
	if r.End < r.Start {
		return 0
	}
	return r.End - r.Start + 1
}

// Intersect returns the key groups both ranges hold; the result is empty
// (Len() == 0) when they do not overlap.
func (r Range) Intersect(o Range) Range {
	return Range{Start: max(r.Start, o.Start), End: min(r.End, o.End)}
}

// String formats the range as "[start, end]".
func (r Range) String() string { return fmt.Sprintf("[%d, %d]", r.Start, r.End) }

// ValidateMaxParallelism returns an error unless 1 <= maxP <= 32768 and
// maxP >= parallelism.
func ValidateMaxParallelism(maxP, parallelism int) error {
	if maxP < 1 || maxP > UpperBoundMaxParallelism {
		return fmt.Errorf("keygroup: max parallelism %d outside [1, %d]", maxP, UpperBoundMaxParallelism)
	}
	if parallelism > maxP {
		return fmt.Errorf("keygroup: parallelism %d exceeds max parallelism %d", parallelism, maxP)
	}
	return nil
}
