package state

import (
	"slices"

	"github.com/kstreamd/kstreamd/state/keygroup"
)

// hashmapBackend is the in-memory backend, Flink's HashMapStateBackend. It
// stores the same bytes as the Pebble backend (serialized values with their
// TTL timestamps), in Go maps per state and key group, so both behave alike.
// It is not safe for concurrent use: ConcurrentReads is false.
type hashmapBackend struct {
	*backend
	st *hashmapStore
}

// hashmapStore implements store in Go maps: per state id, per key group of
// the owned range, a map of serialized key to blob (value, list, reducing
// and aggregating states) or to a map of user key to entry (map states).
type hashmapStore struct {
	kgs    keygroup.Range
	format *formatInfo
	metas  []stateMeta
	tables map[uint32][]hmGroup // state id -> key group - kgs.Start -> data
	cur    hmCursor
}

// hmGroup is the data of one state in one key group.
type hmGroup struct {
	values map[string][]byte
	maps   map[string]map[string][]byte
}

// hmCursor is where background cleanup resumes: target index, key group and
// the keys of that (state, key group) bucket still to visit.
type hmCursor struct {
	ti, kg  int
	loaded  bool
	pending []string
}

func openHashmapStore(cfg BackendConfig) (*hashmapStore, error) {
	s := &hashmapStore{kgs: cfg.KeyGroupRange, tables: map[uint32][]hmGroup{}, cur: hmCursor{kg: cfg.KeyGroupRange.Start}}
	if cfg.RestoreDir != "" {
		if err := s.restore(cfg.RestoreDir); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// group returns the data of state id in key group kg, creating it when
// create is set; nil when absent.
func (s *hashmapStore) group(id uint32, kg int, create bool) *hmGroup {
	t, ok := s.tables[id]
	if !ok {
		if !create {
			return nil
		}
		t = make([]hmGroup, s.kgs.Len())
		s.tables[id] = t
	}
	return &t[kg-s.kgs.Start]
}

func (s *hashmapStore) loadFormat() (formatInfo, bool, error) {
	if s.format == nil {
		return formatInfo{}, false, nil
	}
	return *s.format, true, nil
}

func (s *hashmapStore) saveFormat(f formatInfo) error { s.format = &f; return nil }

func (s *hashmapStore) loadMetas() ([]stateMeta, error) {
	return append([]stateMeta(nil), s.metas...), nil
}

func (s *hashmapStore) saveMeta(m stateMeta) error { s.metas = append(s.metas, m); return nil }

func (s *hashmapStore) get(k stateKey) ([]byte, bool, error) {
	g := s.group(k.id, k.kg, false)
	if g == nil {
		return nil, false, nil
	}
	v, ok := g.values[string(k.key)]
	if !ok {
		return nil, false, nil
	}
	return append([]byte{}, v...), true, nil
}

func (s *hashmapStore) set(k stateKey, v []byte) error {
	g := s.group(k.id, k.kg, true)
	if g.values == nil {
		g.values = map[string][]byte{}
	}
	g.values[string(k.key)] = v
	return nil
}

func (s *hashmapStore) merge(k stateKey, v []byte) error {
	g := s.group(k.id, k.kg, true)
	if g.values == nil {
		g.values = map[string][]byte{}
	}
	old, ok := g.values[string(k.key)]
	if !ok {
		old = []byte{}
	}
	g.values[string(k.key)] = append(old, v...)
	return nil
}

func (s *hashmapStore) del(k stateKey) error {
	if g := s.group(k.id, k.kg, false); g != nil {
		delete(g.values, string(k.key))
	}
	return nil
}

func (s *hashmapStore) getEntry(k stateKey, uk []byte) ([]byte, bool, error) {
	g := s.group(k.id, k.kg, false)
	if g == nil {
		return nil, false, nil
	}
	v, ok := g.maps[string(k.key)][string(uk)]
	if !ok {
		return nil, false, nil
	}
	return append([]byte{}, v...), true, nil
}

// entryMap returns the map of user keys to values of k's key, creating
// it (and its group's maps) when absent.
func (s *hashmapStore) entryMap(k stateKey) map[string][]byte {
	g := s.group(k.id, k.kg, true)
	if g.maps == nil {
		g.maps = map[string]map[string][]byte{}
	}
	m, ok := g.maps[string(k.key)]
	if !ok {
		m = map[string][]byte{}
		g.maps[string(k.key)] = m
	}
	return m
}

func (s *hashmapStore) setEntry(k stateKey, uk, v []byte) error {
	m := s.entryMap(k)
	m[string(uk)] = v
	return nil
}

func (s *hashmapStore) mergeEntry(k stateKey, uk, v []byte) error {
	m := s.entryMap(k)
	old, ok := m[string(uk)]
	if !ok {
		old = []byte{}
	}
	// A snapshot may share old: append writes past its length only.
	m[string(uk)] = append(old, v...)
	return nil
}

func (s *hashmapStore) delEntry(k stateKey, uk []byte) error {
	g := s.group(k.id, k.kg, false)
	if g == nil {
		return nil
	}
	if m, ok := g.maps[string(k.key)]; ok {
		delete(m, string(uk))
		if len(m) == 0 {
			delete(g.maps, string(k.key))
		}
	}
	return nil
}

func (s *hashmapStore) scanEntries(k stateKey, fn func(uk, v []byte) (bool, error)) error {
	g := s.group(k.id, k.kg, false)
	if g == nil {
		return nil
	}
	for uk, v := range g.maps[string(k.key)] {
		more, err := fn([]byte(uk), v)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// scanRange compares every user key of the map with the bounds (no value
// is touched), then visits the ones inside in byte order: O(entries of the
// key) comparisons plus O(m log m) for the m entries in range.
func (s *hashmapStore) scanRange(k stateKey, lo, hi []byte, fn func(uk, v []byte) (bool, error)) error {
	g := s.group(k.id, k.kg, false)
	if g == nil {
		return nil
	}
	m := g.maps[string(k.key)]
	var in []string
	for uk := range m {
		if uk >= string(lo) && uk <= string(hi) {
			in = append(in, uk)
		}
	}
	slices.Sort(in)
	for _, uk := range in {
		v, ok := m[uk] // fn may have removed it
		if !ok {
			continue
		}
		more, err := fn([]byte(uk), v)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

func (s *hashmapStore) scanGroup(id uint32, kg int, fn func(key, uk, v []byte) error) error {
	g := s.group(id, kg, false)
	if g == nil {
		return nil
	}
	for key, m := range g.maps {
		for uk, v := range m {
			if err := fn([]byte(key), []byte(uk), v); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *hashmapStore) clearEntries(k stateKey) error {
	if g := s.group(k.id, k.kg, false); g != nil {
		delete(g.maps, string(k.key))
	}
	return nil
}

func (s *hashmapStore) countEntries() (int, error) {
	n := 0
	for _, t := range s.tables {
		for i := range t {
			n += len(t[i].values)
			for _, m := range t[i].maps {
				n += len(m)
			}
		}
	}
	return n, nil
}

func (s *hashmapStore) concurrentReads() bool { return false }

func (s *hashmapStore) close() error {
	s.tables = nil
	return nil
}

// cleanup implements store. The Go maps cannot resume an iteration, so on
// entering a (state, key group) bucket it takes the list of its keys and
// then visits them a budget at a time, looking each up again.
func (s *hashmapStore) cleanup(targets []cleanupTarget, kgs keygroup.Range, budget int) (int, error) {
	removed := 0
	c := &s.cur
	if c.ti >= len(targets) || !kgs.Contains(c.kg) {
		*c = hmCursor{kg: kgs.Start}
	}
	startTI, startKG := c.ti, c.kg
	for budget > 0 {
		t := targets[c.ti]
		g := s.group(t.id, c.kg, false)
		if !c.loaded {
			c.loaded, c.pending = true, c.pending[:0]
			budget--
			if g != nil {
				for k := range g.values {
					c.pending = append(c.pending, k)
				}
				for k := range g.maps {
					c.pending = append(c.pending, k)
				}
			}
		}
		for len(c.pending) > 0 && budget > 0 {
			key := c.pending[0]
			c.pending = c.pending[1:]
			n, cost, err := s.cleanKey(g, t, key)
			removed += n
			budget -= cost
			if err != nil {
				return removed, err
			}
		}
		if len(c.pending) > 0 {
			break
		}
		c.loaded = false
		if c.kg++; c.kg > kgs.End {
			c.kg = kgs.Start
			if c.ti++; c.ti >= len(targets) {
				c.ti = 0
			}
		}
		if c.ti == startTI && c.kg == startKG {
			break // a full round in one step
		}
	}
	return removed, nil
}

// cleanKey visits the blob or the map entries of one key; it returns the
// entries removed and the entries visited.
func (s *hashmapStore) cleanKey(g *hmGroup, t cleanupTarget, key string) (removed, visited int, err error) {
	if g == nil {
		return 0, 1, nil
	}
	if v, ok := g.values[key]; ok {
		repl, keep, err := t.visit(v)
		switch {
		case err != nil:
		case !keep:
			delete(g.values, key)
			removed++
		case repl != nil:
			g.values[key] = repl
		}
		return removed, 1, err
	}
	m := g.maps[key]
	for uk, v := range m {
		visited++
		_, keep, err := t.visit(v)
		if err != nil {
			return removed, visited, err
		}
		if !keep {
			delete(m, uk)
			removed++
		}
	}
	if m != nil && len(m) == 0 {
		delete(g.maps, key)
	}
	return removed, max(visited, 1), nil
}
