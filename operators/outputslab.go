package operators

import "github.com/kstreamd/kstreamd/expression"

// outputSlabBytes is the size of the blocks an outputSlab hands out.
const outputSlabBytes = 16 << 10

// outputSlab is the block a join writes its output values into (the
// interval join's joinOutput and the table join): the values of about a
// hundred records share one allocation instead of one each. Bytes up to
// len are handed out and never written again; each value is its own
// slice (capacity its length, so an append to it copies).
type outputSlab []byte

// reserve returns an empty slice of the block with room for n bytes, a
// new block when what is left of this one is short. The bytes stay free
// until commit(n).
func (s *outputSlab) reserve(n int) []byte {
	if cap(*s)-len(*s) < n {
		*s = make([]byte, 0, outputSlabBytes)
	}
	return (*s)[len(*s):len(*s)]
}

// commit hands out the next n bytes of the block (those written after
// reserve).
func (s *outputSlab) commit(n int) {
	*s = (*s)[:len(*s)+n]
}

// evalJSON evaluates p on env and returns its result's JSON, as
// selectJSON does, written into the block. A result that does not fit what
// is left of the block gets its own allocation from EvalJSON.
func (s *outputSlab) evalJSON(p *expression.Program, env *expression.Env) ([]byte, error) {
	free := s.reserve(selectJSONHint)
	b, _, _, err := p.EvalJSON(free, env)
	if err != nil {
		return nil, err
	}
	if len(b) > 0 && cap(b) == cap(free) && &b[:1][0] == &free[:1][0] {
		s.commit(len(b))
		return b[:len(b):len(b)], nil
	}
	return b, nil
}
