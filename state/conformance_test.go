package state

import (
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/kstreamd/kstreamd/state/keygroup"
)

// The conformance suite: every operation of every state type on both
// backends, with keys interleaved, key scoping and clear.

var keys3 = []string{"alice", "bob", "carol"}

func TestConformanceValueState(t *testing.T) {
	for _, kind := range conformanceKinds {
		t.Run(kind, func(t *testing.T) {
			b := open(t, testConfig(t, kind))
			s := must1(GetValueState(b, ValueStateDescriptor[int64]{Name: "count", Serializer: Int64Serializer{}}))(t)
			type step struct {
				key    string
				op     string // "update", "clear", "value"
				v      int64
				want   int64
				wantOK bool
			}
			steps := []step{
				{key: "alice", op: "value"},
				{key: "alice", op: "update", v: 1},
				{key: "bob", op: "update", v: 2},
				{key: "alice", op: "value", want: 1, wantOK: true},
				{key: "bob", op: "value", want: 2, wantOK: true},
				{key: "carol", op: "value"},
				{key: "alice", op: "update", v: -7},
				{key: "bob", op: "clear"},
				{key: "alice", op: "value", want: -7, wantOK: true},
				{key: "bob", op: "value"},
				{key: "carol", op: "clear"},
				{key: "carol", op: "update", v: 0},
				{key: "carol", op: "value", want: 0, wantOK: true},
			}
			for i, st := range steps {
				b.SetCurrentKey([]byte(st.key))
				switch st.op {
				case "update":
					must(t, s.Update(st.v))
				case "clear":
					must(t, s.Clear())
				case "value":
					got, ok, err := s.Value()
					if err != nil || ok != st.wantOK || got != st.want {
						t.Fatalf("step %d: Value() under %s = %d, %t, %v; want %d, %t", i, st.key, got, ok, err, st.want, st.wantOK)
					}
				}
			}
		})
	}
}

func TestConformanceListState(t *testing.T) {
	for _, kind := range conformanceKinds {
		t.Run(kind, func(t *testing.T) {
			b := open(t, testConfig(t, kind))
			s := must1(GetListState(b, ListStateDescriptor[string]{Name: "events", Serializer: StringSerializer{}}))(t)
			type step struct {
				key  string
				op   string // "add", "addAll", "update", "clear", "get"
				vs   []string
				want []string
			}
			steps := []step{
				{key: "alice", op: "get"},
				{key: "alice", op: "add", vs: []string{"a1"}},
				{key: "bob", op: "add", vs: []string{"b1"}},
				{key: "alice", op: "addAll", vs: []string{"a2", "", "a3"}},
				{key: "alice", op: "get", want: []string{"a1", "a2", "", "a3"}},
				{key: "bob", op: "get", want: []string{"b1"}},
				{key: "carol", op: "get"},
				{key: "bob", op: "addAll"},
				{key: "bob", op: "get", want: []string{"b1"}},
				{key: "bob", op: "update", vs: []string{"x", "y"}},
				{key: "bob", op: "add", vs: []string{"z"}},
				{key: "bob", op: "get", want: []string{"x", "y", "z"}},
				{key: "alice", op: "clear"},
				{key: "alice", op: "get"},
				{key: "bob", op: "update"},
				{key: "bob", op: "get"},
				{key: "carol", op: "addAll", vs: []string{"c1"}},
				{key: "carol", op: "get", want: []string{"c1"}},
			}
			for i, st := range steps {
				b.SetCurrentKey([]byte(st.key))
				switch st.op {
				case "add":
					must(t, s.Add(st.vs[0]))
				case "addAll":
					must(t, s.AddAll(st.vs))
				case "update":
					must(t, s.Update(st.vs))
				case "clear":
					must(t, s.Clear())
				case "get":
					if got := collect(t, s.Get()); !slices.Equal(got, st.want) {
						t.Fatalf("step %d: Get() under %s = %q, want %q", i, st.key, got, st.want)
					}
				}
			}
			// Breaking out of the iteration early is fine.
			b.SetCurrentKey([]byte("carol"))
			must(t, s.Add("c2"))
			for v, err := range s.Get() {
				if err != nil || v != "c1" {
					t.Fatalf("first element = %q, %v", v, err)
				}
				break
			}
			if n := storedEntries(t, b); n != 1 {
				t.Fatalf("stored entries = %d, want 1 (carol's list)", n)
			}
		})
	}
}

