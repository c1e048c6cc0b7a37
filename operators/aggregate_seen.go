package operators

import (
	"hash/maphash"
	"math/bits"
	"sync/atomic"
)

// This file holds the aggregate operator's filter of the map entries it
// wrote (seenFilter): it spares the state read of a value that a key's
// map-backed aggregate (count_distinct, min or max over a changelog) has
// never held.
//
// Most reads of count_distinct's MapState are of values the key has not
// seen yet (a new bidder of a channel in Nexmark q16), and on Pebble the
// read of an absent user key costs a Get through every L0 table whose
// bloom filter does not rule it out (a third of q16's CPU). The operator
// knows more than the store: a key's maps are empty until its first
// record (its accumulators are absent; with state_ttl the maps are
// cleared then), and every entry written since goes through the
// operator. So for a key whose first record this operator instance
// processed (the key is born in the filter's generation, a mark kept in
// the key's decoded accumulators, never written to the state), a value
// the filter has never had added is absent, and no read is made.
//
// The mark is a generation number unique in the process, so it can only
// vouch for entries this filter saw: accumulators decoded from the state
// (restored, or read back after the write cache let them go) carry no mark
// and read as before, and so does every key when the filter starts over
// (seenMaxWords reached: a new generation). The filter may say "maybe"
// for a value that is absent (a hash collision, a value since removed by
// a retraction or expired by state_ttl): the read then happens, as it
// always did. Flink has no such filter (RocksDB's own bloom filters are
// its only help for absent keys).

// seenGenerations hands out filter generations, unique in the process (0
// is never one: it is the mark of accumulators decoded from the state).
var seenGenerations atomic.Uint64

const (
	// seenFirstWords is the size of the filter's first layer in 64-bit
	// words (128 KiB: about 100,000 entries at 10 bits each).
	seenFirstWords = 1 << 14
	// seenGrowth is each next layer's size over the previous one's.
	seenGrowth = 4
	// seenMaxWords bounds the words of all layers (64 MiB): a layer that
	// would pass it starts the filter over in a new generation instead.
	seenMaxWords = 8 << 20
	// seenBitsPerEntry is the bits a layer holds per entry it takes
	// before the next layer starts (about 1% false "maybe" per layer).
	seenBitsPerEntry = 10
	// seenProbes is the bits set per entry, all in one 512-bit block.
	seenProbes = 7
)

// seenFilter is a blocked bloom filter of (key, map, value) entries in
// layers growing by seenGrowth: an entry is added to the newest layer, and
// is maybe present when any layer has it. It is used on the subtask
// goroutine only.
type seenFilter struct {
	// gen is the generation keys are born in; 0 before reset.
	gen    uint64
	h      maphash.Hash
	layers [][]uint64 // each a multiple of 8 words (512-bit blocks)
	// added is the entries added to the newest layer, words all layers'.
	added, words int
}

// reset starts the filter over: empty, in a new generation.
func (s *seenFilter) reset() {
	s.gen = seenGenerations.Add(1)
	s.layers, s.added, s.words = nil, 0, 0
}

// sum returns the hash of the entry of user key v in map j of key.
func (s *seenFilter) sum(key []byte, j int, v string) uint64 {
	s.h.Reset()
	_, _ = s.h.Write(key)          // never fails
	_ = s.h.WriteByte(byte(j) + 1) // never fails
	_, _ = s.h.WriteString(v)      // never fails
	return s.h.Sum64()
}

// block returns the 512-bit block of hash x in layer l and the probes'
// bits (from a second hash, mixed from x).
func block(l []uint64, x uint64) ([]uint64, uint64) {
	hi, _ := bits.Mul64(x, uint64(len(l)/8))
	b := int(hi) * 8
	return l[b : b+8 : b+8], bits.RotateLeft64(x*0x9e3779b97f4a7c15, 31) ^ x
}

// has reports whether entry x may have been added (false: it never was).
func (s *seenFilter) has(x uint64) bool {
	for _, l := range s.layers {
		blk, p := block(l, x)
		i := 0
		for ; i < seenProbes; i++ {
			bit := p & 511
			if blk[bit>>6]&(1<<(bit&63)) == 0 {
				break
			}
			p >>= 9
		}
		if i == seenProbes {
			return true
		}
	}
	return false
}

// add adds entry x: to the newest layer, to a new one when it is full,
// or (the layers' bound reached) to a filter started over in a new
// generation, which the keys born before are not in.
func (s *seenFilter) add(x uint64) {
	if len(s.layers) == 0 || s.added >= len(s.layers[len(s.layers)-1])*64/seenBitsPerEntry {
		n := seenFirstWords
		if len(s.layers) > 0 {
			n = len(s.layers[len(s.layers)-1]) * seenGrowth
		}
		if s.words+n > seenMaxWords {
			s.reset()
			n = seenFirstWords
		}
		s.layers = append(s.layers, make([]uint64, n))
		s.added, s.words = 0, s.words+n
	}
	blk, p := block(s.layers[len(s.layers)-1], x)
	for range seenProbes {
		bit := p & 511
		blk[bit>>6] |= 1 << (bit & 63)
		p >>= 9
	}
	s.added++
}

// bornIn reports whether the map-backed aggregate specs[i] of a key whose
// accumulators are cur (found) was born in generation gen: every entry
// of its map was added to the filter since.
func bornIn(cur []aggAccumulator, i int, gen uint64) bool {
	return gen != 0 && accAt(cur, i).born == gen
}
