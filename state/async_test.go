package state

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/state/keygroup"
)

const testMaxParallelism = 128

// openTestBackend opens a backend of kind owning every key group, closed at
// cleanup. A non-nil readDelay is slept, on the reading goroutine, before
// every store read (the "backend wrapper that delays reads"): it wraps the
// store, so it must be given before any state is obtained.
func openTestBackend(t testing.TB, kind string, readDelay func() time.Duration) KeyedStateBackend {
	t.Helper()
	cfg := BackendConfig{Kind: kind, MaxParallelism: testMaxParallelism, KeyGroupRange: keygroup.Range{Start: 0, End: testMaxParallelism - 1}}
	if kind == KindPebble {
		cfg.Dir = t.TempDir()
	}
	b, err := OpenBackend(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	if readDelay != nil {
		core := b.core()
		core.st = &delayStore{store: core.st, delay: readDelay}
	}
	return b
}

// openBlockingBackend is openTestBackend of a Pebble backend whose reads
// block their OS thread for readDelay (blockFor), as a read from a slow disk
// blocks in pread: precise to a few µs, where time.Sleep of an otherwise
// idle process waits at least about 1 ms (the runtime's poller sleeps in
// whole milliseconds), which would slow the synchronous side ten-fold at
// 100µs.
func openBlockingBackend(t testing.TB, readDelay time.Duration) KeyedStateBackend {
	b := openTestBackend(t, KindPebble, func() time.Duration { return readDelay })
	b.core().st.(*delayStore).block = true
	return b
}

// delayStore delays every read of the store it wraps by delay(); writes pass
// through. Safe for concurrent use when the wrapped store's reads are.
type delayStore struct {
	store
	delay func() time.Duration
	block bool // wait with blockFor instead of time.Sleep
}

// wait is the injected read latency, not synchronisation.
func (s *delayStore) wait() {
	if s.block {
		blockFor(s.delay())
		return
	}
	time.Sleep(s.delay())
}

func (s *delayStore) get(k stateKey) ([]byte, bool, error) {
	s.wait()
	return s.store.get(k)
}

func (s *delayStore) getEntry(k stateKey, uk []byte) ([]byte, bool, error) {
	s.wait()
	return s.store.getEntry(k, uk)
}

func (s *delayStore) scanEntries(k stateKey, fn func(uk, v []byte) (bool, error)) error {
	s.wait()
	return s.store.scanEntries(k, fn)
}

var seqsDesc = ValueStateDescriptor[[]int]{Name: "seqs", Serializer: JSONSerializer[[]int]{}}

// orderingInput returns the keys of n records over nkeys keys, drawn at
// random with a fixed seed.
func orderingInput(n, nkeys int) [][]byte {
	rng := rand.New(rand.NewPCG(7, 11))
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "key-%03d", rng.IntN(nkeys))
	}
	return keys
}

// runSyncOrdering is the reference: each record appends its sequence number
// to its key's ValueState through the synchronous API.
func runSyncOrdering(t *testing.T, kind string, keys [][]byte) map[string][]int {
	b := openTestBackend(t, kind, nil)
	s, err := GetValueState(b, seqsDesc)
	if err != nil {
		t.Fatal(err)
	}
	for seq, k := range keys {
		b.SetCurrentKey(k)
		v, _, err := s.Value()
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Update(append(v, seq)); err != nil {
			t.Fatal(err)
		}
	}
	return readAll(t, b, s, keys)
}

func readAll(t *testing.T, b KeyedStateBackend, s ValueState[[]int], keys [][]byte) map[string][]int {
	t.Helper()
	out := map[string][]int{}
	for _, k := range keys {
		if _, done := out[string(k)]; done {
			continue
		}
		b.SetCurrentKey(k)
		v, _, err := s.Value()
		if err != nil {
			t.Fatal(err)
		}
		out[string(k)] = v
	}
	return out
}

