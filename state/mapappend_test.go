package state

import (
	"slices"
	"testing"
	"time"
)

// concatBytes is a ConcatSerializer of byte lists: each element one byte.
type concatBytes struct{}

func (concatBytes) Name() string                                { return "test-concat-bytes" }
func (concatBytes) Append(dst []byte, v []byte) ([]byte, error) { return append(dst, v...), nil }
func (concatBytes) Decode(b []byte) ([]byte, error)             { return append([]byte(nil), b...), nil }
func (concatBytes) Concatenates()                               {}

// TestMapAppendValue: AppendValue adds elements after those stored under
// a user key without reading them, on every backend: appends interleaved
// over keys and user keys, a Put then appends, a Remove then appends, and
// many appends (on Pebble merge operands, read newest first) read back in
// order, also after a checkpoint and restore and more appends; TTL and a
// serializer that does not concatenate are refused.
func TestMapAppendValue(t *testing.T) {
	for _, kind := range conformanceKinds {
		t.Run(kind, func(t *testing.T) {
			cfg := testConfig(t, kind)
			b := open(t, cfg)
			d := MapStateDescriptor[int64, []byte]{Name: "rows", KeySerializer: Int64Serializer{}, ValueSerializer: concatBytes{}}
			s := must1(GetMapState(b, d))(t)
			app := s.(MapAppender[int64, []byte])
			want := map[string]map[int64][]byte{}
			add := func(s MapAppender[int64, []byte], k string, uk int64, v ...byte) {
				t.Helper()
				b.SetCurrentKey([]byte(k))
				must(t, s.AppendValue(uk, v))
				if want[k] == nil {
					want[k] = map[int64][]byte{}
				}
				want[k][uk] = append(want[k][uk], v...)
			}
			check := func(s MapState[int64, []byte], when string) {
				t.Helper()
				for k, m := range want {
					b.SetCurrentKey([]byte(k))
					for uk, w := range m {
						got, ok, err := s.Get(uk)
						must(t, err)
						if !ok || !slices.Equal(got, w) {
							t.Fatalf("%s: %s/%d = %v (%v), want %v", when, k, uk, got, ok, w)
						}
					}
				}
			}
			for i := range 300 {
				add(app, keys3[i%3], int64(i%2), byte(i), byte(i>>8))
			}
			b.SetCurrentKey([]byte("alice"))
			must(t, s.Put(7, []byte{1, 2}))
			want["alice"][7] = []byte{1, 2}
			add(app, "alice", 7, 3)
			b.SetCurrentKey([]byte("bob"))
			must(t, s.Remove(0))
			delete(want["bob"], 0)
			check(s, "before the restore")
			add(app, "bob", 0, 9)
			check(s, "appended after a remove")

			nb, err := reopen(t, b, cfg, nil)
			must(t, err)
			b = nb
			s = must1(GetMapState(nb, d))(t)
			check(s, "restored")
			for i := range 50 {
				add(s.(MapAppender[int64, []byte]), keys3[i%3], 1, byte(100+i))
			}
			check(s, "appended after the restore")

			ttl := must1(GetMapState(b, MapStateDescriptor[int64, []byte]{Name: "ttl", KeySerializer: Int64Serializer{}, ValueSerializer: concatBytes{},
				TTL: &StateTtlConfig{TTL: time.Hour}}))(t)
			if err := ttl.(MapAppender[int64, []byte]).AppendValue(1, []byte{1}); err == nil {
				t.Fatal("AppendValue with TTL: no error")
			}
			plain := must1(GetMapState(b, MapStateDescriptor[int64, []byte]{Name: "plain", KeySerializer: Int64Serializer{}, ValueSerializer: BytesSerializer{}}))(t)
			if err := plain.(MapAppender[int64, []byte]).AppendValue(1, []byte{1}); err == nil {
				t.Fatal("AppendValue with a serializer that does not concatenate: no error")
			}
		})
	}
}

