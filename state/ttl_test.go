package state

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"
)

// ttlProbe writes and reads one entry of one state shape with TTL: a value,
// a list element or a map entry, under the current key.
type ttlProbe struct {
	write func() error
	read  func() (present bool, err error)
}

var ttlShapes = []struct {
	name string
	open func(t *testing.T, b KeyedStateBackend, ttl *StateTtlConfig) ttlProbe
}{
	{"value", func(t *testing.T, b KeyedStateBackend, ttl *StateTtlConfig) ttlProbe {
		s := must1(GetValueState(b, ValueStateDescriptor[string]{Name: "s", Serializer: StringSerializer{}, TTL: ttl}))(t)
		return ttlProbe{
			write: func() error { return s.Update("v") },
			read: func() (bool, error) {
				v, ok, err := s.Value()
				if ok && v != "v" {
					return ok, fmt.Errorf("value %q", v)
				}
				return ok, err
			},
		}
	}},
	{"list element", func(t *testing.T, b KeyedStateBackend, ttl *StateTtlConfig) ttlProbe {
		s := must1(GetListState(b, ListStateDescriptor[string]{Name: "s", Serializer: StringSerializer{}, TTL: ttl}))(t)
		return ttlProbe{
			write: func() error { return s.Add("v") },
			read: func() (bool, error) {
				var got []string
				for v, err := range s.Get() {
					if err != nil {
						return false, err
					}
					got = append(got, v)
				}
				if len(got) > 1 || len(got) == 1 && got[0] != "v" {
					return true, fmt.Errorf("list %q", got)
				}
				return len(got) == 1, nil
			},
		}
	}},
	{"map entry", func(t *testing.T, b KeyedStateBackend, ttl *StateTtlConfig) ttlProbe {
		s := must1(GetMapState(b, MapStateDescriptor[string, string]{Name: "s", KeySerializer: StringSerializer{}, ValueSerializer: StringSerializer{}, TTL: ttl}))(t)
		return ttlProbe{
			write: func() error { return s.Put("k", "v") },
			read: func() (bool, error) {
				v, ok, err := s.Get("k")
				if ok && v != "v" {
					return ok, fmt.Errorf("entry %q", v)
				}
				return ok, err
			},
		}
	}},
}

// ttlStep is one step of a TTL case at a fake-clock time.
type ttlStep struct {
	at     time.Duration
	op     string // "write", "read", "cleanup"
	want   bool   // read: whether the entry is returned
	stored int    // after the step: stored entries, -1 to skip the check
}

const ms = time.Millisecond

