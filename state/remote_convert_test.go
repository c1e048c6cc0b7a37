package state

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kstreamd/kstreamd/state/keygroup"
)

// checkpointInto takes an incremental checkpoint of b into root/chk-<id>
// with the shared directory root/shared (a job's layout: a disaggregated
// backend's store is root/remote) and returns its restore handle.
func checkpointInto(t testing.TB, b KeyedStateBackend, root string, id int) RestoreHandle {
	t.Helper()
	tgt := SnapshotTarget{Dir: filepath.Join(root, fmt.Sprintf("chk-%d", id)), TaskPath: "op/0", SharedDir: filepath.Join(root, "shared")}
	write, err := SnapshotKeyed(b, tgt)
	must(t, err)
	snap, err := write(context.Background())
	must(t, err)
	return RestoreHandle{Handle: snap.Handle, Dir: tgt.Dir, SharedDir: tgt.SharedDir}
}

// crossModel is the expected state of TestRestoreAcrossLocalAndRemote:
// count[k] per key index (absent: deleted or never written) and the list
// of key "list".
type crossModel struct {
	counts map[int]int64
	list   []int64
}

var crossList = ListStateDescriptor[int64]{Name: "l", Serializer: Int64Serializer{}}

// check asserts b holds exactly m in its key groups: every count, no
// other entry (deleted keys and keys of other key groups are gone, not
// only unread), and the list where b owns its key.
func (m crossModel) check(t testing.TB, b KeyedStateBackend, n int) {
	t.Helper()
	checkCounts(t, b, n, func(i int) (int64, bool) { v, ok := m.counts[i]; return v, ok })
	r := b.KeyGroupRange()
	want := 0
	for i := range m.counts {
		if r.Contains(keygroup.Assign([]byte(fmt.Sprintf("k%06d", i)), testMaxP)) {
			want++
		}
	}
	if r.Contains(keygroup.Assign([]byte("list"), testMaxP)) {
		want++
		l := must1(GetListState(b, crossList))(t)
		b.SetCurrentKey([]byte("list"))
		if got := collect(t, l.Get()); !slices.Equal(got, m.list) {
			t.Fatalf("%v: list = %v, want %v", r, got, m.list)
		}
	}
	if got := storedEntriesIn(t, b, keygroup.Range{Start: 0, End: testMaxP - 1}); got != want {
		t.Fatalf("%v: %d stored entries, want %d", r, got, want)
	}
}

// restoreAt opens the subtasks of parallelism p from the snapshots hs
// (taken at key-group ranges rs), each with the snapshots overlapping its
// key groups, as a job rescaled on restore does (each in a fresh Dir).
func restoreAt(t *testing.T, base BackendConfig, p int, hs []RestoreHandle, rs []keygroup.Range) []KeyedStateBackend {
	t.Helper()
	out := make([]KeyedStateBackend, p)
	for i := range p {
		cfg := base
		cfg.Dir = t.TempDir()
		cfg.KeyGroupRange = keygroup.RangeFor(testMaxP, p, i)
		var mine []RestoreHandle
		for j, r := range rs {
			if r.Intersect(cfg.KeyGroupRange).Len() > 0 {
				mine = append(mine, hs[j])
			}
		}
		b, err := OpenBackendRestored(cfg, mine)
		if err != nil {
			t.Fatalf("restore subtask %d of %d: %v", i, p, err)
		}
		t.Cleanup(func() { _ = b.Close() })
		out[i] = b
	}
	return out
}

