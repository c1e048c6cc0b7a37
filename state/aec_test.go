package state

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/state/keygroup"
)

// testMailbox is a MailboxExecutor as runtime.Mailbox: an unbounded queue any
// goroutine posts to and the test (subtask) goroutine runs from. onYield, if
// set, runs at the start of every Yield.
type testMailbox struct {
	mu      sync.Mutex // guards queue
	queue   []func()
	ready   chan struct{}
	onYield func()
	yields  int // Yield calls; test goroutine only
}

func newTestMailbox() *testMailbox { return &testMailbox{ready: make(chan struct{}, 1)} }

func (m *testMailbox) Execute(action func()) {
	m.mu.Lock()
	m.queue = append(m.queue, action)
	m.mu.Unlock()
	select {
	case m.ready <- struct{}{}:
	default:
	}
}

func (m *testMailbox) Yield(ctx context.Context) error {
	m.yields++
	if m.onYield != nil {
		m.onYield()
	}
	for {
		m.mu.Lock()
		var a func()
		if len(m.queue) > 0 {
			a = m.queue[0]
			m.queue = m.queue[1:]
		}
		m.mu.Unlock()
		if a != nil {
			a()
			return nil
		}
		select {
		case <-m.ready:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// fakeKV is byte-keyed storage safe for concurrent use, read by workers and
// written by the subtask goroutine, standing in for a backend in the
// controller tests that do not need a real one.
type fakeKV struct {
	mu   sync.Mutex // guards m
	m    map[string][]int
	wait func(key []byte) // runs before each worker read, on the worker
}

func (kv *fakeKV) get(key []byte) ([]int, error) {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	return append([]int(nil), kv.m[string(key)]...), nil
}

func (kv *fakeKV) set(key []byte, v []int) {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	kv.m[string(key)] = v
}

// read issues an async read of the current record's key: on a worker
// through kv.wait when off is true, else inline.
func (kv *fakeKV) read(c *AsyncExecutionController, off bool) StateFuture[[]int] {
	var offFn func([]byte) ([]int, error)
	if off {
		offFn = func(key []byte) ([]int, error) {
			if kv.wait != nil {
				kv.wait(key)
			}
			return kv.get(key)
		}
	}
	return submitRead(c, offFn, func() ([]int, error) { return kv.get(c.Backend().CurrentKey()) })
}

func (kv *fakeKV) write(c *AsyncExecutionController, v []int) StateFuture[Void] {
	return submitWrite(c, func() (Void, error) {
		kv.set(c.Backend().CurrentKey(), v)
		return Void{}, nil
	})
}

func newTestController(t *testing.T, opts ...AsyncOpt) (*AsyncExecutionController, *testMailbox) {
	t.Helper()
	mb := newTestMailbox()
	c, err := NewAsyncExecutionController(openTestBackend(t, KindHashmap, nil), mb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, mb
}

func TestNewAsyncExecutionControllerValidates(t *testing.T) {
	_, err := NewAsyncExecutionController(nil, nil, WithInFlightRecordsLimit(0), WithReadWorkers(-1))
	want := "state: async execution controller: nil backend; nil mailbox; in-flight records limit 0, want at least 1; read workers -1, want at least 1"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %s", err, want)
	}
}

// TestAECKeyOrderFake is the ordering property on a fake store whose worker
// reads take a random 0-2 ms: per key, records run in arrival order and the
// read-modify-write results equal a sequential run; across keys, records
// finish out of arrival order.
func TestAECKeyOrderFake(t *testing.T) {
	const records, keys = 2000, 20
	kv := &fakeKV{m: map[string][]int{}}
	rng := rand.New(rand.NewPCG(1, 2))
	delays := make([]time.Duration, records)
	for i := range delays {
		delays[i] = time.Duration(rng.IntN(2000)) * time.Microsecond
	}
	var finished []int // record sequence numbers in the order they finished
	c, _ := newTestController(t, WithReadWorkers(8))
	ctx := context.Background()
	for seq := range records {
		key := []byte(fmt.Sprintf("k%02d", seq%keys))
		d := delays[seq]
		err := c.Process(ctx, key, func() error {
			f := submitRead(c, func(key []byte) ([]int, error) {
				time.Sleep(d) // injected read latency, not synchronisation
				return kv.get(key)
			}, nil)
			ThenCompose(f, func(v []int) (StateFuture[Void], error) {
				return kv.write(c, append(v, seq)), nil
			}).ThenAccept(func(Void) error {
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
	for k := range keys {
		got, _ := kv.get([]byte(fmt.Sprintf("k%02d", k)))
		var want []int
		for seq := k; seq < records; seq += keys {
			want = append(want, seq)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("key k%02d saw %v, want %v", k, got, want)
		}
	}
	if len(finished) != records {
		t.Fatalf("%d records finished, want %d", len(finished), records)
	}
	if inversions(finished) == 0 {
		t.Fatal("records finished in arrival order: no key overtook another")
	}
}

// inversions counts adjacent pairs out of increasing order.
func inversions(seqs []int) int {
	n := 0
	for i := 1; i < len(seqs); i++ {
		if seqs[i] < seqs[i-1] {
			n++
		}
	}
	return n
}

// TestAECChainOrder checks that the continuations of a chain run in chain
// order, that several continuations of one future run in registration
// order, and that each runs with its record's key current, while another
// key's record runs in between.
func TestAECChainOrder(t *testing.T) {
	for _, off := range []bool{true, false} {
		t.Run(fmt.Sprintf("worker reads %v", off), func(t *testing.T) {
			kv := &fakeKV{m: map[string][]int{}}
			gate := make(chan struct{})
			kv.wait = func(key []byte) {
				if string(key) == "a" {
					<-gate
				}
			}
			c, mb := newTestController(t)
			var log []string
			step := func(key, name string) {
				if got := string(c.Backend().CurrentKey()); got != key {
					t.Errorf("%s ran with current key %q, want %q", name, got, key)
				}
				log = append(log, key+":"+name)
			}
			ctx := context.Background()
			err := c.Process(ctx, []byte("a"), func() error {
				f := kv.read(c, off)
				f.ThenAccept(func([]int) error { step("a", "first"); return nil })
				g := ThenApply(f, func([]int) (int, error) { step("a", "apply"); return 1, nil })
				h := ThenCompose(g, func(int) (StateFuture[[]int], error) { step("a", "compose"); return kv.read(c, off), nil })
				h.ThenAccept(func([]int) error { step("a", "last"); return nil })
				f.ThenAccept(func([]int) error { step("a", "second"); return nil })
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Process(ctx, []byte("b"), func() error {
				kv.read(c, off).ThenAccept(func([]int) error { step("b", "only"); return nil })
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			mb.onYield = func() {
				select {
				case <-gate:
				default:
					if len(log) > 0 || !off {
						close(gate)
					}
				}
			}
			if !off {
				close(gate)
			}
			if err := c.Drain(ctx); err != nil {
				t.Fatal(err)
			}
			// Depth first, as Java's CompletableFuture: completing f runs its
			// continuations in registration order, and each one's
			// dependants before the next. Inline, f is complete when
			// registered on, so each continuation runs at once.
			want := []string{"a:first", "a:apply", "a:compose", "a:second", "a:last"}
			if !off {
				want = []string{"a:first", "a:apply", "a:compose", "a:last", "a:second"}
			}
			var gotA []string
			for _, s := range log {
				if s[0] == 'a' {
					gotA = append(gotA, s)
				}
			}
			if !reflect.DeepEqual(gotA, want) {
				t.Fatalf("key a ran %v, want %v", gotA, want)
			}
			if off && log[0] != "b:only" {
				t.Fatalf("log %v: key b should overtake the blocked key a", log)
			}
		})
	}
}

// TestAECErrorPropagation checks that a failed read or continuation skips
// the rest of its chain and fails the task through Drain and Process.
func TestAECErrorPropagation(t *testing.T) {
	tests := []struct {
		name string
		run  func(c *AsyncExecutionController, ran *[]string) error
	}{
		{"record function", func(*AsyncExecutionController, *[]string) error { return errBoom }},
		{"failed read", func(c *AsyncExecutionController, ran *[]string) error {
			f := submitRead(c, func([]byte) (int, error) { return 0, errBoom }, nil)
			ThenApply(f, func(int) (int, error) { *ran = append(*ran, "apply"); return 0, nil }).
				ThenAccept(func(int) error { *ran = append(*ran, "accept"); return nil })
			return nil
		}},
		{"failed continuation", func(c *AsyncExecutionController, ran *[]string) error {
			f := submitRead(c, func([]byte) (int, error) { return 1, nil }, nil)
			ThenApply(f, func(int) (int, error) { *ran = append(*ran, "apply"); return 0, errBoom }).
				ThenAccept(func(int) error { *ran = append(*ran, "accept"); return nil })
			return nil
		}},
		{"failed inline write", func(c *AsyncExecutionController, ran *[]string) error {
			w := submitWrite(c, func() (Void, error) { return Void{}, errBoom })
			w.ThenAccept(func(Void) error { *ran = append(*ran, "accept"); return nil })
			return nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := newTestController(t)
			ctx := context.Background()
			var ran []string
			if err := c.Process(ctx, []byte("k"), func() error { return tt.run(c, &ran) }); err != nil && !errors.Is(err, errBoom) {
				t.Fatal(err)
			}
			err := c.Drain(ctx)
			var re *RecordError
			if !errors.Is(err, errBoom) || !errors.As(err, &re) || string(re.Key) != "k" {
				t.Fatalf("Drain = %v, want a *RecordError for key k wrapping %v", err, errBoom)
			}
			if tt.name == "failed continuation" && !reflect.DeepEqual(ran, []string{"apply"}) || tt.name != "failed continuation" && len(ran) != 0 {
				t.Fatalf("ran %v after the failure", ran)
			}
			if err := c.Process(ctx, []byte("other"), func() error { t.Error("record started after a failure"); return nil }); !errors.Is(err, errBoom) {
				t.Fatalf("Process after failure = %v, want %v", err, errBoom)
			}
		})
	}
}

// TestAECProgramOrder checks that a write issued after a read of the same
// record waits for that read, and a read issued after a write sees it.
func TestAECProgramOrder(t *testing.T) {
	kv := &fakeKV{m: map[string][]int{"k": {1}}}
	gate := make(chan struct{})
	kv.wait = func([]byte) { <-gate }
	c, mb := newTestController(t)
	mb.onYield = func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
	}
	var first, second []int
	ctx := context.Background()
	if err := c.Process(ctx, []byte("k"), func() error {
		kv.read(c, true).ThenAccept(func(v []int) error { first = v; return nil })
		kv.write(c, []int{2})
		kv.read(c, true).ThenAccept(func(v []int) error { second = v; return nil })
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(first, []int{1}) || !reflect.DeepEqual(second, []int{2}) {
		t.Fatalf("reads saw %v and %v, want [1] and [2]", first, second)
	}
}

// TestAECInFlightLimit checks that Process yields to the mailbox when the
// limit is reached instead of accepting more records, and drops nothing.
func TestAECInFlightLimit(t *testing.T) {
	const limit, records = 3, 20
	kv := &fakeKV{m: map[string][]int{}}
	release := make(chan struct{}, records)
	kv.wait = func([]byte) { <-release }
	c, mb := newTestController(t, WithInFlightRecordsLimit(limit))
	mb.onYield = func() { release <- struct{}{} } // let one read finish per yield
	ctx := context.Background()
	done := 0
	for seq := range records {
		if err := c.Process(ctx, []byte(fmt.Sprint(seq%5)), func() error {
			kv.read(c, true).ThenAccept(func([]int) error { done++; return nil })
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if c.InFlight() > limit {
			t.Fatalf("%d records in flight, limit %d", c.InFlight(), limit)
		}
	}
	if mb.yields == 0 {
		t.Fatal("Process never yielded at the limit")
	}
	if err := c.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if done != records || c.InFlight() != 0 {
		t.Fatalf("%d records done, %d in flight; want %d and 0", done, c.InFlight(), records)
	}
}

// TestAECDrainContext checks that Drain gives up when ctx ends while a read
// never completes, and that Close then stops the stuck worker's pool.
func TestAECDrainContext(t *testing.T) {
	kv := &fakeKV{m: map[string][]int{}}
	gate := make(chan struct{})
	kv.wait = func([]byte) { <-gate }
	c, _ := newTestController(t)
	ctx, cancel := context.WithCancel(context.Background())
	if err := c.Process(ctx, []byte("k"), func() error { kv.read(c, true); return nil }); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := c.Drain(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Drain = %v, want context.Canceled", err)
	}
	close(gate) // let the worker finish so Close can wait for it
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Process(context.Background(), []byte("k"), func() error { return nil }); !errors.Is(err, ErrControllerClosed) {
		t.Fatalf("Process after Close = %v, want ErrControllerClosed", err)
	}
}

func TestAECOutsideRecord(t *testing.T) {
	c, _ := newTestController(t)
	kv := &fakeKV{m: map[string][]int{}}
	if _, err, done := outcome(kv.read(c, true)); !done || !errors.Is(err, ErrNoRecordContext) {
		t.Fatalf("read outside a record = (%v, done %v), want ErrNoRecordContext", err, done)
	}
}

// openCachedPebble opens a Pebble backend owning every key group with a
// write cache of cacheBytes.
func openCachedPebble(t testing.TB, cacheBytes int) KeyedStateBackend {
	t.Helper()
	b, err := OpenBackend(BackendConfig{Kind: KindPebble, Dir: t.TempDir(), MaxParallelism: testMaxParallelism,
		KeyGroupRange: keygroup.Range{Start: 0, End: testMaxParallelism - 1}, WriteCacheBytes: cacheBytes})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	return b
}

// TestAECCachedAndWorkerReads mixes the two ways a Pebble read completes:
// served by the write cache at once on the subtask goroutine (the record
// may then finish within Process and never enter the controller's key map)
// or by a read worker (the record stays in flight and later records of its
// key wait). A 4 KiB cache that keeps dropping its entries and an in-flight
// limit of 8 interleave both for the same keys. Per key, user code sees the
// records in arrival order and the final values equal the synchronous run.
func TestAECCachedAndWorkerReads(t *testing.T) {
	const records, nkeys = 3000, 30
	keys := orderingInput(records, nkeys)
	want := runSyncOrdering(t, KindPebble, keys)
	b := openCachedPebble(t, 4096)
	c, err := NewAsyncExecutionController(b, newTestMailbox(), WithInFlightRecordsLimit(8), WithReadWorkers(4))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := GetAsyncValueState(c, seqsDesc)
	if err != nil {
		t.Fatal(err)
	}
	entered := map[string][]int{}
	cached, offloaded := 0, 0
	ctx := context.Background()
	for seq, k := range keys {
		err := c.Process(ctx, k, func() error {
			key := string(b.CurrentKey())
			entered[key] = append(entered[key], seq)
			read := s.AsyncValue()
			if read.(*future[Optional[[]int]]).done {
				cached++
			} else {
				offloaded++
			}
			read.ThenAccept(func(v Optional[[]int]) error {
				s.AsyncUpdate(append(v.Value, seq))
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
	if cached == 0 || offloaded == 0 {
		t.Fatalf("%d reads served by the cache, %d by workers: want both", cached, offloaded)
	}
	for k, seqs := range want {
		if !reflect.DeepEqual(entered[k], seqs) {
			t.Fatalf("key %s: user code saw %v, arrival order %v", k, entered[k], seqs)
		}
	}
	if len(c.keys) != 0 || c.InFlight() != 0 {
		t.Fatalf("after Drain: %d keys in the map, %d records in flight; want 0, 0", len(c.keys), c.InFlight())
	}
	sync, err := GetValueState(b, seqsDesc)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, b, sync, keys); !reflect.DeepEqual(got, want) {
		t.Fatal("final per-key values differ from the synchronous run")
	}
}

// TestAECCachedPathAllocs counts (testing.AllocsPerRun, no timing) what a
// read-modify-write record costs through the async API on Pebble with its
// key in the write cache, against the same calls through the synchronous
// API: the same, one allocation (the read's copy of the cached value's
// bytes). Both paths reuse the read's Pebble key (a buffer of the handle;
// the synchronous write reuses it and its serialized value too, and the
// entry the read found); the read's completed future (the handle's doneSlot), the record,
// its key's bookkeeping, the write's future and the futures of ThenAccept
// and ThenCompose over completed futures are not allocated.
func TestAECCachedPathAllocs(t *testing.T) {
	desc := ValueStateDescriptor[int64]{Name: "n", Serializer: Int64Serializer{}}
	key := []byte("k")
	b := openCachedPebble(t, 0)
	sync, err := GetValueState(b, desc)
	if err != nil {
		t.Fatal(err)
	}
	b.SetCurrentKey(key)
	if err := sync.Update(1); err != nil { // the key is now in the cache
		t.Fatal(err)
	}
	syncAllocs := testing.AllocsPerRun(100, func() {
		b.SetCurrentKey(key)
		v, _, err := sync.Value()
		if err == nil {
			err = sync.Update(v + 1)
		}
		if err != nil {
			t.Fatal(err)
		}
	})
	c, err := NewAsyncExecutionController(b, newTestMailbox())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := GetAsyncValueState(c, desc)
	if err != nil {
		t.Fatal(err)
	}
	update := func(v Optional[int64]) error { s.AsyncUpdate(v.Value + 1); return nil }
	compose := func(v Optional[int64]) (StateFuture[Void], error) { return s.AsyncUpdate(v.Value + 1), nil }
	ctx := context.Background()
	for _, tt := range []struct {
		name string
		fn   func() error
	}{
		{"ThenAccept", func() error { s.AsyncValue().ThenAccept(update); return nil }},
		{"ThenCompose", func() error {
			ThenCompose(s.AsyncValue(), compose).ThenAccept(func(Void) error { return nil })
			return nil
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			asyncAllocs := testing.AllocsPerRun(100, func() {
				if err := c.Process(ctx, key, tt.fn); err != nil {
					t.Fatal(err)
				}
			})
			if c.InFlight() != 0 {
				t.Fatalf("%d records in flight, want 0: a read was not served by the cache", c.InFlight())
			}
			if syncAllocs != 1 || asyncAllocs != syncAllocs {
				t.Fatalf("async record: %v allocations, synchronous calls %v; want 1 each", asyncAllocs, syncAllocs)
			}
		})
	}
}

// TestAECReusedReadFutureNotStale checks the reuse of a handle's completed
// read future (doneSlot) on Pebble with the write cache: a future a record
// still holds never changes its value, whether a later read of the same
// record or a read of another record, while the first is in flight, is
// served at once by the cache. Record A reads "n" of key a (cached: 1),
// then a key of another state the cache does not hold (a worker read), and
// only in that read's continuation consumes its first future; meanwhile
// record B reads "n" of key b (cached: 2). Then, with both finished, a
// record of key c reads "n" (cached: 3, the slot is free again), writes 30
// and reads it again, consuming the first future after the second.
func TestAECReusedReadFutureNotStale(t *testing.T) {
	desc := ValueStateDescriptor[int64]{Name: "n", Serializer: Int64Serializer{}}
	otherDesc := ValueStateDescriptor[int64]{Name: "other", Serializer: Int64Serializer{}}
	b := openCachedPebble(t, 0)
	sync, err := GetValueState(b, desc)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]int64{"a": 1, "b": 2, "c": 3} {
		b.SetCurrentKey([]byte(k))
		if err := sync.Update(v); err != nil { // the key is now in the cache
			t.Fatal(err)
		}
	}
	c, err := NewAsyncExecutionController(b, newTestMailbox())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n, err := GetAsyncValueState(c, desc)
	if err != nil {
		t.Fatal(err)
	}
	other, err := GetAsyncValueState(c, otherDesc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	got := map[string][]int64{}
	record := func(key string) func() error {
		return func() error {
			fa := n.AsyncValue()
			g := other.AsyncValue()
			if !fa.(*future[Optional[int64]]).done || g.(*future[Optional[int64]]).done {
				t.Fatalf("key %s: want the read of n served by the cache, the read of other by a worker", key)
			}
			g.ThenAccept(func(Optional[int64]) error {
				fa.ThenAccept(func(v Optional[int64]) error {
					got[key] = append(got[key], v.Value)
					return nil
				})
				return nil
			})
			return nil
		}
	}
	if err := c.Process(ctx, []byte("a"), record("a")); err != nil {
		t.Fatal(err)
	}
	if c.InFlight() != 1 {
		t.Fatalf("%d records in flight, want 1 (a, waiting for its worker read)", c.InFlight())
	}
	if err := c.Process(ctx, []byte("b"), func() error {
		n.AsyncValue().ThenAccept(func(v Optional[int64]) error {
			got["b"] = append(got["b"], v.Value)
			return nil
		})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Drain(ctx); err != nil { // a finished: its slot is free for c's first read
		t.Fatal(err)
	}
	if err := c.Process(ctx, []byte("c"), func() error {
		first := n.AsyncValue()
		n.AsyncUpdate(30)
		second := n.AsyncValue()
		for _, f := range []StateFuture[Optional[int64]]{second, first} {
			f.ThenAccept(func(v Optional[int64]) error {
				got["c"] = append(got["c"], v.Value)
				return nil
			})
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[string][]int64{"a": {1}, "b": {2}, "c": {30, 3}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("values seen through the read futures: %v, want %v", got, want)
	}
}