func TestTTL(t *testing.T) {
	cases := []struct {
		name       string
		update     UpdateType
		visibility StateVisibility
		steps      []ttlStep
	}{
		{"OnCreateAndWrite read does not extend", OnCreateAndWrite, NeverReturnExpired, []ttlStep{
			{0, "write", false, 1},
			{500 * ms, "read", true, 1},
			{1400 * ms, "read", false, 0},
		}},
		{"OnReadAndWrite read extends", OnReadAndWrite, NeverReturnExpired, []ttlStep{
			{0, "write", false, 1},
			{500 * ms, "read", true, 1},
			{1400 * ms, "read", true, 1},
			{2399 * ms, "read", true, 1},  // 0.999s after the refresh at 1.4s
			{3899 * ms, "read", false, 0}, // 1.5s after the refresh at 2.399s
		}},
		{"OnReadAndWrite 1.5s after the last refresh", OnReadAndWrite, NeverReturnExpired, []ttlStep{
			{0, "write", false, 1},
			{500 * ms, "read", true, 1},
			{1400 * ms, "read", true, 1},
			{2900 * ms, "read", false, 0},
		}},
		{"expiry is at exactly TTL", OnCreateAndWrite, NeverReturnExpired, []ttlStep{
			{0, "write", false, 1},
			{999 * ms, "read", true, 1},
			{1000 * ms, "read", false, 0},
		}},
		{"NeverReturnExpired at 1.5s", OnCreateAndWrite, NeverReturnExpired, []ttlStep{
			{0, "write", false, 1},
			{1500 * ms, "read", false, 0},
			{1500 * ms, "read", false, 0},
		}},
		{"ReturnExpiredIfNotCleanedUp until the read cleans it", OnCreateAndWrite, ReturnExpiredIfNotCleanedUp, []ttlStep{
			{0, "write", false, 1},
			{500 * ms, "read", true, 1},
			{1500 * ms, "read", true, 0},
			{1500 * ms, "read", false, 0},
		}},
		{"ReturnExpiredIfNotCleanedUp until background cleanup", OnCreateAndWrite, ReturnExpiredIfNotCleanedUp, []ttlStep{
			{0, "write", false, 1},
			{1500 * ms, "cleanup", false, 0},
			{1500 * ms, "read", false, 0},
		}},
		{"ReturnExpiredIfNotCleanedUp with OnReadAndWrite", OnReadAndWrite, ReturnExpiredIfNotCleanedUp, []ttlStep{
			{0, "write", false, 1},
			{500 * ms, "read", true, 1},
			{1400 * ms, "read", true, 1},
			{2900 * ms, "read", true, 0},
			{2900 * ms, "read", false, 0},
		}},
		{"a write refreshes", OnCreateAndWrite, NeverReturnExpired, []ttlStep{
			{0, "write", false, 1},
			{900 * ms, "write", false, 1},
			{1400 * ms, "read", true, 1},
			{1500 * ms, "cleanup", false, 1},
			{1900 * ms, "read", false, 0},
		}},
		{"cleanup leaves unexpired entries", OnCreateAndWrite, NeverReturnExpired, []ttlStep{
			{0, "write", false, 1},
			{999 * ms, "cleanup", false, 1},
			{999 * ms, "read", true, 1},
			{1000 * ms, "cleanup", false, 0},
		}},
	}
	for _, kind := range backendKinds {
		for _, shape := range ttlShapes {
			for _, tc := range cases {
				t.Run(kind+"/"+shape.name+"/"+tc.name, func(t *testing.T) {
					clock := newFakeClock()
					cfg := testConfig(t, kind)
					cfg.Clock = clock
					b := open(t, cfg)
					p := shape.open(t, b, &StateTtlConfig{TTL: time.Second, UpdateType: tc.update, Visibility: tc.visibility})
					b.SetCurrentKey([]byte("k1"))
					for i, st := range tc.steps {
						clock.at(st.at)
						switch st.op {
						case "write":
							must(t, p.write())
						case "read":
							got, err := p.read()
							if err != nil || got != st.want {
								t.Fatalf("step %d: read at %v = %t, %v; want %t", i, st.at, got, err, st.want)
							}
						case "cleanup":
							must1(b.CleanupStep())(t)
						}
						if n := storedEntries(t, b); st.stored >= 0 && n != st.stored {
							t.Fatalf("step %d (%s at %v): stored entries = %d, want %d", i, st.op, st.at, n, st.stored)
						}
					}
				})
			}
		}
	}
}