func TestConformanceMapState(t *testing.T) {
	for _, kind := range conformanceKinds {
		t.Run(kind, func(t *testing.T) {
			b := open(t, testConfig(t, kind))
			s := must1(GetMapState(b, MapStateDescriptor[string, int64]{Name: "counts", KeySerializer: StringSerializer{}, ValueSerializer: Int64Serializer{}}))(t)
			entries := func() map[string]int64 {
				out := map[string]int64{}
				for e, err := range s.Entries() {
					must(t, err)
					out[e.Key] = e.Value
				}
				return out
			}
			// Interleaved writes under three keys.
			for i, k := range keys3 {
				b.SetCurrentKey([]byte(k))
				must(t, s.Put("x", int64(i)))
				must(t, s.PutAll(maps.All(map[string]int64{k + "-1": 1, k + "-2": 2, "": 9})))
			}
			for i, k := range keys3 {
				b.SetCurrentKey([]byte(k))
				want := map[string]int64{"x": int64(i), k + "-1": 1, k + "-2": 2, "": 9}
				if got := entries(); !maps.Equal(got, want) {
					t.Fatalf("Entries() under %s = %v, want %v", k, got, want)
				}
				if got, want := sorted(collect(t, s.Keys())), sorted(slices.Collect(maps.Keys(want))); !slices.Equal(got, want) {
					t.Fatalf("Keys() under %s = %q, want %q", k, got, want)
				}
				if got, want := sorted(collect(t, s.Values())), sorted(slices.Collect(maps.Values(want))); !slices.Equal(got, want) {
					t.Fatalf("Values() under %s = %v, want %v", k, got, want)
				}
			}
			b.SetCurrentKey([]byte("alice"))
			tests := []struct {
				uk     string
				want   int64
				wantOK bool
			}{{"x", 0, true}, {"alice-2", 2, true}, {"bob-1", 0, false}, {"", 9, true}, {"missing", 0, false}}
			for _, tc := range tests {
				got, ok, err := s.Get(tc.uk)
				if err != nil || ok != tc.wantOK || got != tc.want {
					t.Fatalf("Get(%q) = %d, %t, %v; want %d, %t", tc.uk, got, ok, err, tc.want, tc.wantOK)
				}
				if ok, err := s.Contains(tc.uk); err != nil || ok != tc.wantOK {
					t.Fatalf("Contains(%q) = %t, %v; want %t", tc.uk, ok, err, tc.wantOK)
				}
			}
			must(t, s.Put("x", 42))
			must(t, s.Remove("alice-1"))
			must(t, s.Remove("never-there"))
			if got, want := entries(), map[string]int64{"x": 42, "alice-2": 2, "": 9}; !maps.Equal(got, want) {
				t.Fatalf("after put/remove: %v, want %v", got, want)
			}
			// Removing the current entry while iterating.
			for e, err := range s.Entries() {
				must(t, err)
				if e.Key == "alice-2" {
					must(t, s.Remove(e.Key))
				}
			}
			if got, want := entries(), map[string]int64{"x": 42, "": 9}; !maps.Equal(got, want) {
				t.Fatalf("after removing while iterating: %v, want %v", got, want)
			}
			if empty := must1(s.IsEmpty())(t); empty {
				t.Fatal("IsEmpty() = true for alice")
			}
			must(t, s.Clear())
			if empty := must1(s.IsEmpty())(t); !empty {
				t.Fatal("IsEmpty() = false after Clear")
			}
			if got := entries(); len(got) != 0 {
				t.Fatalf("after Clear: %v", got)
			}
			// Clear under alice left bob and carol alone.
			b.SetCurrentKey([]byte("bob"))
			if v, ok, err := s.Get("bob-1"); err != nil || !ok || v != 1 {
				t.Fatalf("bob's bob-1 = %d, %t, %v after clearing alice", v, ok, err)
			}
			if n := storedEntries(t, b); n != 8 {
				t.Fatalf("stored entries = %d, want 8 (4 each for bob and carol)", n)
			}
		})
	}
}

