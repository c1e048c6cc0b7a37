package state

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kstreamd/kstreamd/state/keygroup"
)

// replayTestDB opens an in-memory Pebble DB with the backend's merge
// operator.
func replayTestDB(t *testing.T) *pebble.DB {
	t.Helper()
	db := must1(pebble.Open("", &pebble.Options{FS: vfs.NewMem(), Merger: listMerger, FormatMajorVersion: pebble.FormatNewest,
		Logger: pebbleLogger{slog.New(slog.DiscardHandler)}}))(t)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// dumpDB returns every key and value of db (merge operands resolved).
func dumpDB(t *testing.T, db *pebble.DB) map[string]string {
	t.Helper()
	it := must1(db.NewIter(nil))(t)
	defer it.Close()
	out := map[string]string{}
	for ok := it.First(); ok; ok = it.Next() {
		out[string(it.Key())] = string(it.Value())
	}
	must(t, it.Error())
	return out
}

// randomDeltaRecords returns the batch representations of n random
// batches over a few keys in two key groups and the metadata space:
// sets, merges (list appends), deletes and range deletions, many keys
// written more than once, within a batch and across batches.
func randomDeltaRecords(db *pebble.DB, rng *rand.Rand, n int) [][]byte {
	key := func() []byte {
		if rng.IntN(10) == 0 {
			return append(bytes.Clone(metaStatePfx), byte('a'+rng.IntN(3)))
		}
		return appendStateKey(nil, stateKey{kg: 1 + 2*rng.IntN(2), id: 7, key: []byte{byte('a' + rng.IntN(6))}})
	}
	var out [][]byte
	for range n {
		b := db.NewBatch()
		for range 1 + rng.IntN(8) {
			switch k, v := key(), []byte{byte('0' + rng.IntN(10))}; rng.IntN(10) {
			case 0, 1, 2:
				_ = b.Set(k, v, nil)
			case 3, 4, 5, 6:
				_ = b.Merge(k, v, nil)
			case 7, 8:
				_ = b.Delete(k, nil)
			default:
				e := key()
				if bytes.Compare(k, e) > 0 {
					k, e = e, k
				}
				if bytes.Compare(k, e) < 0 {
					_ = b.DeleteRange(k, e, nil)
				}
			}
		}
		out = append(out, bytes.Clone(b.Repr()))
		b.Close()
	}
	return out
}

// TestDeltaReplayEqualsRecordByRecord: replaying delta records as one
// batch (deltaReplay, what a restore does since s41-rdelta) leaves
// exactly the state that committing each record on its own (the replay
// of 9358909) leaves, over random sets, merge operands, deletes and
// range deletions on top of a random base state: whole, and clipped to
// one key group plus the metadata space, with one batch and with the
// batch split by maxReplayBytes.
func TestDeltaReplayEqualsRecordByRecord(t *testing.T) {
	defer func(v int) { maxReplayBytes = v }(maxReplayBytes)
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 41))
		whole := seed%2 == 0
		maxReplayBytes = 2 * DefaultMaxDeltaBytes
		if seed%3 == 0 {
			maxReplayBytes = 64
		}
		one, many := replayTestDB(t), replayTestDB(t)
		base := randomDeltaRecords(one, rng, 4)
		for _, db := range []*pebble.DB{one, many} {
			for _, r := range base {
				b := db.NewBatch()
				must(t, b.SetRepr(bytes.Clone(r)))
				must(t, b.Commit(pebble.NoSync))
				b.Close()
			}
		}
		recs := randomDeltaRecords(one, rng, 1+rng.IntN(12))
		lo, hi := kgBound(1), kgBound(2)
		var data []byte
		for _, r := range recs {
			data = append(appendUvarint(data, len(r)), r...)
			b := many.NewBatch()
			if whole {
				must(t, b.SetRepr(bytes.Clone(r)))
			} else {
				must(t, filterBatch(b, r, lo, hi))
			}
			if !b.Empty() {
				must(t, b.Commit(pebble.NoSync))
			}
			b.Close()
		}
		var commits atomic.Int64
		rp := newDeltaReplay(one, int64(len(data)), &commits)
		half := len(recs) / 2 // two delta objects
		var cut []byte
		for _, r := range recs[:half] {
			cut = append(appendUvarint(cut, len(r)), r...)
		}
		must(t, rp.add(cut, lo, hi, whole))
		must(t, rp.add(data[len(cut):], lo, hi, whole))
		must(t, rp.close())
		if maxReplayBytes > len(data) && commits.Load() > 1 {
			t.Fatalf("seed %d: %d commits for %d records, want 1", seed, commits.Load(), len(recs))
		}
		got, want := dumpDB(t, one), dumpDB(t, many)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("seed %d (whole %t, %d records, %d commits): one batch gives\n%q\nrecord by record gives\n%q", seed, whole, len(recs), commits.Load(), got, want)
		}
	}
}