// TestTTLPerEntry checks that list elements and map entries written at
// different times expire independently.
func TestTTLPerEntry(t *testing.T) {
	for _, kind := range backendKinds {
		for _, vis := range []StateVisibility{NeverReturnExpired, ReturnExpiredIfNotCleanedUp} {
			t.Run(kind+"/"+vis.String(), func(t *testing.T) {
				clock := newFakeClock()
				cfg := testConfig(t, kind)
				cfg.Clock = clock
				b := open(t, cfg)
				ttl := &StateTtlConfig{TTL: time.Second, Visibility: vis}
				l := must1(GetListState(b, ListStateDescriptor[string]{Name: "l", Serializer: StringSerializer{}, TTL: ttl}))(t)
				m := must1(GetMapState(b, MapStateDescriptor[string, int64]{Name: "m", KeySerializer: StringSerializer{}, ValueSerializer: Int64Serializer{}, TTL: ttl}))(t)
				b.SetCurrentKey([]byte("k"))
				clock.at(0)
				must(t, l.Add("a"))
				must(t, m.Put("a", 1))
				clock.at(600 * ms)
				must(t, l.AddAll([]string{"b", "c"}))
				must(t, m.PutAll(maps.All(map[string]int64{"b": 2, "c": 3})))
				clock.at(900 * ms)
				if got := collect(t, l.Get()); !slices.Equal(got, []string{"a", "b", "c"}) {
					t.Fatalf("list at 0.9s = %q", got)
				}
				clock.at(1200 * ms)
				wantList := []string{"b", "c"}
				wantMap := map[string]int64{"b": 2, "c": 3}
				if vis == ReturnExpiredIfNotCleanedUp {
					wantList = []string{"a", "b", "c"}
				}
				if got := collect(t, l.Get()); !slices.Equal(got, wantList) {
					t.Fatalf("list at 1.2s = %q, want %q", got, wantList)
				}
				if got := collect(t, l.Get()); !slices.Equal(got, []string{"b", "c"}) {
					t.Fatalf("list read again at 1.2s = %q, want [b c]", got)
				}
				if v, ok, err := m.Get("a"); err != nil || ok != (vis == ReturnExpiredIfNotCleanedUp) || ok && v != 1 {
					t.Fatalf("map a at 1.2s = %d, %t, %v", v, ok, err)
				}
				got := map[string]int64{}
				for e, err := range m.Entries() {
					must(t, err)
					got[e.Key] = e.Value
				}
				if !maps.Equal(got, wantMap) {
					t.Fatalf("map at 1.2s = %v, want %v", got, wantMap)
				}
				if n := storedEntries(t, b); n != 3 { // the list, map b, map c
					t.Fatalf("stored entries at 1.2s = %d, want 3", n)
				}
				clock.at(1600 * ms)
				if got := collect(t, l.Get()); len(got) != 0 && vis == NeverReturnExpired {
					t.Fatalf("list at 1.6s = %q", got)
				}
				if got := collect(t, m.Keys()); len(got) != 0 && vis == NeverReturnExpired {
					t.Fatalf("map keys at 1.6s = %q", got)
				}
				if empty := must1(m.IsEmpty())(t); !empty {
					t.Fatal("map not empty at 1.6s")
				}
				if n := storedEntries(t, b); n != 0 {
					t.Fatalf("stored entries at 1.6s = %d, want 0", n)
				}
			})
		}
	}
}

// TestTTLReducingAggregating checks TTL on the folding states: an expired
// accumulator counts as absent for Add.
func TestTTLReducingAggregating(t *testing.T) {
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			clock := newFakeClock()
			cfg := testConfig(t, kind)
			cfg.Clock = clock
			b := open(t, cfg)
			ttl := &StateTtlConfig{TTL: time.Second, Visibility: ReturnExpiredIfNotCleanedUp}
			r := must1(GetReducingState(b, ReducingStateDescriptor[int64]{Name: "r", Serializer: Int64Serializer{}, TTL: ttl,
				Reduce: func(a, b int64) (int64, error) { return a + b, nil }}))(t)
			a := must1(GetAggregatingState(b, AggregatingStateDescriptor[float64, avgAcc, float64]{Name: "a", Aggregate: avgFunc{}, AccSerializer: JSONSerializer[avgAcc]{}, TTL: ttl}))(t)
			b.SetCurrentKey([]byte("k"))
			must(t, r.Add(1))
			must(t, a.Add(10))
			clock.at(800 * ms)
			must(t, r.Add(2))
			must(t, a.Add(20))
			clock.at(1700 * ms) // 0.9s after the last write: still there
			if v, ok, err := r.Get(); err != nil || !ok || v != 3 {
				t.Fatalf("reducing at 1.7s = %d, %t, %v", v, ok, err)
			}
			if v, ok, err := a.Get(); err != nil || !ok || v != 15 {
				t.Fatalf("aggregating at 1.7s = %v, %t, %v", v, ok, err)
			}
			clock.at(2000 * ms) // expired: Add starts afresh even though the visibility would return it
			must(t, r.Add(5))
			must(t, a.Add(1))
			if v, ok, err := r.Get(); err != nil || !ok || v != 5 {
				t.Fatalf("reducing after expiry = %d, %t, %v", v, ok, err)
			}
			if v, ok, err := a.Get(); err != nil || !ok || v != 1 {
				t.Fatalf("aggregating after expiry = %v, %t, %v", v, ok, err)
			}
		})
	}
}