func sorted[T interface{ ~string | ~int64 }](s []T) []T { slices.Sort(s); return s }

func TestConformanceReducingState(t *testing.T) {
	for _, kind := range conformanceKinds {
		t.Run(kind, func(t *testing.T) {
			b := open(t, testConfig(t, kind))
			s := must1(GetReducingState(b, ReducingStateDescriptor[int64]{
				Name: "sum", Serializer: Int64Serializer{},
				Reduce: func(a, b int64) (int64, error) { return a + b, nil },
			}))(t)
			adds := []struct {
				key string
				v   int64
			}{{"alice", 1}, {"bob", 10}, {"alice", 2}, {"carol", 100}, {"bob", 20}, {"alice", 3}}
			for _, a := range adds {
				b.SetCurrentKey([]byte(a.key))
				must(t, s.Add(a.v))
			}
			want := map[string]int64{"alice": 6, "bob": 30, "carol": 100}
			for k, w := range want {
				b.SetCurrentKey([]byte(k))
				if got, ok, err := s.Get(); err != nil || !ok || got != w {
					t.Fatalf("Get() under %s = %d, %t, %v; want %d", k, got, ok, err, w)
				}
			}
			b.SetCurrentKey([]byte("bob"))
			must(t, s.Clear())
			if _, ok, err := s.Get(); err != nil || ok {
				t.Fatalf("Get() after Clear = %t, %v", ok, err)
			}
			must(t, s.Add(5))
			if got, _, _ := s.Get(); got != 5 {
				t.Fatalf("Get() after Clear and Add(5) = %d", got)
			}
			// A failing reduce leaves the state unchanged.
			f := must1(GetReducingState(b, ReducingStateDescriptor[int64]{
				Name: "failing", Serializer: Int64Serializer{},
				Reduce: func(a, b int64) (int64, error) { return 0, errors.New("boom") },
			}))(t)
			must(t, f.Add(1))
			if err := f.Add(2); err == nil {
				t.Fatal("Add with a failing reduce succeeded")
			}
			if got, _, _ := f.Get(); got != 1 {
				t.Fatalf("Get() after failed reduce = %d, want 1", got)
			}
		})
	}
}

// avgAcc is the accumulator of avgFunc.
type avgAcc struct {
	Sum   float64 `json:"sum"`
	Count int64   `json:"count"`
}

// avgFunc averages float64 inputs.
type avgFunc struct{}

func (avgFunc) CreateAccumulator() avgAcc { return avgAcc{} }
func (avgFunc) Add(v float64, a avgAcc) avgAcc {
	a.Sum += v
	a.Count++
	return a
}
func (avgFunc) GetResult(a avgAcc) float64 { return a.Sum / float64(a.Count) }
func (avgFunc) Merge(a, b avgAcc) avgAcc   { return avgAcc{Sum: a.Sum + b.Sum, Count: a.Count + b.Count} }

