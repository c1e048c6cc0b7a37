package checkpoint

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/kstreamd/kstreamd/state"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// The keyed state of the rescale test: per key a value, a map and a list
// (the list exercises Pebble's merge operator across a restore).
var (
	rescaleValue = state.ValueStateDescriptor[int64]{Name: "value", Serializer: state.Int64Serializer{}}
	rescaleMap   = state.MapStateDescriptor[string, int64]{Name: "map", KeySerializer: state.StringSerializer{}, ValueSerializer: state.Int64Serializer{}}
	rescaleList  = state.ListStateDescriptor[int64]{Name: "list", Serializer: state.Int64Serializer{}}
)

const rescaleMaxP = 128

// rescaleKeys returns n keys covering every key group of rescaleMaxP.
func rescaleKeys(t *testing.T, n int) [][]byte {
	t.Helper()
	keys := make([][]byte, n)
	groups := map[int]bool{}
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "key-%05d", i)
		groups[keygroup.Assign(keys[i], rescaleMaxP)] = true
	}
	if len(groups) != rescaleMaxP {
		t.Fatalf("%d keys cover %d of %d key groups", n, len(groups), rescaleMaxP)
	}
	return keys
}

// subtaskConfig is the backend config of subtask i of p.
func subtaskConfig(kind, root string, stage, p, i int) state.BackendConfig {
	cfg := state.BackendConfig{Kind: kind, MaxParallelism: rescaleMaxP, KeyGroupRange: keygroup.RangeFor(rescaleMaxP, p, i)}
	if kind == state.KindPebble {
		cfg.Dir = filepath.Join(root, fmt.Sprintf("db-%d-%d-%d", stage, p, i))
	}
	return cfg
}

// fill writes every key's state into the backend owning it.
func fill(t *testing.T, backends []state.KeyedStateBackend, keys [][]byte) {
	t.Helper()
	p := len(backends)
	for i, k := range keys {
		b := backends[keygroup.SubtaskForKey(k, rescaleMaxP, p)]
		v, m, l := must3(t, b)
		b.SetCurrentKey(k)
		if err := v.Update(int64(i)); err != nil {
			t.Fatal(err)
		}
		if err := m.Put("i", int64(i)); err != nil {
			t.Fatal(err)
		}
		if err := m.Put("neg", -int64(i)); err != nil {
			t.Fatal(err)
		}
		if err := l.Add(int64(i)); err != nil {
			t.Fatal(err)
		}
		if err := l.Add(int64(i) + 1); err != nil {
			t.Fatal(err)
		}
	}
}

func must3(t *testing.T, b state.KeyedStateBackend) (state.ValueState[int64], state.MapState[string, int64], state.ListState[int64]) {
	t.Helper()
	v, err := state.GetValueState(b, rescaleValue)
	if err != nil {
		t.Fatal(err)
	}
	m, err := state.GetMapState(b, rescaleMap)
	if err != nil {
		t.Fatal(err)
	}
	l, err := state.GetListState(b, rescaleList)
	if err != nil {
		t.Fatal(err)
	}
	return v, m, l
}

