package state

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kstreamd/kstreamd/state/keygroup"
)

// nowalModel is the expected content of the three states of
// TestPebbleNoWALSnapshotsCarryMemtable: per key a value (absent when not
// in vals), a list and a map.
type nowalModel struct {
	vals  map[uint64][]byte
	lists map[uint64][]int64
	maps  map[uint64]map[int64]int64
}

func (m nowalModel) clone() nowalModel {
	c := nowalModel{vals: map[uint64][]byte{}, lists: map[uint64][]int64{}, maps: map[uint64]map[int64]int64{}}
	for k, v := range m.vals {
		c.vals[k] = slices.Clone(v)
	}
	for k, v := range m.lists {
		c.lists[k] = slices.Clone(v)
	}
	for k, v := range m.maps {
		c.maps[k] = maps.Clone(v)
	}
	return c
}

var (
	nowalVal  = ValueStateDescriptor[[]byte]{Name: "v", Serializer: BytesSerializer{}}
	nowalList = ListStateDescriptor[int64]{Name: "l", Serializer: Int64Serializer{}}
	nowalMap  = MapStateDescriptor[int64, int64]{Name: "m", KeySerializer: Int64Serializer{}, ValueSerializer: Int64Serializer{}}
)

// TestPebbleNoWALSnapshotsCarryMemtable attacks the NoSync DB's missing
// WAL (Pebble's DisableWAL): every checkpoint is taken right after writes
// that are only in the write cache and the memtable (no SST, no WAL holds
// them), with value, list (merge operands) and map state, deletes, an
// empty value and a value larger than half a memtable (Pebble's flushable
// batch), while the MANIFEST is rotated at nearly every edit and the
// checkpoints share SSTs. The source DB's directory is then wiped (as a
// job's scratch directory is after a failure) and every checkpoint must
// restore its exact state: whole, and split over two subtasks (rescale);
// and a DB restored from one, written again and checkpointed with its
// latest writes still in its memtable, restores exactly too. With and
// without the write cache.
func TestPebbleNoWALSnapshotsCarryMemtable(t *testing.T) {
	prev := maxManifestBytes
	maxManifestBytes = 1 // a new MANIFEST at (nearly) every edit
	defer func() { maxManifestBytes = prev }()
	for _, cacheBytes := range []int{0, -1} {
		t.Run(fmt.Sprint("cache=", cacheBytes), func(t *testing.T) {
			root := t.TempDir()
			shared := filepath.Join(root, "shared")
			cfg := testConfig(t, KindPebble)
			cfg.NoSync, cfg.WriteCacheBytes = true, cacheBytes
			b, err := OpenBackend(cfg)
			must(t, err)
			model := nowalModel{vals: map[uint64][]byte{}, lists: map[uint64][]int64{}, maps: map[uint64]map[int64]int64{}}
			huge := bytes.Repeat([]byte("h"), 3<<20) // > half of Pebble's 4 MiB memtable
			const keys, rounds = 200, 4
			type chk struct {
				dir   string
				snap  KeyedSnapshot
				model nowalModel
			}
			var chks []chk
			for r := range rounds {
				write(t, b, &model, r, keys, huge)
				dir := filepath.Join(root, fmt.Sprint("chk-", r))
				ks := snapshotTo(t, b, SnapshotTarget{Dir: dir, TaskPath: "op/0", SharedDir: shared, NoSync: true})
				chks = append(chks, chk{dir, ks, model.clone()})
			}
			write(t, b, &model, rounds, keys, huge) // never checkpointed
			must(t, b.Close())
			must(t, os.RemoveAll(cfg.Dir)) // the job clears its scratch directory
			for i, c := range chks {
				rh := []RestoreHandle{{Handle: c.snap.Handle, Dir: c.dir, SharedDir: shared}}
				rcfg := testConfig(t, KindPebble)
				rcfg.NoSync, rcfg.WriteCacheBytes = true, cacheBytes
				r, err := OpenBackendRestored(rcfg, rh)
				must(t, err)
				checkNowal(t, fmt.Sprint("chk-", i), r, c.model, keys, rcfg.KeyGroupRange)
				if i == len(chks)-1 { // write on, checkpoint the memtable, restore that
					m := c.model.clone()
					write(t, r, &m, 100+i, keys, huge)
					dir := filepath.Join(root, "chk-again")
					ks := snapshotTo(t, r, SnapshotTarget{Dir: dir, TaskPath: "op/0", SharedDir: shared, NoSync: true})
					must(t, r.Close())
					must(t, os.RemoveAll(rcfg.Dir))
					rcfg2 := testConfig(t, KindPebble)
					rcfg2.NoSync = true
					r2, err := OpenBackendRestored(rcfg2, []RestoreHandle{{Handle: ks.Handle, Dir: dir, SharedDir: shared}})
					must(t, err)
					checkNowal(t, "chk-again", r2, m, keys, rcfg2.KeyGroupRange)
					must(t, r2.Close())
				} else {
					must(t, r.Close())
				}
				for half := range 2 { // rescale to two subtasks
					hcfg := testConfig(t, KindPebble)
					hcfg.NoSync, hcfg.WriteCacheBytes = true, cacheBytes
					hcfg.KeyGroupRange = keygroup.RangeFor(testMaxP, 2, half)
					h, err := OpenBackendRestored(hcfg, rh)
					must(t, err)
					checkNowal(t, fmt.Sprintf("chk-%d half %d", i, half), h, c.model, keys, hcfg.KeyGroupRange)
					must(t, h.Close())
				}
			}
		})
	}
}