func TestConformanceAggregatingState(t *testing.T) {
	for _, kind := range conformanceKinds {
		t.Run(kind, func(t *testing.T) {
			b := open(t, testConfig(t, kind))
			s := must1(GetAggregatingState(b, AggregatingStateDescriptor[float64, avgAcc, float64]{
				Name: "avg", Aggregate: avgFunc{}, AccSerializer: JSONSerializer[avgAcc]{},
			}))(t)
			adds := []struct {
				key string
				v   float64
			}{{"alice", 3}, {"bob", 10}, {"alice", 5}, {"alice", 7}, {"carol", 1}, {"bob", 20}}
			for _, a := range adds {
				b.SetCurrentKey([]byte(a.key))
				must(t, s.Add(a.v))
			}
			for k, w := range map[string]float64{"alice": 5, "bob": 15, "carol": 1} {
				b.SetCurrentKey([]byte(k))
				if got, ok, err := s.Get(); err != nil || !ok || got != w {
					t.Fatalf("Get() under %s = %v, %t, %v; want %v", k, got, ok, err, w)
				}
			}
			b.SetCurrentKey([]byte("alice"))
			must(t, s.Clear())
			if _, ok, err := s.Get(); err != nil || ok {
				t.Fatalf("Get() after Clear = %t, %v", ok, err)
			}
			b.SetCurrentKey([]byte("nobody"))
			if _, ok, err := s.Get(); err != nil || ok {
				t.Fatalf("Get() for a fresh key = %t, %v", ok, err)
			}
		})
	}
}

func TestRegistration(t *testing.T) {
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			b := open(t, testConfig(t, kind))
			d := ValueStateDescriptor[string]{Name: "v", Serializer: StringSerializer{}}
			s1 := must1(GetValueState(b, d))(t)
			s2 := must1(GetValueState(b, d))(t)
			if s1 != s2 {
				t.Fatal("the same descriptor twice gave two handles")
			}
			conflicts := []struct {
				name string
				get  func() error
			}{
				{"other value type", func() error {
					_, err := GetValueState(b, ValueStateDescriptor[int64]{Name: "v", Serializer: Int64Serializer{}})
					return err
				}},
				{"other serializer, same type", func() error {
					_, err := GetValueState(b, ValueStateDescriptor[string]{Name: "v", Serializer: JSONSerializer[string]{}})
					return err
				}},
				{"other state type", func() error {
					_, err := GetListState(b, ListStateDescriptor[string]{Name: "v", Serializer: StringSerializer{}})
					return err
				}},
				{"ttl added", func() error {
					_, err := GetValueState(b, ValueStateDescriptor[string]{Name: "v", Serializer: StringSerializer{}, TTL: &StateTtlConfig{TTL: 1e9}})
					return err
				}},
			}
			for _, c := range conflicts {
				if err := c.get(); !errors.Is(err, ErrStateConflict) {
					t.Errorf("%s: err = %v, want ErrStateConflict", c.name, err)
				}
			}
			invalid := []struct {
				name string
				err  error
			}{
				{"empty name", func() error {
					_, err := GetValueState(b, ValueStateDescriptor[string]{Serializer: StringSerializer{}})
					return err
				}()},
				{"nil serializer", func() error {
					_, err := GetListState(b, ListStateDescriptor[string]{Name: "l"})
					return err
				}()},
				{"nil reduce", func() error {
					_, err := GetReducingState(b, ReducingStateDescriptor[int64]{Name: "r", Serializer: Int64Serializer{}})
					return err
				}()},
				{"zero ttl", func() error {
					_, err := GetMapState(b, MapStateDescriptor[string, string]{Name: "m", KeySerializer: StringSerializer{}, ValueSerializer: StringSerializer{}, TTL: &StateTtlConfig{}})
					return err
				}()},
				{"nil backend", func() error {
					_, err := GetValueState[string](nil, d)
					return err
				}()},
			}
			for _, c := range invalid {
				if c.err == nil {
					t.Errorf("%s: no error", c.name)
				}
			}
		})
	}
}