// verify checks that every key's state is intact in the subtask owning its
// key group, and that each subtask holds exactly the keys it owns.
func verify(t *testing.T, backends []state.KeyedStateBackend, keys [][]byte) {
	t.Helper()
	p := len(backends)
	owned := make([]map[string]bool, p)
	for i := range owned {
		owned[i] = map[string]bool{}
	}
	for i, k := range keys {
		sub := keygroup.SubtaskForKey(k, rescaleMaxP, p)
		owned[sub][string(k)] = true
		b := backends[sub]
		v, m, l := must3(t, b)
		b.SetCurrentKey(k)
		got, ok, err := v.Value()
		if err != nil || !ok || got != int64(i) {
			t.Fatalf("p=%d subtask %d key %s: value %d (found %v, err %v), want %d", p, sub, k, got, ok, err, i)
		}
		entries := map[string]int64{}
		for e, err := range m.Entries() {
			if err != nil {
				t.Fatal(err)
			}
			entries[e.Key] = e.Value
		}
		if want := map[string]int64{"i": int64(i), "neg": -int64(i)}; !maps.Equal(entries, want) {
			t.Fatalf("p=%d key %s: map %v, want %v", p, k, entries, want)
		}
		var list []int64
		for e, err := range l.Get() {
			if err != nil {
				t.Fatal(err)
			}
			list = append(list, e)
		}
		if !slices.Equal(list, []int64{int64(i), int64(i) + 1}) {
			t.Fatalf("p=%d key %s: list %v, want [%d %d]", p, k, list, i, i+1)
		}
	}
	for i, b := range backends {
		if r := b.KeyGroupRange(); r != keygroup.RangeFor(rescaleMaxP, p, i) {
			t.Fatalf("p=%d subtask %d owns %v", p, i, r)
		}
		held := map[string]bool{}
		err := state.ApplyToAllKeys(b, rescaleMap, func(key []byte, _ state.MapState[string, int64]) error {
			if held[string(key)] {
				return fmt.Errorf("key %s listed twice", key)
			}
			held[string(key)] = true
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(held, owned[i]) {
			t.Fatalf("p=%d subtask %d holds %d keys, owns %d", p, i, len(held), len(owned[i]))
		}
	}
}

// snapshotAll snapshots every subtask into dir (and shared, when not "")
// and returns their task states as the metadata would carry them.
func snapshotAll(t *testing.T, backends []state.KeyedStateBackend, dir, shared string) []TaskState {
	t.Helper()
	out := make([]TaskState, len(backends))
	for i, b := range backends {
		finish, err := state.SnapshotKeyed(b, state.SnapshotTarget{Dir: dir, TaskPath: fmt.Sprintf("op/%d", i), SharedDir: shared})
		if err != nil {
			t.Fatal(err)
		}
		ks, err := finish(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		r := b.KeyGroupRange()
		out[i] = TaskState{KeyGroups: &r, Keyed: ks.Handle}
	}
	return out
}

// restoreAt opens p subtasks from old through RedistributeKeyed.
func restoreAt(t *testing.T, kind, root string, stage int, old []TaskState, dir, shared string, p int) []state.KeyedStateBackend {
	t.Helper()
	out := make([]state.KeyedStateBackend, p)
	for i, hs := range RedistributeKeyed(old, rescaleMaxP, p) {
		var handles []state.RestoreHandle
		for _, h := range hs {
			handles = append(handles, state.RestoreHandle{Handle: h.Handle, Dir: dir, SharedDir: shared})
		}
		b, err := state.OpenBackendRestored(subtaskConfig(kind, root, stage, p, i), handles)
		if err != nil {
			t.Fatalf("restore subtask %d of %d: %v", i, p, err)
		}
		out[i] = b
	}
	return out
}

func closeAll(t *testing.T, backends []state.KeyedStateBackend) {
	t.Helper()
	for _, b := range backends {
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// rawKeyGroups opens a closed Pebble backend's directory read-only and
// returns the key groups of every stored state entry (metadata excluded).
func rawKeyGroups(t *testing.T, dir string) map[int]int {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{ReadOnly: true, Logger: quietPebble{t}, Merger: &pebble.Merger{
		Name: "kstreamd.list_append.v1", // the backend's merger, recorded in the DB
		Merge: func(_, v []byte) (pebble.ValueMerger, error) {
			return &concatMerger{append([]byte(nil), v...)}, nil
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	it, err := db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	groups := map[int]int{}
	for it.First(); it.Valid(); it.Next() {
		if k := it.Key(); k[0] != 0xFF {
			groups[int(binary.BigEndian.Uint16(k))]++
		}
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return groups
}

// quietPebble drops Pebble's info logs and fails the test on errors.
type quietPebble struct{ t *testing.T }

func (quietPebble) Infof(string, ...any)                {}
func (q quietPebble) Errorf(format string, args ...any) { q.t.Errorf("pebble: "+format, args...) }
func (q quietPebble) Fatalf(format string, args ...any) { q.t.Fatalf("pebble: "+format, args...) }

type concatMerger struct{ b []byte }

func (m *concatMerger) MergeNewer(v []byte) error { m.b = append(m.b, v...); return nil }
func (m *concatMerger) MergeOlder(v []byte) error {
	m.b = append(append([]byte(nil), v...), m.b...)
	return nil
}
func (m *concatMerger) Finish(bool) ([]byte, io.Closer, error) { return m.b, nil, nil }

// TestRescaleKeyedState is the rescale acceptance for keyed state:
// two subtasks' backends are snapshotted and restored at 3, then 1, then 4
// (through RedistributeKeyed and OpenBackendRestored): every key's value,
// map and list are intact and present in exactly the subtask owning its key
// group. Pebble snapshots alternate between self-contained and incremental
// (shared files), and a restored Pebble DB holds no entry outside its range.
func TestRescaleKeyedState(t *testing.T) {
	keys := rescaleKeys(t, 3000)
	for _, kind := range []string{state.KindPebble, state.KindHashmap} {
		t.Run(kind, func(t *testing.T) {
			root := t.TempDir()
			shared := filepath.Join(root, "shared")
			backends := make([]state.KeyedStateBackend, 2)
			for i := range backends {
				b, err := state.OpenBackend(subtaskConfig(kind, root, 0, 2, i))
				if err != nil {
					t.Fatal(err)
				}
				backends[i] = b
			}
			fill(t, backends, keys)
			verify(t, backends, keys)
			for stage, p := range []int{3, 1, 4} {
				stage++
				dir := filepath.Join(root, fmt.Sprintf("chk-%d", stage))
				sh := ""
				if kind == state.KindPebble && stage%2 == 1 {
					sh = shared
				}
				old := snapshotAll(t, backends, dir, sh)
				closeAll(t, backends)
				backends = restoreAt(t, kind, root, stage, old, dir, shared, p)
				verify(t, backends, keys)
				if kind == state.KindPebble {
					closeAll(t, backends)
					for i := range p {
						r := keygroup.RangeFor(rescaleMaxP, p, i)
						for kg := range rawKeyGroups(t, subtaskConfig(kind, root, stage, p, i).Dir) {
							if !r.Contains(kg) {
								t.Fatalf("p=%d subtask %d (%v) stores entries of key group %d", p, i, r, kg)
							}
						}
					}
					// Reopen: the restored directory is a plain DB.
					for i := range backends {
						b, err := state.OpenBackend(subtaskConfig(kind, root, stage, p, i))
						if err != nil {
							t.Fatal(err)
						}
						backends[i] = b
					}
					verify(t, backends, keys)
				}
			}
			closeAll(t, backends)
		})
	}
}
