package operators

import (
	"encoding/binary"
	"hash/maphash"
)

// joinRowFilter answers, for the regular join, "is this row certainly not
// in its side's MapState?" without reading the state (a Pebble Get that
// misses costs a bloom probe of every L0 table: Nexmark q4's and q20's
// bids are new rows, and that Get was ~20% of q4). It is the subtask's own
// memory, never checkpointed, and starts empty at every Open: like
// RocksDB's bloom filters (Flink's state.backend.rocksdb.use-bloom-filter)
// it may answer "maybe" for an absent row (then the join reads the state
// as before) but never "absent" for a stored one.
//
// That holds because it answers only for a key's side listed in spilled:
// a side that moved from its inline rows (joinHead) to its MapState since
// Open. When a side spills its MapState is empty (an inline side has no
// entries there), and every row the join puts into a MapState is added to
// rows first, so every row of a spilled side is in rows. A side restored
// from a checkpoint with its rows already in the MapState is not in
// spilled (its rows were never added) and keeps reading the state; a side
// that becomes empty leaves spilled (it is inline again).
//
// Its memory is bounded: past joinFilterMaxKeys spilled keys,
// joinFilterMaxKeyBytes bytes of their keys (a join key may be large: a
// Kafka key of up to a MiB) or joinFilterMaxRows rows it is dropped (off)
// and every row is read, as without it, until the next Open.
type joinRowFilter struct {
	seed maphash.Seed
	// spilled has, per join key, bit 1<<side for each side spilled since
	// Open.
	spilled  map[string]uint8
	rows     splitBlockFilter
	added    int  // rows added since Open
	keyBytes int  // the bytes of the keys in spilled
	off      bool // dropped: answers for no side
	// maxKeys, maxKeyBytes and maxRows are the bounds: joinFilterMaxKeys,
	// joinFilterMaxKeyBytes and joinFilterMaxRows but in tests.
	maxKeys, maxKeyBytes, maxRows int
}

// The bounds of a joinRowFilter: about 50 bytes of heap a spilled key
// besides its bytes, and 2 a row (some 130 MiB at all three bounds).
const (
	joinFilterMaxKeys     = 1 << 20
	joinFilterMaxKeyBytes = 1 << 25
	joinFilterMaxRows     = 1 << 24
)

// reset empties f (at Open: the state may have been restored).
func (f *joinRowFilter) reset() {
	*f = joinRowFilter{seed: maphash.MakeSeed(), spilled: map[string]uint8{},
		maxKeys: joinFilterMaxKeys, maxKeyBytes: joinFilterMaxKeyBytes, maxRows: joinFilterMaxRows}
}

// add adds row key k of side of join key key; past maxRows rows the
// filter is dropped.
func (f *joinRowFilter) add(key []byte, side int, k string) {
	if f.off {
		return
	}
	if f.added++; f.added > f.maxRows {
		f.drop()
		return
	}
	f.rows.add(f.hash(key, side, k))
}

// absent reports whether row key k of side of join key key is certainly
// not stored, given spilled, key's spilled sides (sides).
func (f *joinRowFilter) absent(spilled uint8, key []byte, side int, k string) bool {
	return !f.off && spilled&(1<<side) != 0 && !f.rows.mayContain(f.hash(key, side, k))
}

// drop turns f off until the next reset, freeing its memory.
func (f *joinRowFilter) drop() {
	*f = joinRowFilter{off: true}
}

// hash returns the filter hash of row key k of side of join key key.
func (f *joinRowFilter) hash(key []byte, side int, k string) uint64 {
	var h maphash.Hash
	h.SetSeed(f.seed)
	var n [9]byte
	binary.LittleEndian.PutUint64(n[:8], uint64(len(key)))
	n[8] = byte(side)
	_, _ = h.Write(n[:])
	_, _ = h.Write(key)
	_, _ = h.WriteString(k)
	return h.Sum64()
}

// sides returns the bits of key's spilled sides (none when off).
func (f *joinRowFilter) sides(key []byte) uint8 { return f.spilled[string(key)] }

// setSpilled records whether side of key is spilled since Open; past
// maxKeys keys or maxKeyBytes bytes of keys the filter is dropped.
func (f *joinRowFilter) setSpilled(key []byte, side int, on bool) {
	if f.off {
		return
	}
	bits := f.spilled[string(key)]
	nb := bits &^ (1 << side)
	if on {
		nb |= 1 << side
	}
	switch {
	case nb == bits:
	case nb == 0:
		delete(f.spilled, string(key))
		f.keyBytes -= len(key)
	case bits == 0 && (len(f.spilled) >= f.maxKeys || f.keyBytes+len(key) > f.maxKeyBytes):
		f.drop()
	default:
		if bits == 0 {
			f.keyBytes += len(key)
		}
		f.spilled[string(key)] = nb
	}
}

// splitBlockFilter is a growing bloom filter of 64-bit hashes: a list of
// split-block bloom filters (Apache Parquet's: 256-bit blocks of eight
// 32-bit words, one bit set in each word, so a probe touches one cache
// line), each four times the capacity of the one before; a hash is added
// to the newest and looked for in all of them. About 0.5% false positives
// per part at its capacity (16 bits a hash).
type splitBlockFilter struct {
	parts []sbfPart
}

// sbfPart is one split-block bloom filter: blocks of 8 words, and how
// many more hashes it takes before the next part starts.
type sbfPart struct {
	blocks [][8]uint32
	room   int
}

// sbfFirstCapacity is the number of hashes of a filter's first part
// (16 bits each: 128 KiB); each next part holds four times as many.
const sbfFirstCapacity = 1 << 16

// sbfSalt are the eight odd multipliers of Parquet's split-block filter.
var sbfSalt = [8]uint32{0x47b6137b, 0x44974d91, 0x8824ad5b, 0xa2b7289d, 0x705495c7, 0x2df1424b, 0x9efc4947, 0x5c6bfb31}

// sbfMask returns the bit h sets in each word of its block.
func sbfMask(h uint64) (mask [8]uint32) {
	x := uint32(h)
	for i, s := range sbfSalt {
		mask[i] = 1 << ((x * s) >> 27)
	}
	return mask
}

// sbfBlock returns the index of h's block among n.
func sbfBlock(h uint64, n int) int { return int((h >> 32) * uint64(n) >> 32) }

// add adds h.
func (f *splitBlockFilter) add(h uint64) {
	if len(f.parts) == 0 || f.parts[len(f.parts)-1].room == 0 {
		c := sbfFirstCapacity << (2 * len(f.parts))
		f.parts = append(f.parts, sbfPart{blocks: make([][8]uint32, c*16/256), room: c})
	}
	p := &f.parts[len(f.parts)-1]
	p.room--
	b := &p.blocks[sbfBlock(h, len(p.blocks))]
	m := sbfMask(h)
	for i := range b {
		b[i] |= m[i]
	}
}

// mayContain reports whether h may have been added (false: it certainly
// was not).
func (f *splitBlockFilter) mayContain(h uint64) bool {
	m := sbfMask(h)
	for pi := len(f.parts) - 1; pi >= 0; pi-- {
		p := &f.parts[pi]
		b := &p.blocks[sbfBlock(h, len(p.blocks))]
		hit := true
		for i := range b {
			if b[i]&m[i] == 0 {
				hit = false
				break
			}
		}
		if hit {
			return true
		}
	}
	return false
}