// write applies round r's changes to b and to model: a value for a third
// of the keys (empty for some, removed for others, the huge one for one
// key), a list element for another third, and map puts and removes.
func write(t *testing.T, b KeyedStateBackend, model *nowalModel, r, keys int, huge []byte) {
	t.Helper()
	v := must1(GetValueState(b, nowalVal))(t)
	l := must1(GetListState(b, nowalList))(t)
	m := must1(GetMapState(b, nowalMap))(t)
	for k := range keys {
		key := uint64(k)
		b.SetCurrentKey(u64key(key))
		switch (k + r) % 3 {
		case 0:
			switch {
			case k == r*7 && r%2 == 1:
				must(t, v.Update(huge))
				model.vals[key] = huge
			case k%5 == 0:
				must(t, v.Update([]byte{}))
				model.vals[key] = []byte{}
			case k%7 == 0:
				must(t, v.Clear())
				delete(model.vals, key)
			default:
				val := fmt.Appendf(nil, "r%d-k%d", r, k)
				must(t, v.Update(val))
				model.vals[key] = val
			}
		case 1:
			must(t, l.Add(int64(r*1000+k)))
			model.lists[key] = append(model.lists[key], int64(r*1000+k))
		case 2:
			mk := int64(r % 4)
			must(t, m.Put(mk, int64(r*10+k)))
			if model.maps[key] == nil {
				model.maps[key] = map[int64]int64{}
			}
			model.maps[key][mk] = int64(r*10 + k)
			if r%2 == 1 {
				must(t, m.Remove(int64((r+2)%4)))
				delete(model.maps[key], int64((r+2)%4))
			}
		}
	}
}

// checkNowal checks that b holds exactly model's state for the keys of
// kgr, and nothing for the others.
func checkNowal(t *testing.T, what string, b KeyedStateBackend, model nowalModel, keys int, kgr keygroup.Range) {
	t.Helper()
	v := must1(GetValueState(b, nowalVal))(t)
	l := must1(GetListState(b, nowalList))(t)
	m := must1(GetMapState(b, nowalMap))(t)
	for k := range keys {
		key := uint64(k)
		if !kgr.Contains(keygroup.Assign(u64key(key), testMaxP)) {
			continue
		}
		b.SetCurrentKey(u64key(key))
		got, ok, err := v.Value()
		must(t, err)
		want, wantOK := model.vals[key]
		if ok != wantOK || !bytes.Equal(got, want) {
			t.Fatalf("%s key %d value: %d bytes %q.. (present %v), want %d bytes (present %v)", what, k, len(got), got[:min(len(got), 12)], ok, len(want), wantOK)
		}
		gl := collect(t, l.Get())
		if !slices.Equal(gl, model.lists[key]) {
			t.Fatalf("%s key %d list: %v, want %v", what, k, gl, model.lists[key])
		}
		gm := map[int64]int64{}
		for e, err := range m.Entries() {
			must(t, err)
			gm[e.Key] = e.Value
		}
		wm := model.maps[key]
		if wm == nil {
			wm = map[int64]int64{}
		}
		if !maps.Equal(gm, wm) {
			t.Fatalf("%s key %d map: %v, want %v", what, k, gm, wm)
		}
	}
}