// TestTTLBackgroundCleanup checks that bounded cleanup steps bring the
// stored entry count to zero for expired keys nobody reads, leave state
// without TTL alone, and do nothing when disabled.
func TestTTLBackgroundCleanup(t *testing.T) {
	const nkeys = 300
	const perStep = 50
	for _, kind := range backendKinds {
		for _, disabled := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/disabled=%t", kind, disabled), func(t *testing.T) {
				clock := newFakeClock()
				cfg := testConfig(t, kind)
				cfg.Clock = clock
				cfg.TTLCleanup = TTLCleanupConfig{Disabled: disabled, EntriesPerStep: perStep}
				b := open(t, cfg)
				ttl := &StateTtlConfig{TTL: time.Second}
				v := must1(GetValueState(b, ValueStateDescriptor[int64]{Name: "v", Serializer: Int64Serializer{}, TTL: ttl}))(t)
				l := must1(GetListState(b, ListStateDescriptor[int64]{Name: "l", Serializer: Int64Serializer{}, TTL: ttl}))(t)
				m := must1(GetMapState(b, MapStateDescriptor[int64, int64]{Name: "m", KeySerializer: Int64Serializer{}, ValueSerializer: Int64Serializer{}, TTL: ttl}))(t)
				keep := must1(GetValueState(b, ValueStateDescriptor[int64]{Name: "keep", Serializer: Int64Serializer{}}))(t)
				noBG := must1(GetValueState(b, ValueStateDescriptor[int64]{Name: "nobg", Serializer: Int64Serializer{},
					TTL: &StateTtlConfig{TTL: time.Second, DisableCleanupInBackground: true}}))(t)
				for i := range int64(nkeys) {
					b.SetCurrentKey(u64key(uint64(i)))
					must(t, v.Update(i))
					must(t, l.AddAll([]int64{i, i}))
					must(t, m.Put(1, i))
					must(t, m.Put(2, i))
					must(t, keep.Update(i))
					must(t, noBG.Update(i))
				}
				// One key gets a fresh list element and map entry later.
				clock.at(800 * ms)
				b.SetCurrentKey(u64key(0))
				must(t, l.Add(-1))
				must(t, m.Put(3, -1))
				if n := storedEntries(t, b); n != nkeys*6+1 {
					t.Fatalf("stored entries = %d, want %d", n, nkeys*6+1)
				}
				clock.at(1500 * ms)
				total, steps := 0, 0
				for ; steps < 1000; steps++ {
					n, err := b.CleanupStep()
					must(t, err)
					if n > perStep {
						t.Fatalf("step %d removed %d entries, more than the %d per step", steps, n, perStep)
					}
					total += n
					if n == 0 && storedEntries(t, b) == 3*nkeys+2 {
						break
					}
					if disabled && steps > 3 {
						break
					}
				}
				if disabled {
					if total != 0 || storedEntries(t, b) != nkeys*6+1 {
						t.Fatalf("disabled cleanup removed %d entries", total)
					}
					return
				}
				// Left: keep and nobg (no TTL / no background cleanup), key 0's list and map entry 3.
				if n := storedEntries(t, b); n != 2*nkeys+2 {
					t.Fatalf("after %d steps: stored entries = %d, want %d", steps, n, 2*nkeys+2)
				}
				if total != 4*nkeys-1 {
					t.Fatalf("removed %d entries, want %d", total, 4*nkeys-1)
				}
				if steps < (4*nkeys)/perStep {
					t.Fatalf("cleanup took %d steps, fewer than the budget allows", steps)
				}
				if got := collect(t, l.Get()); !slices.Equal(got, []int64{-1}) {
					t.Fatalf("key 0's list after cleanup = %v, want [-1]", got)
				}
				if got := collect(t, m.Keys()); !slices.Equal(got, []int64{3}) {
					t.Fatalf("key 0's map after cleanup = %v, want [3]", got)
				}
			})
		}
	}
}