// TestRestoreAcrossLocalAndRemote: checkpoints of local Pebble state
// restore into the disaggregated backend and back, at other
// parallelisms, with exactly the checkpointed state (Flink's switch of
// state backends through a savepoint). The local snapshots come from a
// local rescale 1 -> 2 (their tables carry range deletions of the other
// half) with overwrites, deletes and a list whose elements are merge
// operands in several tables; they restore into remote state at
// parallelism 3 (their SST files copied into the store once and ingested
// by reference), which is changed and checkpointed, then restored into
// local state at parallelism 2 and 1.
func TestRestoreAcrossLocalAndRemote(t *testing.T) {
	forRemoteKinds(t, func(t *testing.T, kind string) {
		rcfg := testConfig(t, kind)
		root := filepath.Dir(rcfg.Remote.Dir)
		lcfg := testConfig(t, KindPebble)
		const n = 4000
		m := crossModel{counts: map[int]int64{}}

		// Local, parallelism 1, then 2.
		b := open(t, lcfg)
		fillCounts(t, b, n, func(i int) int64 { return int64(i) })
		for i := range n {
			m.counts[i] = int64(i)
		}
		l := must1(GetListState(b, crossList))(t)
		b.SetCurrentKey([]byte("list"))
		must(t, l.Add(1))
		must(t, b.(*pebbleBackend).st.db.Flush())
		must(t, l.Add(2))
		m.list = []int64{1, 2}
		h1 := checkpointInto(t, b, root, 1)
		must(t, b.Close())
		halves := restoreAt(t, lcfg, 2, []RestoreHandle{h1}, []keygroup.Range{lcfg.KeyGroupRange})
		var hs []RestoreHandle
		var rs []keygroup.Range
		count := ValueStateDescriptor[int64]{Name: "count", Serializer: Int64Serializer{}}
		for i, hb := range halves {
			m.check(t, hb, n)
			s := must1(GetValueState(hb, count))(t)
			for k := range n {
				key := []byte(fmt.Sprintf("k%06d", k))
				if !hb.KeyGroupRange().Contains(keygroup.Assign(key, testMaxP)) {
					continue
				}
				hb.SetCurrentKey(key)
				switch k % 7 {
				case 0:
					must(t, s.Clear())
					delete(m.counts, k)
				case 1:
					must(t, s.Update(int64(-k)))
					m.counts[k] = int64(-k)
				}
			}
			if hb.KeyGroupRange().Contains(keygroup.Assign([]byte("list"), testMaxP)) {
				hl := must1(GetListState(hb, crossList))(t)
				hb.SetCurrentKey([]byte("list"))
				must(t, hl.Add(3))
				m.list = append(m.list, 3)
			}
			hs = append(hs, checkpointInto(t, hb, root, 10+i))
			rs = append(rs, hb.KeyGroupRange())
			must(t, hb.Close())
		}

		// Local (2) -> remote (3): the tables are copied into the store.
		before, _ := storeObjects(t, rcfg)
		remotes := restoreAt(t, rcfg, 3, hs, rs)
		after, _ := storeObjects(t, rcfg)
		imported := 0
		for _, o := range after {
			if strings.HasPrefix(o, "import-") {
				imported++
			}
		}
		if len(before) != 0 || imported == 0 {
			t.Fatalf("store before the restore %v, after %v: want the local tables imported", before, after)
		}
		hs, rs = nil, nil
		for i, rb := range remotes {
			m.check(t, rb, n)
			s := must1(GetValueState(rb, count))(t)
			for k := range n {
				key := []byte(fmt.Sprintf("k%06d", k))
				if k%11 == 2 && rb.KeyGroupRange().Contains(keygroup.Assign(key, testMaxP)) {
					rb.SetCurrentKey(key)
					must(t, s.Update(1000+int64(k)))
					m.counts[k] = 1000 + int64(k)
				}
			}
			rh := checkpointInto(t, rb, root, 20+i)
			if !strings.Contains(string(rh.Handle), `"remote":true`) {
				t.Fatalf("checkpoint of the restored remote backend is not remote: %s", rh.Handle)
			}
			if kind == kindPebbleRemoteS3 {
				rh.RemoteStore = rcfg.Remote.Store
			}
			hs = append(hs, rh)
			rs = append(rs, rb.KeyGroupRange())
			must(t, rb.Close())
		}

		// Remote (3) -> local (2) and (1).
		for _, p := range []int{2, 1} {
			for _, lb := range restoreAt(t, lcfg, p, hs, rs) {
				if lb.(*pebbleBackend).st.remote != nil {
					t.Fatal("restored into a disaggregated backend, want local")
				}
				m.check(t, lb, n)
				must(t, lb.Close())
			}
		}
		// The scratch instances released their markers: only the
		// objects remain.
		if _, markers := storeObjects(t, rcfg); len(markers) != 0 {
			t.Fatalf("markers left on the store: %v", markers)
		}
	})
}
