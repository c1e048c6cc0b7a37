package operators

import "hash/maphash"

// aggKeyHint is an Aggregate subtask's in-memory record of the keys whose
// accumulators it wrote since Open, by 64-bit hash, when the subtask began
// without restored aggregate state (state.HasState false at Open): then a
// key whose hash it never added holds no accumulators, and its first
// record (or, with mini_batch, its first of a batch) skips the state read,
// which for an absent key goes through the write cache and then every
// Pebble level to find nothing (the largest part of Nexmark q17's state
// reads: most of its auction-and-day keys are new). A key whose hash was
// added may hold accumulators (two keys can share a hash, a Clear or TTL
// may have removed them) and is read as before, so the hint never hides a
// row. After a restore the hint is off (every key is read), as it is
// never checkpointed. It costs about 20 bytes of heap per key written, up
// to max keys (aggHintMaxKeys, about 40 MiB): the key that would pass it
// turns the hint off for good (its memory is dropped, every key is read
// as without it), so a job whose keys grow without bound (a key per
// auction and day, with state_ttl) does not grow the heap with them.
type aggKeyHint struct {
	on   bool
	seed maphash.Seed
	keys map[uint64]struct{}
	max  int // aggHintMaxKeys but in tests
}

// aggHintMaxKeys bounds aggKeyHint: 2^21 keys, as dedupHintMaxKeys.
const aggHintMaxKeys = 1 << 21

// reset starts the hint empty, on when the subtask has no restored state.
func (h *aggKeyHint) reset(on bool) {
	*h = aggKeyHint{on: on, max: aggHintMaxKeys}
	if on {
		h.seed, h.keys = maphash.MakeSeed(), map[uint64]struct{}{}
	}
}

// absent reports whether key surely holds no accumulators.
func (h *aggKeyHint) absent(key []byte) bool {
	if !h.on {
		return false
	}
	_, ok := h.keys[maphash.Bytes(h.seed, key)]
	return !ok
}

// add records that key's accumulators were written; at the hint's bound
// it turns the hint off instead (every key read from then on).
func (h *aggKeyHint) add(key []byte) {
	if !h.on {
		return
	}
	if len(h.keys) >= h.max {
		h.on, h.keys = false, nil
		return
	}
	h.keys[maphash.Bytes(h.seed, key)] = struct{}{}
}