func TestTTLCleanupInterval(t *testing.T) {
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			clock := newFakeClock()
			cfg := testConfig(t, kind)
			cfg.Clock = clock
			cfg.TTLCleanup = TTLCleanupConfig{Interval: time.Second}
			b := open(t, cfg)
			v := must1(GetValueState(b, ValueStateDescriptor[int64]{Name: "v", Serializer: Int64Serializer{}, TTL: &StateTtlConfig{TTL: time.Second}}))(t)
			b.SetCurrentKey([]byte("a"))
			must(t, v.Update(1))
			steps := []struct {
				at   time.Duration
				want int
			}{{500 * ms, 0}, {1100 * ms, 0}, {1500 * ms, 1}}
			for _, st := range steps {
				clock.at(st.at)
				if n := must1(b.CleanupStep())(t); n != st.want {
					t.Fatalf("CleanupStep at %v removed %d, want %d", st.at, n, st.want)
				}
			}
		})
	}
}

// TestStateMigration checks that restoring state written without TTL into a
// TTL descriptor, and the reverse, or as another state type, fails with the
// state-migration error naming the state.
func TestStateMigration(t *testing.T) {
	ttl := &StateTtlConfig{TTL: time.Hour}
	type shape struct {
		name  string
		write func(t *testing.T, b KeyedStateBackend, ttl *StateTtlConfig)
		get   func(b KeyedStateBackend, ttl *StateTtlConfig) error
	}
	shapes := []shape{
		{"value",
			func(t *testing.T, b KeyedStateBackend, ttl *StateTtlConfig) {
				must(t, must1(GetValueState(b, ValueStateDescriptor[int64]{Name: "orders", Serializer: Int64Serializer{}, TTL: ttl}))(t).Update(1))
			},
			func(b KeyedStateBackend, ttl *StateTtlConfig) error {
				_, err := GetValueState(b, ValueStateDescriptor[int64]{Name: "orders", Serializer: Int64Serializer{}, TTL: ttl})
				return err
			}},
		{"list",
			func(t *testing.T, b KeyedStateBackend, ttl *StateTtlConfig) {
				must(t, must1(GetListState(b, ListStateDescriptor[int64]{Name: "orders", Serializer: Int64Serializer{}, TTL: ttl}))(t).Add(1))
			},
			func(b KeyedStateBackend, ttl *StateTtlConfig) error {
				_, err := GetListState(b, ListStateDescriptor[int64]{Name: "orders", Serializer: Int64Serializer{}, TTL: ttl})
				return err
			}},
		{"map",
			func(t *testing.T, b KeyedStateBackend, ttl *StateTtlConfig) {
				must(t, must1(GetMapState(b, MapStateDescriptor[string, int64]{Name: "orders", KeySerializer: StringSerializer{}, ValueSerializer: Int64Serializer{}, TTL: ttl}))(t).Put("x", 1))
			},
			func(b KeyedStateBackend, ttl *StateTtlConfig) error {
				_, err := GetMapState(b, MapStateDescriptor[string, int64]{Name: "orders", KeySerializer: StringSerializer{}, ValueSerializer: Int64Serializer{}, TTL: ttl})
				return err
			}},
	}
	for _, kind := range backendKinds {
		for _, sh := range shapes {
			for _, dir := range []struct {
				name            string
				written, wanted *StateTtlConfig
				stored, req     string
			}{
				{"without ttl into ttl", nil, ttl, "disabled", "enabled"},
				{"ttl into without ttl", ttl, nil, "enabled", "disabled"},
			} {
				t.Run(kind+"/"+sh.name+"/"+dir.name, func(t *testing.T) {
					cfg := testConfig(t, kind)
					b := open(t, cfg)
					b.SetCurrentKey([]byte("k"))
					sh.write(t, b, dir.written)
					nb, err := reopen(t, b, cfg, nil)
					must(t, err)
					err = sh.get(nb, dir.wanted)
					var me *StateMigrationError
					if !errors.Is(err, ErrStateMigration) || !errors.As(err, &me) {
						t.Fatalf("err = %v, want a *StateMigrationError", err)
					}
					want := StateMigrationError{State: "orders", Property: "ttl", Stored: dir.stored, Requested: dir.req}
					if *me != want {
						t.Fatalf("err = %+v, want %+v", *me, want)
					}
					msg := err.Error()
					for _, s := range []string{`"orders"`, "ttl", dir.stored, dir.req} {
						if !contains(msg, s) {
							t.Fatalf("message %q lacks %q", msg, s)
						}
					}
					// The matching descriptor still works.
					if err := sh.get(nb, dir.written); err != nil {
						t.Fatalf("matching descriptor after refusal: %v", err)
					}
				})
			}
		}
		t.Run(kind+"/type change", func(t *testing.T) {
			cfg := testConfig(t, kind)
			b := open(t, cfg)
			b.SetCurrentKey([]byte("k"))
			shapes[0].write(t, b, nil)
			nb, err := reopen(t, b, cfg, nil)
			must(t, err)
			var me *StateMigrationError
			if err := shapes[1].get(nb, nil); !errors.As(err, &me) || me.Property != "type" || me.Stored != "value" || me.Requested != "list" {
				t.Fatalf("err = %v, want a type migration error", err)
			}
		})
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// TestSnapshotDropsExpired checks that a hashmap full snapshot leaves out
// expired entries.
func TestSnapshotDropsExpired(t *testing.T) {
	clock := newFakeClock()
	cfg := testConfig(t, KindHashmap)
	cfg.Clock = clock
	b := open(t, cfg)
	d := ListStateDescriptor[string]{Name: "l", Serializer: StringSerializer{}, TTL: &StateTtlConfig{TTL: time.Second}}
	l := must1(GetListState(b, d))(t)
	b.SetCurrentKey([]byte("old"))
	must(t, l.Add("x"))
	b.SetCurrentKey([]byte("mixed"))
	must(t, l.Add("x"))
	clock.at(700 * ms)
	must(t, l.Add("y"))
	clock.at(1200 * ms)
	nb, err := reopen(t, b, cfg, nil)
	must(t, err)
	if n := storedEntries(t, nb); n != 1 {
		t.Fatalf("restored entries = %d, want 1", n)
	}
	nl := must1(GetListState(nb, d))(t)
	nb.SetCurrentKey([]byte("mixed"))
	if got := collect(t, nl.Get()); !slices.Equal(got, []string{"y"}) {
		t.Fatalf("restored list = %q, want [y]", got)
	}
}

func TestStateTtlConfigValidate(t *testing.T) {
	tests := []struct {
		cfg StateTtlConfig
		ok  bool
	}{
		{StateTtlConfig{TTL: time.Second}, true},
		{StateTtlConfig{TTL: time.Millisecond, UpdateType: OnReadAndWrite, Visibility: ReturnExpiredIfNotCleanedUp}, true},
		{StateTtlConfig{TTL: time.Microsecond}, false},
		{StateTtlConfig{TTL: time.Second, UpdateType: 7}, false},
		{StateTtlConfig{TTL: time.Second, Visibility: -1}, false},
	}
	for _, tc := range tests {
		if err := tc.cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("Validate(%+v) = %v, want ok=%t", tc.cfg, err, tc.ok)
		}
	}
}