func TestKeyErrors(t *testing.T) {
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			cfg := testConfig(t, kind)
			cfg.KeyGroupRange = keygroup.Range{Start: 0, End: 63}
			b := open(t, cfg)
			s := must1(GetValueState(b, ValueStateDescriptor[int64]{Name: "v", Serializer: Int64Serializer{}}))(t)
			if b.CurrentKeyGroup() != -1 || b.CurrentKey() != nil {
				t.Fatalf("before SetCurrentKey: key group %d, key %q", b.CurrentKeyGroup(), b.CurrentKey())
			}
			if err := s.Update(1); !errors.Is(err, ErrNoCurrentKey) {
				t.Fatalf("Update without key: %v, want ErrNoCurrentKey", err)
			}
			var foreign []byte
			for i := uint64(0); foreign == nil; i++ {
				if keygroup.Assign(u64key(i), testMaxP) > 63 {
					foreign = u64key(i)
				}
			}
			b.SetCurrentKey(foreign)
			err := s.Update(1)
			var kgErr *KeyGroupError
			if !errors.Is(err, ErrKeyGroupOutOfRange) || !errors.As(err, &kgErr) || kgErr.KeyGroup != keygroup.Assign(foreign, testMaxP) {
				t.Fatalf("Update for a foreign key: %v", err)
			}
			must(t, b.Close())
			if _, _, err := s.Value(); !errors.Is(err, ErrClosed) {
				t.Fatalf("Value after Close: %v, want ErrClosed", err)
			}
			if _, err := b.CleanupStep(); !errors.Is(err, ErrClosed) {
				t.Fatalf("CleanupStep after Close: %v, want ErrClosed", err)
			}
			must(t, b.Close())
		})
	}
}

// reopen restores a backend: pebble reopens its dir, hashmap snapshots and
// restores. mod adjusts the config of the new backend.
func reopen(t *testing.T, b KeyedStateBackend, cfg BackendConfig, mod func(*BackendConfig)) (KeyedStateBackend, error) {
	t.Helper()
	if cfg.Kind == KindHashmap {
		dir := t.TempDir()
		must(t, b.(Snapshotter).Snapshot(dir))
		cfg.RestoreDir = dir
	}
	if cfg.Remote != nil {
		return reopenRemote(t, b, cfg, mod)
	}
	must(t, b.Close())
	if mod != nil {
		mod(&cfg)
	}
	nb, err := OpenBackend(cfg)
	if err == nil {
		t.Cleanup(func() { _ = nb.Close() })
	}
	return nb, err
}

func TestRestoreRoundTrip(t *testing.T) {
	for _, kind := range conformanceKinds {
		t.Run(kind, func(t *testing.T) {
			cfg := testConfig(t, kind)
			b := open(t, cfg)
			vd := ValueStateDescriptor[string]{Name: "v", Serializer: StringSerializer{}}
			ld := ListStateDescriptor[int64]{Name: "l", Serializer: Int64Serializer{}}
			md := MapStateDescriptor[string, []byte]{Name: "m", KeySerializer: StringSerializer{}, ValueSerializer: BytesSerializer{}}
			rd := ReducingStateDescriptor[float64]{Name: "r", Serializer: Float64Serializer{}, Reduce: func(a, b float64) (float64, error) { return a + b, nil }}
			write := func(b KeyedStateBackend) {
				v := must1(GetValueState(b, vd))(t)
				l := must1(GetListState(b, ld))(t)
				m := must1(GetMapState(b, md))(t)
				r := must1(GetReducingState(b, rd))(t)
				for i, k := range keys3 {
					b.SetCurrentKey([]byte(k))
					must(t, v.Update(k))
					must(t, l.AddAll([]int64{int64(i), int64(i * 10)}))
					must(t, m.Put(k, []byte{byte(i)}))
					must(t, r.Add(0.5))
				}
			}
			write(b)
			nb, err := reopen(t, b, cfg, nil)
			must(t, err)
			v := must1(GetValueState(nb, vd))(t)
			l := must1(GetListState(nb, ld))(t)
			m := must1(GetMapState(nb, md))(t)
			r := must1(GetReducingState(nb, rd))(t)
			for i, k := range keys3 {
				nb.SetCurrentKey([]byte(k))
				if got, _, err := v.Value(); err != nil || got != k {
					t.Fatalf("value under %s = %q, %v", k, got, err)
				}
				if got := collect(t, l.Get()); !slices.Equal(got, []int64{int64(i), int64(i * 10)}) {
					t.Fatalf("list under %s = %v", k, got)
				}
				if got, _, err := m.Get(k); err != nil || !slices.Equal(got, []byte{byte(i)}) {
					t.Fatalf("map under %s = %v, %v", k, got, err)
				}
				if got, _, err := r.Get(); err != nil || got != 0.5 {
					t.Fatalf("reducing under %s = %v, %v", k, got, err)
				}
			}
			// A new state after the restore gets a fresh id.
			n := must1(GetValueState(nb, ValueStateDescriptor[int64]{Name: "new", Serializer: Int64Serializer{}}))(t)
			nb.SetCurrentKey([]byte("alice"))
			must(t, n.Update(7))
			if got, _, _ := v.Value(); got != "alice" {
				t.Fatalf("old value clobbered by new state: %q", got)
			}
			// Max parallelism cannot change.
			_, err = reopen(t, nb, cfg, func(c *BackendConfig) {
				c.MaxParallelism = 256
				c.KeyGroupRange = keygroup.Range{Start: 0, End: 255}
			})
			if !errors.Is(err, ErrMaxParallelismChanged) {
				t.Fatalf("reopen with another max parallelism: %v, want ErrMaxParallelismChanged", err)
			}
		})
	}
}

