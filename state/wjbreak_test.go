package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"testing"
)

// idRows is a value kept by identity: idRowsSerializer's Copy and View
// return the object itself, so the write cache keeps the caller's object
// and the caller changes it in place between a Value and the Update of
// its key, as interval_join's intervalKeyRows does.
type idRows struct{ vals []int64 }

type idRowsSerializer struct{}

func (idRowsSerializer) Name() string { return "test-id-rows" }

func (idRowsSerializer) Append(dst []byte, v *idRows) ([]byte, error) {
	if v == nil {
		return dst, nil
	}
	for _, x := range v.vals {
		dst = binary.BigEndian.AppendUint64(dst, uint64(x))
	}
	return dst, nil
}

func (idRowsSerializer) Decode(b []byte) (*idRows, error) {
	if len(b)%8 != 0 {
		return nil, errors.New("test-id-rows: bad length")
	}
	v := &idRows{}
	for ; len(b) > 0; b = b[8:] {
		v.vals = append(v.vals, int64(binary.BigEndian.Uint64(b)))
	}
	return v, nil
}

func (idRowsSerializer) Copy(v *idRows, _ []*idRows) (*idRows, error) { return v, nil }

func (s idRowsSerializer) AppendKept(dst []byte, v *idRows) ([]byte, error) { return s.Append(dst, v) }

func (idRowsSerializer) View(v *idRows) *idRows { return v }

func (idRowsSerializer) Size(v *idRows) int {
	if v == nil {
		return 0
	}
	return 24 + 8*len(v.vals)
}

// TestHeapIdentityObjectChangedInPlace attacks the combination of a
// HeapSerializer that hands the object itself to the cache (Copy and View
// return it) with the cache's in-place writes and read-to-write hints: a
// hot key's object is read, the cache then evicts it (serialized and
// dropped: other keys written by another state, a 1 KiB cache) or flushes
// it (a scan), the caller changes the object it holds and writes it back.
// No change may be lost, no other key may see it, and the bound handles,
// the handle read exactly the model, also after a reopen of the backend
// (local Pebble), on local and disaggregated Pebble.
func TestHeapIdentityObjectChangedInPlace(t *testing.T) {
	for _, run := range []struct {
		kind       string
		cacheBytes int
	}{{KindPebble, 0}, {KindPebble, 1 << 10}, {kindPebbleRemote, 1 << 10}} {
		cacheBytes := run.cacheBytes
		t.Run(fmt.Sprintf("%s/cache=%d", run.kind, cacheBytes), func(t *testing.T) {
			cfg := testConfig(t, run.kind)
			cfg.WriteCacheBytes = cacheBytes
			b := open(t, cfg)
			desc := ValueStateDescriptor[*idRows]{Name: "rows", Serializer: idRowsSerializer{}}
			s := must1(GetValueState(b, desc))(t)
			filler := must1(GetValueState(b, ValueStateDescriptor[int64]{Name: "filler", Serializer: Int64Serializer{}}))(t)
			want := map[string][]int64{}
			step := 0
			for i := range 300 {
				key := "hot"
				if i%3 == 2 {
					key = fmt.Sprintf("k%d", i%7)
				}
				b.SetCurrentKey([]byte(key))
				v, ok, err := s.Value()
				must(t, err)
				if ok != (want[key] != nil) {
					t.Fatalf("step %d: Value(%s) found %v, want %v", i, key, ok, want[key] != nil)
				}
				if !ok {
					v = &idRows{}
				}
				switch i % 4 {
				case 0: // evictions between the read and the write
					for f := range 20 {
						b.SetCurrentKey(fmt.Appendf(nil, "filler-%d-%d", i, f))
						must(t, filler.Update(int64(f)))
					}
				case 1: // a scan flushes the cache between the read and the write
					must(t, ApplyToAllValueKeys(b, ValueStateDescriptor[int64]{Name: "filler", Serializer: Int64Serializer{}}, func([]byte, ValueState[int64]) error { return nil }))
				}
				step++
				v.vals = append(v.vals, int64(step))
				if len(v.vals) > 12 { // a cleanup in place
					v.vals = append(v.vals[:0], v.vals[6:]...)
				}
				b.SetCurrentKey([]byte(key))
				if i%50 == 49 {
					must(t, s.Clear())
					delete(want, key)
					continue
				}
				must(t, s.Update(v))
				want[key] = append([]int64(nil), v.vals...)
			}
			check := func(when string, b KeyedStateBackend) {
				t.Helper()
				got := map[string][]int64{}
				must(t, ApplyToAllValueKeys(b, desc, func(key []byte, st ValueState[*idRows]) error {
					v, ok, err := st.Value()
					if err != nil || !ok {
						return fmt.Errorf("bound Value(%s) = %v %v", key, ok, err)
					}
					got[string(key)] = v.vals
					return nil
				}))
				if !maps.EqualFunc(got, want, func(a, b []int64) bool { return fmt.Sprint(a) == fmt.Sprint(b) }) {
					t.Fatalf("%s: the state holds %v, want %v", when, got, want)
				}
				s := must1(GetValueState(b, desc))(t)
				for key, w := range want {
					b.SetCurrentKey([]byte(key))
					v, ok, err := s.Value()
					must(t, err)
					if !ok || fmt.Sprint(v.vals) != fmt.Sprint(w) {
						t.Fatalf("%s: Value(%s) = %v %v, want %v", when, key, v, ok, w)
					}
				}
			}
			if len(want) != 7 || len(want["hot"]) == 0 {
				t.Fatalf("the model holds %d keys (hot %v), want 7 and the hot key", len(want), want["hot"])
			}
			if c := b.core().st.(*pebbleStore).cache; cacheBytes != 0 && c.gen < 50 {
				t.Fatalf("the cache evicted %d times, want the evictions the test is about (50 or more)", c.gen)
			}
			check("after the writes", b)
			if run.kind == KindPebble { // a disaggregated backend opens a new instance: it restores from checkpoints
				must(t, b.Close())
				check("after a reopen", open(t, cfg))
			}
		})
	}
}