func appendUvarint(b []byte, n int) []byte { return binary.AppendUvarint(b, uint64(n)) }

// TestRemoteRestoresDelta9358909Checkpoint restores a delta checkpoint
// written by 9358909 (testdata/remote-delta-9358909: its handle, its
// base table and its two delta objects) whole, and rescaled into two
// halves and three uneven parts (deltas clipped). The base holds
// k000000-k000299: count = i and list [1]; the first delta sets count =
// -i below 100, appends 2 to the lists of even keys and clears the
// counts of 250-259; the second sets count = 1000+i for 50-149 and
// appends 3 to the lists of multiples of 3. Each restore is exact (and
// holds no key of another key group), and one batch applies both deltas
// (deltaReplay).
func TestRemoteRestoresDelta9358909Checkpoint(t *testing.T) {
	golden := filepath.Join("testdata", "remote-delta-9358909")
	handle := must1(os.ReadFile(filepath.Join(golden, "handle.json")))(t)
	var h keyedHandle
	must(t, json.Unmarshal(handle, &h))
	if len(h.Deltas) != 2 {
		t.Fatalf("golden handle has %d deltas, want 2", len(h.Deltas))
	}
	wantCount := func(i int) (int64, bool) {
		switch {
		case i >= 250 && i < 260:
			return 0, false
		case i >= 50 && i < 150:
			return int64(1000 + i), true
		case i < 100:
			return int64(-i), true
		}
		return int64(i), true
	}
	wantList := func(i int) []int64 {
		l := []int64{1}
		if i%2 == 0 {
			l = append(l, 2)
		}
		if i%3 == 0 {
			l = append(l, 3)
		}
		return l
	}
	for _, ranges := range [][]keygroup.Range{
		{{Start: 0, End: testMaxP - 1}},
		{{Start: 0, End: testMaxP/2 - 1}, {Start: testMaxP / 2, End: testMaxP - 1}},
		{{Start: 0, End: 9}, {Start: 10, End: 99}, {Start: 100, End: testMaxP - 1}},
	} {
		root := t.TempDir()
		store := filepath.Join(root, RemoteDirName)
		must(t, os.MkdirAll(store, 0o755))
		for _, e := range must1(os.ReadDir(filepath.Join(golden, RemoteDirName)))(t) {
			data := must1(os.ReadFile(filepath.Join(golden, RemoteDirName, e.Name())))(t)
			must(t, os.WriteFile(filepath.Join(store, e.Name()), data, 0o644))
		}
		rh := RestoreHandle{Handle: handle, Dir: filepath.Join(root, "chk-3"), SharedDir: filepath.Join(root, "shared")}
		seen := 0
		for i, r := range ranges {
			cfg := BackendConfig{Kind: KindPebble, Dir: filepath.Join(root, "db", string(rune('a'+i))), MaxParallelism: testMaxP,
				KeyGroupRange: r, Remote: &RemoteConfig{Dir: store, CacheBytes: 1 << 20}}
			b := must1(OpenBackendRestored(cfg, []RestoreHandle{rh}))(t)
			if n := b.(*pebbleBackend).st.remote.deltaCommits.Load(); n != 1 {
				t.Errorf("range %v: the deltas took %d commits, want 1", r, n)
			}
			checkCounts(t, b, 300, wantCount)
			lo, hi := kgBound(r.Start), kgBound(r.End+1)
			for k := range dumpDB(t, b.(*pebbleBackend).st.db) {
				if k < string(keyGroupsEnd) && (k < string(lo) || k >= string(hi)) {
					t.Fatalf("range %v: restored key %q of another key group", r, k)
				}
			}
			l := must1(GetListState(b, ListStateDescriptor[int64]{Name: "l", Serializer: Int64Serializer{}}))(t)
			for i := range 300 {
				k := []byte(fmt.Sprintf("k%06d", i))
				if !r.Contains(keygroup.Assign(k, testMaxP)) {
					continue
				}
				seen++
				b.SetCurrentKey(k)
				got := collect(t, l.Get())
				if fmt.Sprint(got) != fmt.Sprint(wantList(i)) {
					t.Fatalf("range %v: list[%s] = %v, want %v", r, k, got, wantList(i))
				}
			}
			must(t, b.Close())
		}
		if seen != 300 {
			t.Errorf("ranges %v: %d keys restored, want 300", ranges, seen)
		}
	}
}