// TestAppendMergerOrder: the Pebble list merger puts operands in write
// order whichever way they are met (newer, then older ones).
func TestAppendMergerOrder(t *testing.T) {
	m := must1(listMerger.Merge(nil, []byte("c")))(t)
	for _, step := range []struct {
		older bool
		v     string
	}{{false, "d"}, {true, "b"}, {false, "e"}, {true, "a"}} {
		var err error
		if step.older {
			err = m.MergeOlder([]byte(step.v))
		} else {
			err = m.MergeNewer([]byte(step.v))
		}
		must(t, err)
	}
	got, _, err := m.Finish(true)
	must(t, err)
	if string(got) != "abcde" {
		t.Fatalf("merged %q, want abcde", got)
	}
}

// TestMapAppendHintedAbsent: on every backend, appends after HintAbsent
// read back exactly, as do appends to an entry the write cache holds
// (read, put or flushed), to a removed entry, and to one the cache does
// not hold, also after a checkpoint and restore; a hint of a cached entry
// changes nothing. On Pebble, a hinted entry appended to, read and removed
// between two flushes writes nothing to Pebble (on 1d273b1 each append
// was a Pebble merge and the read a Pebble get).
func TestMapAppendHintedAbsent(t *testing.T) {
	for _, kind := range conformanceKinds {
		t.Run(kind, func(t *testing.T) {
			cfg := testConfig(t, kind)
			b := open(t, cfg)
			d := MapStateDescriptor[int64, []byte]{Name: "rows", KeySerializer: Int64Serializer{}, ValueSerializer: concatBytes{}}
			s := must1(GetMapState(b, d))(t)
			app := s.(MapAppender[int64, []byte])
			hint := s.(MapAbsentHinter[int64])
			ps, _ := b.core().st.(*pebbleStore)
			flush := func() {
				t.Helper()
				if ps != nil {
					must(t, ps.flushCache())
				}
			}
			walIn := func() uint64 {
				if ps == nil || kind != KindPebble {
					return 0
				}
				return ps.db.Metrics().WAL.BytesIn
			}
			get := func(s MapState[int64, []byte], k string, uk int64, want []byte) {
				t.Helper()
				b.SetCurrentKey([]byte(k))
				got, ok, err := s.Get(uk)
				must(t, err)
				if ok != (want != nil) || !slices.Equal(got, want) {
					t.Fatalf("%s/%d = %v (%v), want %v", k, uk, got, ok, want)
				}
			}
			flush()
			base := walIn()
			b.SetCurrentKey([]byte("alice"))
			must(t, hint.HintAbsent(1))
			must(t, app.AppendValue(1, []byte{1}))
			must(t, app.AppendValue(1, []byte{2, 3}))
			get(s, "alice", 1, []byte{1, 2, 3})
			must(t, s.Remove(1))
			get(s, "alice", 1, nil)
			flush()
			if got := walIn(); got != base {
				t.Errorf("a hinted entry appended, read and removed between two flushes wrote %d WAL bytes, want none", got-base)
			}

			b.SetCurrentKey([]byte("bob"))
			must(t, hint.HintAbsent(1))
			must(t, app.AppendValue(1, []byte{4}))
			flush() // now Pebble holds it: appends after are whole values
			must(t, app.AppendValue(1, []byte{5}))
			must(t, hint.HintAbsent(1)) // cached: no change
			must(t, app.AppendValue(1, []byte{6}))
			get(s, "bob", 1, []byte{4, 5, 6})
			b.SetCurrentKey([]byte("bob"))
			must(t, s.Put(2, []byte{7}))
			must(t, app.AppendValue(2, []byte{8}))
			must(t, s.Remove(2))
			must(t, app.AppendValue(2, []byte{9})) // after a cached delete
			b.SetCurrentKey([]byte("carol"))
			must(t, app.AppendValue(3, []byte{10})) // not cached: a merge
			must(t, app.AppendValue(3, []byte{11}))
			get(s, "carol", 3, []byte{10, 11})
			b.SetCurrentKey([]byte("carol"))
			must(t, app.AppendValue(3, []byte{12})) // read, so cached: appended there
			check := func(s MapState[int64, []byte]) {
				t.Helper()
				get(s, "alice", 1, nil)
				get(s, "bob", 1, []byte{4, 5, 6})
				get(s, "bob", 2, []byte{9})
				get(s, "carol", 3, []byte{10, 11, 12})
			}
			check(s)
			nb, err := reopen(t, b, cfg, nil)
			must(t, err)
			b = nb
			s = must1(GetMapState(nb, d))(t)
			check(s) // restored
		})
	}
}
