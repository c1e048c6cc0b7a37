package state

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// rmwKeys is the number of distinct keys BenchmarkValueReadModifyWrite
// addresses: a keyed operator's working set that the write cache holds.
const rmwKeys = 10_000

// benchSides is a decoded value of two lists, the shape of the interval
// join's per-key rows (48 bytes: two slice headers).
type benchSides [2][]int64

// benchSidesSerializer is a HeapSerializer of benchSides: each side a
// uvarint count and its items as 8-byte big-endian. Copy keeps v as it
// is (the benchmark never modifies a value it wrote).
type benchSidesSerializer struct{}

func (benchSidesSerializer) Name() string { return "bench-sides" }

func (benchSidesSerializer) Append(dst []byte, v benchSides) ([]byte, error) {
	for _, side := range v {
		dst = binary.AppendUvarint(dst, uint64(len(side)))
		for _, x := range side {
			dst = binary.BigEndian.AppendUint64(dst, uint64(x))
		}
	}
	return dst, nil
}

func (benchSidesSerializer) Decode(b []byte) (benchSides, error) {
	var v benchSides
	for i := range v {
		n, w := binary.Uvarint(b)
		if w <= 0 || uint64(len(b)-w) < 8*n {
			return v, errors.New("bench-sides: short")
		}
		b = b[w:]
		for range n {
			v[i] = append(v[i], int64(binary.BigEndian.Uint64(b)))
			b = b[8:]
		}
	}
	return v, nil
}

func (benchSidesSerializer) Copy(v benchSides, _ []benchSides) (benchSides, error) { return v, nil }

func (s benchSidesSerializer) AppendKept(dst []byte, v benchSides) ([]byte, error) {
	return s.Append(dst, v)
}

func (benchSidesSerializer) View(v benchSides) benchSides { return v }

func (benchSidesSerializer) Size(v benchSides) int { return 48 + 8*(len(v[0])+len(v[1])) }

// BenchmarkValueReadModifyWrite measures a keyed operator's per-record
// state access on Pebble with the write cache: SetCurrentKey of a random
// key among 10,000, then Value and Update of that key's value (every key
// cached: the steady state of a working set that fits the cache).
// "serialized" is a ValueState[int64] (KeyedCount), "map" a Get and Put
// of one of 4 user keys of a MapState[int64, int64] (a distinct count's
// map), "heap" a value of two lists kept decoded (HeapSerializer: the
// interval join's rows). cpu-ns/op is the process's CPU time per
// operation (compare it under load, not ns/op).
func BenchmarkValueReadModifyWrite(b *testing.B) {
	keys := make([][]byte, rmwKeys)
	for i := range keys {
		keys[i] = u64key(uint64(i) * 0x9E3779B97F4A7C15)
	}
	b.Run("serialized", func(b *testing.B) {
		be := open(b, testConfig(b, KindPebble))
		v := must1(GetValueState(be, ValueStateDescriptor[int64]{Name: "count", Serializer: Int64Serializer{}}))(b)
		rng := rand.New(rand.NewPCG(1, 2))
		for _, k := range keys {
			be.SetCurrentKey(k)
			must(b, v.Update(1))
		}
		b.ReportAllocs()
		cpu := testkit.CPUTime(b)
		for b.Loop() {
			be.SetCurrentKey(keys[rng.IntN(rmwKeys)])
			n, ok, err := v.Value()
			if err != nil || !ok {
				b.Fatal(ok, err)
			}
			if err := v.Update(n + 1); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(testkit.CPUTime(b)-cpu)/float64(b.N), "cpu-ns/op")
	})
	b.Run("map", func(b *testing.B) {
		be := open(b, testConfig(b, KindPebble))
		m := must1(GetMapState(be, MapStateDescriptor[int64, int64]{Name: "counts", KeySerializer: Int64Serializer{}, ValueSerializer: Int64Serializer{}}))(b)
		rng := rand.New(rand.NewPCG(1, 2))
		for _, k := range keys {
			be.SetCurrentKey(k)
			for uk := range int64(4) {
				must(b, m.Put(uk, 1))
			}
		}
		b.ReportAllocs()
		cpu := testkit.CPUTime(b)
		for b.Loop() {
			r := rng.IntN(4 * rmwKeys)
			be.SetCurrentKey(keys[r/4])
			n, ok, err := m.Get(int64(r % 4))
			if err != nil || !ok {
				b.Fatal(ok, err)
			}
			if err := m.Put(int64(r%4), n+1); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(testkit.CPUTime(b)-cpu)/float64(b.N), "cpu-ns/op")
	})
	b.Run("heap", func(b *testing.B) {
		be := open(b, testConfig(b, KindPebble))
		v := must1(GetValueState(be, ValueStateDescriptor[benchSides]{Name: "sides", Serializer: benchSidesSerializer{}}))(b)
		rng := rand.New(rand.NewPCG(1, 2))
		for i, k := range keys {
			be.SetCurrentKey(k)
			must(b, v.Update(benchSides{{int64(i)}, {int64(i), 1}}))
		}
		b.ReportAllocs()
		cpu := testkit.CPUTime(b)
		for b.Loop() {
			be.SetCurrentKey(keys[rng.IntN(rmwKeys)])
			s, ok, err := v.Value()
			if err != nil || !ok {
				b.Fatal(ok, err)
			}
			if err := v.Update(benchSides{s[1], s[0]}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(testkit.CPUTime(b)-cpu)/float64(b.N), "cpu-ns/op")
	})
}
