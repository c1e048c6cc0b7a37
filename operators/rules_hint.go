package operators

import (
	"hash/maphash"

	"github.com/kstreamd/kstreamd/state"
)

// ruleKeyHint is a subtask's in-memory record of which keys hold a rules
// summary (RulesAggState): a count per 64-bit hash of the serialized key
// (the backend's CurrentKey). A key whose hash has no count holds no
// summary, so the keyed stage skips the state read for it: most routed
// copies of a large key space start a key (the bench's rules-100: a million
// keys at about one copy each), and a point read of an absent key goes
// through the write cache and then every Pebble level, L0 table by L0
// table, to find nothing (28% of rules-100's CPU in session 39's profile).
// A key whose hash has a count may hold one (two keys can share a hash),
// and is read as before, so the hint never hides a summary as long as
// every summary written or removed while it is on goes through add and
// remove, which ruleWin does on its load/flush transitions. removeState
// (rule delete, delete_all, group_by change) keeps the hint on and updates
// it through clearKey; migrateBuckets runs with the hint off, and Open
// rebuilds the hint afterwards from the state itself, as it does after a
// restore: the hint is never checkpointed. It costs about 20 bytes of heap
// per key held; Go maps do not shrink, so after a key churn its memory
// stays at the peak until the next Open.
type ruleKeyHint struct {
	seed maphash.Seed
	n    map[uint64]uint32
}

func newRuleKeyHint() *ruleKeyHint {
	return &ruleKeyHint{seed: maphash.MakeSeed(), n: map[uint64]uint32{}}
}

func (h *ruleKeyHint) hash(key []byte) uint64 { return maphash.Bytes(h.seed, key) }

// mayHold reports whether key may hold a summary (false: it holds none).
func (h *ruleKeyHint) mayHold(key []byte) bool {
	_, ok := h.n[h.hash(key)]
	return ok
}

// add records that key now holds a summary.
func (h *ruleKeyHint) add(key []byte) { h.n[h.hash(key)]++ }

// remove records that key, which held a summary, holds none now.
func (h *ruleKeyHint) remove(key []byte) {
	k := h.hash(key)
	if c := h.n[k]; c > 1 {
		h.n[k] = c - 1
	} else {
		delete(h.n, k)
	}
}

// rebuildHint sets the keyed stage's hint from the summaries the backend
// holds (with the current key of each visit, as ruleWin reads it), and fn,
// when not nil, sees each summary on the way (Open counts the slices).
func (f *RulesEvaluator) rebuildHint(fn func(key []byte, w ruleWindow)) error {
	h := newRuleKeyHint()
	f.win.hint = nil
	err := state.ApplyToAllValueKeys(f.backend, RulesAggState, func(key []byte, s state.ValueState[ruleWindow]) error {
		w, ok, err := s.Value()
		if err != nil || !ok {
			return err
		}
		h.add(f.backend.CurrentKey())
		if fn != nil {
			fn(key, w)
		}
		return nil
	})
	if err != nil {
		return err
	}
	f.win.hint, f.win.curKey = h, f.backend.CurrentKey
	return nil
}