func TestHashmapRestoreSkipsForeignKeyGroups(t *testing.T) {
	cfg := testConfig(t, KindHashmap)
	b := open(t, cfg)
	d := ValueStateDescriptor[int64]{Name: "v", Serializer: Int64Serializer{}}
	v := must1(GetValueState(b, d))(t)
	for i := range uint64(200) {
		b.SetCurrentKey(u64key(i))
		must(t, v.Update(int64(i)))
	}
	half := keygroup.Range{Start: 0, End: testMaxP/2 - 1}
	nb, err := reopen(t, b, cfg, func(c *BackendConfig) { c.KeyGroupRange = half })
	must(t, err)
	nv := must1(GetValueState(nb, d))(t)
	kept := 0
	for i := range uint64(200) {
		nb.SetCurrentKey(u64key(i))
		got, ok, err := nv.Value()
		if !half.Contains(nb.CurrentKeyGroup()) {
			if !errors.Is(err, ErrKeyGroupOutOfRange) {
				t.Fatalf("key %d of a foreign key group: %v", i, err)
			}
			continue
		}
		if err != nil || !ok || got != int64(i) {
			t.Fatalf("key %d = %d, %t, %v", i, got, ok, err)
		}
		kept++
	}
	if n := storedEntries(t, nb); n != kept {
		t.Fatalf("stored entries = %d, want %d", n, kept)
	}
}

func TestBackendConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  BackendConfig
		ok   bool
	}{
		{"hashmap", BackendConfig{Kind: KindHashmap, MaxParallelism: 128, KeyGroupRange: keygroup.Range{Start: 0, End: 127}}, true},
		{"unknown kind", BackendConfig{Kind: "rocksdb", MaxParallelism: 128, KeyGroupRange: keygroup.Range{Start: 0, End: 127}}, false},
		{"pebble without dir", BackendConfig{Kind: KindPebble, MaxParallelism: 128, KeyGroupRange: keygroup.Range{Start: 0, End: 127}}, false},
		{"pebble with restore dir", BackendConfig{Kind: KindPebble, Dir: "x", RestoreDir: "y", MaxParallelism: 128, KeyGroupRange: keygroup.Range{Start: 0, End: 127}}, false},
		{"range beyond max parallelism", BackendConfig{Kind: KindHashmap, MaxParallelism: 128, KeyGroupRange: keygroup.Range{Start: 64, End: 128}}, false},
		{"empty range", BackendConfig{Kind: KindHashmap, MaxParallelism: 128, KeyGroupRange: keygroup.Range{Start: 5, End: 4}}, false},
		{"zero max parallelism", BackendConfig{Kind: KindHashmap}, false},
		{"negative cleanup step", BackendConfig{Kind: KindHashmap, MaxParallelism: 128, KeyGroupRange: keygroup.Range{Start: 0, End: 127}, TTLCleanup: TTLCleanupConfig{EntriesPerStep: -1}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.cfg.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok=%t", err, tc.ok)
			}
		})
	}
}