// TestAsyncOrdering is the async ordering acceptance test: 10,000 records
// over 100 keys, each a read-modify-write of its key's ValueState, with every
// read of the pebble store delayed by a random 0-5 ms. Per key, user code
// sees the records in arrival order and the final values equal the
// synchronous run; across keys, records finish out of arrival order. On
// hashmap reads complete at once, so there is no overtaking to assert.
func TestAsyncOrdering(t *testing.T) {
	const records, nkeys = 10000, 100
	keys := orderingInput(records, nkeys)
	for _, kind := range []string{KindPebble, KindHashmap} {
		t.Run(kind, func(t *testing.T) {
			want := runSyncOrdering(t, kind, keys)

			var delay func() time.Duration
			if kind == KindPebble {
				delay = func() time.Duration { return time.Duration(rand.IntN(5001)) * time.Microsecond }
			}
			b := openTestBackend(t, kind, delay)
			mb := newTestMailbox()
			c, err := NewAsyncExecutionController(b, mb, WithReadWorkers(32))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			s, err := GetAsyncValueState(c, seqsDesc)
			if err != nil {
				t.Fatal(err)
			}
			entered := map[string][]int{}   // per key: records as user code saw them
			completed := map[string][]int{} // per key: records as they finished
			var finished []int              // all records, in finishing order
			ctx := context.Background()
			for seq, k := range keys {
				err := c.Process(ctx, k, func() error {
					key := string(b.CurrentKey())
					entered[key] = append(entered[key], seq)
					read := s.AsyncValue()
					written := ThenCompose(read, func(v Optional[[]int]) (StateFuture[Void], error) {
						if got := string(b.CurrentKey()); got != key {
							return nil, fmt.Errorf("continuation of %s ran under key %s", key, got)
						}
						return s.AsyncUpdate(append(v.Value, seq)), nil
					})
					written.ThenAccept(func(Void) error {
						completed[key] = append(completed[key], seq)
						finished = append(finished, seq)
						return nil
					})
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			if err := c.Drain(ctx); err != nil {
				t.Fatal(err)
			}
			for k, seqs := range want {
				if !slices.IsSorted(entered[k]) || !reflect.DeepEqual(entered[k], seqs) {
					t.Fatalf("key %s: user code saw %v, arrival order %v", k, entered[k], seqs)
				}
				if !reflect.DeepEqual(completed[k], seqs) {
					t.Fatalf("key %s: records finished %v, arrival order %v", k, completed[k], seqs)
				}
			}
			sync, err := GetValueState(b, seqsDesc)
			if err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, b, sync, keys); !reflect.DeepEqual(got, want) {
				t.Fatal("final per-key values differ from the synchronous run")
			}
			if len(finished) != records {
				t.Fatalf("%d records finished, want %d", len(finished), records)
			}
			inv := inversions(finished)
			t.Logf("%s: %d of %d adjacent completions out of arrival order", kind, inv, records-1)
			if kind == KindPebble && inv == 0 {
				t.Fatal("records finished in arrival order: no key overtook another")
			}
		})
	}
}

// TestAsyncStates runs every async operation of every state type, on both
// backends, over two keys whose records interleave, and checks the values
// the futures carry and the key scoping.
func TestAsyncStates(t *testing.T) {
	for _, kind := range []string{KindPebble, KindHashmap} {
		t.Run(kind, func(t *testing.T) {
			b := openTestBackend(t, kind, nil)
			c, err := NewAsyncExecutionController(b, newTestMailbox())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			val, err := GetAsyncValueState(c, ValueStateDescriptor[int]{Name: "v", Serializer: JSONSerializer[int]{}})
			if err != nil {
				t.Fatal(err)
			}
			list, err := GetAsyncListState(c, ListStateDescriptor[string]{Name: "l", Serializer: JSONSerializer[string]{}})
			if err != nil {
				t.Fatal(err)
			}
			m, err := GetAsyncMapState(c, MapStateDescriptor[string, int]{Name: "m", KeySerializer: JSONSerializer[string]{}, ValueSerializer: JSONSerializer[int]{}})
			if err != nil {
				t.Fatal(err)
			}
			red, err := GetAsyncReducingState(c, ReducingStateDescriptor[int]{Name: "r", Serializer: JSONSerializer[int]{},
				Reduce: func(a, b int) (int, error) { return a + b, nil }})
			if err != nil {
				t.Fatal(err)
			}
			agg, err := GetAsyncAggregatingState(c, AggregatingStateDescriptor[int, asyncAvgAcc, float64]{Name: "a", AccSerializer: JSONSerializer[asyncAvgAcc]{}, Aggregate: asyncAvgFunc{}})
			if err != nil {
				t.Fatal(err)
			}

			got := map[string][]any{}
			note := func(key string) func(any) error {
				return func(v any) error { got[key] = append(got[key], v); return nil }
			}
			// step writes for the record's key and reads everything back.
			step := func(key string, n int) func() error {
				return func() error {
					rec := note(key)
					val.AsyncUpdate(n)
					list.AsyncAdd(fmt.Sprint(key, n))
					list.AsyncAddAll([]string{"x", "y"})
					m.AsyncPut(fmt.Sprint("k", n), n)
					m.AsyncPutAll(func(yield func(string, int) bool) { yield("extra", -n) })
					m.AsyncRemove("extra")
					red.AsyncAdd(n)
					agg.AsyncAdd(n)
					all := CombineAll([]StateFuture[any]{
						asyncAny(val.AsyncValue()),
						asyncAny(ToIterable(list.AsyncGet())),
						asyncAny(m.AsyncGet(fmt.Sprint("k", n))),
						asyncAny(m.AsyncContains("extra")),
						asyncAny(ThenApply(m.AsyncKeys(), asyncSortedKeys)),
						asyncAny(ToIterable(m.AsyncValues())),
						asyncAny(ToIterable(m.AsyncEntries())),
						asyncAny(m.AsyncIsEmpty()),
						asyncAny(red.AsyncGet()),
						asyncAny(agg.AsyncGet()),
					})
					all.ThenAccept(func(vs []any) error {
						for _, v := range vs {
							if err := rec(v); err != nil {
								return err
							}
						}
						return nil
					})
					return nil
				}
			}
			ctx := context.Background()
			for _, r := range []struct {
				key string
				n   int
			}{{"a", 1}, {"b", 10}, {"a", 2}} {
				if err := c.Process(ctx, []byte(r.key), step(r.key, r.n)); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.Drain(ctx); err != nil {
				t.Fatal(err)
			}
			want := map[string][]any{
				"a": {
					Optional[int]{1, true}, []string{"a1", "x", "y"}, Optional[int]{1, true}, false, []string{"k1"}, []int{1},
					[]MapEntry[string, int]{{"k1", 1}}, false, Optional[int]{1, true}, Optional[float64]{1, true},
					Optional[int]{2, true}, []string{"a1", "x", "y", "a2", "x", "y"}, Optional[int]{2, true}, false, []string{"k1", "k2"}, nil,
					nil, false, Optional[int]{3, true}, Optional[float64]{1.5, true},
				},
				"b": {
					Optional[int]{10, true}, []string{"b10", "x", "y"}, Optional[int]{10, true}, false, []string{"k10"}, []int{10},
					[]MapEntry[string, int]{{"k10", 10}}, false, Optional[int]{10, true}, Optional[float64]{10, true},
				},
			}
			// Map iteration order is backend-specific: compare values and
			// entries of key a's second record as sets.
			a := got["a"]
			if len(a) == 20 {
				vals, entries := a[15].([]int), a[16].([]MapEntry[string, int])
				slices.Sort(vals)
				slices.SortFunc(entries, func(x, y MapEntry[string, int]) int { return x.Value - y.Value })
				a[15], a[16] = vals, entries
				want["a"][15], want["a"][16] = []int{1, 2}, []MapEntry[string, int]{{"k1", 1}, {"k2", 2}}
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got\n%v\nwant\n%v", got, want)
			}

			// Clear every state of key a; key b keeps its values.
			if err := c.Process(ctx, []byte("a"), func() error {
				val.AsyncClear()
				list.AsyncClear()
				m.AsyncClear()
				red.AsyncClear()
				agg.AsyncClear()
				CombineAll([]StateFuture[any]{
					asyncAny(val.AsyncValue()),
					asyncAny(ThenApply(list.AsyncGet(), func(it StateIterator[string]) (bool, error) { return it.IsEmpty(), nil })),
					asyncAny(m.AsyncIsEmpty()),
					asyncAny(red.AsyncGet()),
					asyncAny(agg.AsyncGet()),
				}).ThenAccept(func(vs []any) error { got["cleared"] = vs; return nil })
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if err := c.Process(ctx, []byte("b"), func() error {
				val.AsyncValue().ThenAccept(func(v Optional[int]) error { got["b after"] = []any{v}; return nil })
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if err := c.Drain(ctx); err != nil {
				t.Fatal(err)
			}
			wantCleared := []any{Optional[int]{}, true, true, Optional[int]{}, Optional[float64]{}}
			if !reflect.DeepEqual(got["cleared"], wantCleared) || !reflect.DeepEqual(got["b after"], []any{Optional[int]{10, true}}) {
				t.Fatalf("after clear: %v and b %v, want %v and [{10 true}]", got["cleared"], got["b after"], wantCleared)
			}
		})
	}
}

// asyncAny erases a future's type so futures of several types combine.
func asyncAny[T any](f StateFuture[T]) StateFuture[any] {
	return ThenApply(f, func(v T) (any, error) { return v, nil })
}

func asyncSortedKeys(it StateIterator[string]) ([]string, error) {
	var ks []string
	it.OnNext(func(k string) error { ks = append(ks, k); return nil })
	slices.Sort(ks)
	return ks, nil
}

// asyncAvgAcc and asyncAvgFunc average ints (an AggregateFunction for the tests).
type asyncAvgAcc struct{ Sum, Count int }

type asyncAvgFunc struct{}

func (asyncAvgFunc) CreateAccumulator() asyncAvgAcc       { return asyncAvgAcc{} }
func (asyncAvgFunc) Add(v int, a asyncAvgAcc) asyncAvgAcc { return asyncAvgAcc{a.Sum + v, a.Count + 1} }
func (asyncAvgFunc) GetResult(a asyncAvgAcc) float64      { return float64(a.Sum) / float64(a.Count) }

// TestAsyncCountWindowAverage is the seed example through the async API:
// count and running sum in a ValueState, emit the average and clear at count
// 2; (1,3),(1,5),(1,7),(1,4),(1,2) emits exactly (1,4) and (1,5).
func TestAsyncCountWindowAverage(t *testing.T) {
	type pair struct{ Key, Value int }
	type countSum struct{ Count, Sum int }
	for _, kind := range []string{KindPebble, KindHashmap} {
		t.Run(kind, func(t *testing.T) {
			b := openTestBackend(t, kind, nil)
			c, err := NewAsyncExecutionController(b, newTestMailbox())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			s, err := GetAsyncValueState(c, ValueStateDescriptor[countSum]{Name: "average", Serializer: JSONSerializer[countSum]{}})
			if err != nil {
				t.Fatal(err)
			}
			var out []pair
			ctx := context.Background()
			for _, in := range []pair{{1, 3}, {1, 5}, {1, 7}, {1, 4}, {1, 2}} {
				err := c.Process(ctx, fmt.Append(nil, in.Key), func() error {
					ThenCompose(s.AsyncValue(), func(cur Optional[countSum]) (StateFuture[Void], error) {
						next := countSum{cur.Value.Count + 1, cur.Value.Sum + in.Value}
						if next.Count < 2 {
							return s.AsyncUpdate(next), nil
						}
						out = append(out, pair{in.Key, next.Sum / next.Count})
						return s.AsyncClear(), nil
					})
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			if err := c.Drain(ctx); err != nil {
				t.Fatal(err)
			}
			if want := []pair{{1, 4}, {1, 5}}; !reflect.DeepEqual(out, want) {
				t.Fatalf("emitted %v, want %v", out, want)
			}
		})
	}
}

// BenchmarkAsyncVsSync compares a read-modify-write of a per-key ValueState
// over 100 keys on Pebble: the synchronous API, one record after another,
// against the async API. read=local is Pebble as it is (hot keys, served by
// the write cache: what the async path costs over the sync one, allocs/op
// included); read=100µs and read=1ms make every store read wait that long
// (a slow disk or remote store; the cache is bypassed, so every async read
// goes to a read worker), with several read-worker counts. Records/s is
// reported as "records/s". BENCHMARKS.md ("Async state") has the figures.
func BenchmarkAsyncVsSync(b *testing.B) {
	const nkeys = 100
	keys := make([][]byte, nkeys)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "key-%03d", i)
	}
	desc := ValueStateDescriptor[int]{Name: "sum", Serializer: JSONSerializer[int]{}}
	for _, read := range []struct {
		name    string
		delay   time.Duration
		workers []int
	}{
		{"local", 0, []int{DefaultReadWorkers}},
		{"100µs", 100 * time.Microsecond, []int{4, 16, 64}},
		{"1ms", time.Millisecond, []int{4, 16, 64}},
	} {
		open := func(b *testing.B) KeyedStateBackend {
			if read.delay == 0 {
				return openTestBackend(b, KindPebble, nil)
			}
			return openBlockingBackend(b, read.delay)
		}
		b.Run("read="+read.name+"/sync", func(b *testing.B) {
			be := open(b)
			s, err := GetValueState(be, desc)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				be.SetCurrentKey(keys[i%nkeys])
				v, _, err := s.Value()
				if err != nil {
					b.Fatal(err)
				}
				if err := s.Update(v + 1); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
		for _, workers := range read.workers {
			b.Run(fmt.Sprintf("read=%s/async/workers=%d", read.name, workers), func(b *testing.B) {
				be := open(b)
				c, err := NewAsyncExecutionController(be, newTestMailbox(), WithReadWorkers(workers))
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				s, err := GetAsyncValueState(c, desc)
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				fn := func() error { // one function for every record, as the keyed operator's
					s.AsyncValue().ThenAccept(func(v Optional[int]) error {
						s.AsyncUpdate(v.Value + 1)
						return nil
					})
					return nil
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					if err := c.Process(ctx, keys[i%nkeys], fn); err != nil {
						b.Fatal(err)
					}
				}
				if err := c.Drain(ctx); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
			})
		}
	}
}
