package state

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/objstorage/remote"

	"github.com/kstreamd/kstreamd/state/keygroup"
)

// checkRaw fails the test when got and want (rawState maps) differ,
// naming a few of the differing keys.
func checkRaw(t testing.TB, step string, got, want map[string]string) {
	t.Helper()
	if maps.Equal(got, want) {
		return
	}
	diff := 0
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			if diff++; diff <= 5 {
				t.Errorf("%s: key %x = %x (present %t), want %x", step, k, g, ok, v)
			}
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			if diff++; diff <= 10 {
				t.Errorf("%s: key %x restored, not in the checkpoint", step, k)
			}
		}
	}
	t.Fatalf("%s: %d keys differ (%d restored, %d checkpointed)", step, diff, len(got), len(want))
}

// listAppend appends round r to the list of every key k0..k(n-1) the
// backend owns, once: after rounds 1..R a key's list is exactly 1..R.
func listAppend(t testing.TB, b KeyedStateBackend, n, r int) {
	t.Helper()
	l := must1(GetListState(b, ListStateDescriptor[int64]{Name: "rounds", Serializer: Int64Serializer{}}))(t)
	kgs := b.KeyGroupRange()
	for i := range n {
		k := []byte(fmt.Sprintf("k%06d", i))
		if !kgs.Contains(keygroup.Assign(k, testMaxP)) {
			continue
		}
		b.SetCurrentKey(k)
		must(t, l.Add(int64(r)))
	}
}

// checkLists asserts that every owned key's list is exactly 1..rounds:
// no merge operand lost, none applied twice.
func checkLists(t testing.TB, step string, b KeyedStateBackend, n, rounds int) {
	t.Helper()
	l := must1(GetListState(b, ListStateDescriptor[int64]{Name: "rounds", Serializer: Int64Serializer{}}))(t)
	want := make([]int64, rounds)
	for i := range want {
		want[i] = int64(i + 1)
	}
	kgs := b.KeyGroupRange()
	for i := range n {
		k := []byte(fmt.Sprintf("k%06d", i))
		if !kgs.Contains(keygroup.Assign(k, testMaxP)) {
			continue
		}
		b.SetCurrentKey(k)
		got := collect(t, l.Get())
		if !slices.Equal(got, want) {
			t.Fatalf("%s: list[%s] = %v, want %v", step, k, got, want)
		}
	}
}

// fillOwnedCounts sets count[k_i] = base+i for the keys among k0..k(n-1)
// the backend owns.
func fillOwnedCounts(t testing.TB, b KeyedStateBackend, n int, base int64) {
	t.Helper()
	s := must1(GetValueState(b, ValueStateDescriptor[int64]{Name: "count", Serializer: Int64Serializer{}}))(t)
	kgs := b.KeyGroupRange()
	for i := range n {
		k := []byte(fmt.Sprintf("k%06d", i))
		if kgs.Contains(keygroup.Assign(k, testMaxP)) {
			b.SetCurrentKey(k)
			must(t, s.Update(base+int64(i)))
		}
	}
}

func restoreRemote(t testing.TB, cfg BackendConfig, hs ...RestoreHandle) KeyedStateBackend {
	t.Helper()
	rc := cfg
	rc.Dir = t.TempDir()
	b, err := OpenBackendRestored(rc, hs)
	must(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// TestRemoteDeltaRestoreThenChain: an instance restored from a delta
// checkpoint starts its own chain with a base (the deltas it applied are
// in that base, not logged again), continues with deltas, and every
// checkpoint of the old and the new chain restores exactly, with each
// list (merge operands) holding every round once; restoring the restored
// instance's checkpoints once more (restore, checkpoint, restore) applies
// no operand twice. Older checkpoints of the first chain still restore
// after the second chain's checkpoints.
func TestRemoteDeltaRestoreThenChain(t *testing.T) {
	forRemoteKinds(t, func(t *testing.T, kind string) {
		for _, cache := range []int{0, -1} {
			t.Run(fmt.Sprintf("cache=%d", cache), func(t *testing.T) {
				const n = 600
				cfg := testConfig(t, kind)
				cfg.WriteCacheBytes = cache
				cfg.Remote.MaxDeltaCheckpoints = 3
				b := open(t, cfg)
				type chk struct {
					rh     RestoreHandle
					raw    map[string]string
					rounds int
				}
				var chks []chk
				round := 0
				id := 0
				take := func(b KeyedStateBackend, wantDeltas int) {
					t.Helper()
					round++
					listAppend(t, b, n, round)
					fillCounts(t, b, n, func(i int) int64 { return int64(round*1000 + i) })
					id++
					rh, snap := remoteCheckpoint(t, b, cfg, id)
					if got := len(handleOf(t, snap).Deltas); got != wantDeltas {
						t.Fatalf("checkpoint %d: %d deltas, want %d", id, got, wantDeltas)
					}
					chks = append(chks, chk{rh: rh, raw: rawState(t, b, cfg.KeyGroupRange), rounds: round})
				}
				take(b, 0)
				take(b, 1)
				take(b, 2)
				must(t, b.Close())
				// Restore the delta checkpoint 3, then a new chain on it.
				b2 := restoreRemote(t, cfg, chks[2].rh)
				checkRaw(t, "restore of delta checkpoint 3", rawState(t, b2, cfg.KeyGroupRange), chks[2].raw)
				checkLists(t, "restore of delta checkpoint 3", b2, n, 3)
				take(b2, 0) // the restored instance's first checkpoint is a base
				take(b2, 1)
				take(b2, 2)
				take(b2, 3)
				take(b2, 0) // after 3 deltas: a base
				take(b2, 1)
				must(t, b2.Close())
				for i, c := range chks {
					rb := restoreRemote(t, cfg, c.rh)
					step := fmt.Sprintf("restore of checkpoint %d", i+1)
					checkRaw(t, step, rawState(t, rb, cfg.KeyGroupRange), c.raw)
					checkLists(t, step, rb, n, c.rounds)
					must(t, rb.Close())
				}
				// Restore, checkpoint (a base, then a delta), restore again.
				last := chks[len(chks)-1]
				rb := restoreRemote(t, cfg, last.rh)
				id++
				rh1, _ := remoteCheckpoint(t, rb, cfg, id)
				id++
				rh2, snap := remoteCheckpoint(t, rb, cfg, id) // nothing new: a delta with no new object
				if got := len(handleOf(t, snap).Deltas); got != 0 {
					t.Fatalf("unchanged instance's second checkpoint names %d deltas, want 0", got)
				}
				must(t, rb.Close())
				for _, rh := range []RestoreHandle{rh1, rh2} {
					rb := restoreRemote(t, cfg, rh)
					checkRaw(t, "restore of a restored delta checkpoint", rawState(t, rb, cfg.KeyGroupRange), last.raw)
					checkLists(t, "restore of a restored delta checkpoint", rb, n, last.rounds)
					must(t, rb.Close())
				}
			})
		}
	})
}

// TestRemoteDeltaSavepointSelfContained: a savepoint taken after delta
// checkpoints holds the whole state by itself: with the remote store,
// the checkpoints and the shared directory deleted, it restores exactly
// into a new store. The checkpoint after the savepoint is a base, and
// the chain after it restores exactly.
func TestRemoteDeltaSavepointSelfContained(t *testing.T) {
	const n = 800
	cfg := testConfig(t, kindPebbleRemote)
	root := filepath.Dir(cfg.Remote.Dir)
	b := open(t, cfg)
	listAppend(t, b, n, 1)
	fillCounts(t, b, n, func(i int) int64 { return int64(i) })
	remoteCheckpoint(t, b, cfg, 1)
	listAppend(t, b, n, 2)
	fillCounts(t, b, n, func(i int) int64 { return int64(2 * i) })
	if _, snap := remoteCheckpoint(t, b, cfg, 2); len(handleOf(t, snap).Deltas) != 1 {
		t.Fatalf("checkpoint 2 is not a delta checkpoint")
	}
	listAppend(t, b, n, 3)
	fillCounts(t, b, n, func(i int) int64 { return int64(3 * i) })
	spDir := t.TempDir()
	write, err := SnapshotKeyed(b, SnapshotTarget{Dir: spDir, TaskPath: "op/0"})
	must(t, err)
	snap, err := write(context.Background())
	must(t, err)
	if h := handleOf(t, snap); len(h.Deltas) != 0 || len(snap.SharedFiles) != 0 {
		t.Fatalf("savepoint names %d deltas and %d shared files, want none", len(h.Deltas), len(snap.SharedFiles))
	}
	spRaw := rawState(t, b, cfg.KeyGroupRange)
	listAppend(t, b, n, 4)
	fillCounts(t, b, n, func(i int) int64 { return int64(4 * i) })
	rh4, snap4 := remoteCheckpoint(t, b, cfg, 4)
	if len(handleOf(t, snap4).Deltas) != 0 {
		t.Fatalf("the checkpoint after a savepoint names deltas, want a base")
	}
	raw4 := rawState(t, b, cfg.KeyGroupRange)
	listAppend(t, b, n, 5)
	rh5, snap5 := remoteCheckpoint(t, b, cfg, 5)
	if len(handleOf(t, snap5).Deltas) != 1 {
		t.Fatalf("checkpoint 5 is not a delta checkpoint")
	}
	raw5 := rawState(t, b, cfg.KeyGroupRange)
	for _, c := range []struct {
		rh     RestoreHandle
		raw    map[string]string
		rounds int
	}{{rh4, raw4, 4}, {rh5, raw5, 5}} {
		rb := restoreRemote(t, cfg, c.rh)
		checkRaw(t, "chain after the savepoint", rawState(t, rb, cfg.KeyGroupRange), c.raw)
		checkLists(t, "chain after the savepoint", rb, n, c.rounds)
		must(t, rb.Close())
	}
	must(t, b.Close())

	// The savepoint alone: everything else deleted.
	moved := filepath.Join(t.TempDir(), "sp")
	must(t, os.Rename(spDir, moved))
	must(t, os.RemoveAll(root))
	nc := testConfig(t, kindPebbleRemote)
	rb := restoreRemote(t, nc, RestoreHandle{Handle: snap.Handle, Dir: moved})
	checkRaw(t, "restore of the savepoint alone", rawState(t, rb, nc.KeyGroupRange), spRaw)
	checkLists(t, "restore of the savepoint alone", rb, n, 3)
}

// TestRemoteDeltaMaxBytes: with MaxDeltaBytes smaller than one commit
// (the write cache's flush batch), the checkpoint after it is a base and
// the log holds nothing past the cap; small changes after it are deltas
// again; every checkpoint restores exactly.
func TestRemoteDeltaMaxBytes(t *testing.T) {
	const n = 3000
	cfg := testConfig(t, kindPebbleRemote)
	cfg.WriteCacheBytes = 8 << 20
	cfg.Remote.MaxDeltaBytes = 4 << 10
	b := open(t, cfg)
	d := b.(*pebbleBackend).st.delta
	s := must1(GetValueState(b, ValueStateDescriptor[int64]{Name: "count", Serializer: Int64Serializer{}}))(t)
	set := func(from, to int, v int64) {
		for i := from; i < to; i++ {
			b.SetCurrentKey([]byte(fmt.Sprintf("k%06d", i)))
			must(t, s.Update(v+int64(i)))
		}
	}
	type chk struct {
		rh  RestoreHandle
		raw map[string]string
	}
	var chks []chk
	take := func(id, wantDeltas int) {
		t.Helper()
		rh, snap := remoteCheckpoint(t, b, cfg, id)
		if got := len(handleOf(t, snap).Deltas); got != wantDeltas {
			t.Fatalf("checkpoint %d: %d deltas, want %d", id, got, wantDeltas)
		}
		d.mu.Lock()
		logged := len(d.buf)
		d.mu.Unlock()
		if logged != 0 {
			t.Fatalf("checkpoint %d left %d logged bytes", id, logged)
		}
		chks = append(chks, chk{rh, rawState(t, b, cfg.KeyGroupRange)})
	}
	set(0, n, 0)
	take(1, 0)
	set(0, 10, 100000)
	take(2, 1)
	set(0, n, 200000) // one flush batch of ~3000 entries: past the cap
	if err := b.(*pebbleBackend).st.flushCache(); err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	over, logged := d.overflow, len(d.buf)
	d.mu.Unlock()
	if !over || logged != 0 {
		t.Fatalf("after a batch past the cap: overflow %t, %d bytes logged; want true, 0", over, logged)
	}
	take(3, 0)
	set(0, 10, 300000)
	take(4, 1)
	set(10, 20, 400000)
	take(5, 2)
	must(t, b.Close())
	for i, c := range chks {
		rb := restoreRemote(t, cfg, c.rh)
		checkRaw(t, fmt.Sprintf("restore of checkpoint %d", i+1), rawState(t, rb, cfg.KeyGroupRange), c.raw)
		must(t, rb.Close())
	}
}

// failDeltaStore is a remote store whose writes of delta objects fail
// while fail is set: at the create, or at the close after the bytes
// (a partial object left behind).
type failDeltaStore struct {
	remote.Storage
	fail    atomic.Int32 // 0 no, 1 at create, 2 at close
	created atomic.Int32
}

var errInjected = errors.New("injected store failure")

func (s *failDeltaStore) CreateObject(name string) (io.WriteCloser, error) {
	if strings.HasPrefix(name, "delta-") && !strings.Contains(name, refInfix) {
		switch s.fail.Load() {
		case 1:
			return nil, errInjected
		case 2:
			w, err := s.Storage.CreateObject(name)
			if err != nil {
				return nil, err
			}
			s.created.Add(1)
			return failCloser{w}, nil
		}
		s.created.Add(1)
	}
	return s.Storage.CreateObject(name)
}

type failCloser struct{ io.WriteCloser }

func (f failCloser) Close() error {
	_ = f.WriteCloser.Close()
	return errInjected
}

// TestRemoteDeltaFailedWrite: a delta checkpoint whose delta object was
// not written (the write failed at the create or at the close, or the
// asynchronous part never ran, as for a checkpoint aborted before it) is
// never continued: the next checkpoint is a base, and every completed
// checkpoint restores exactly. A late asynchronous part of an abandoned
// checkpoint does not break the chain after it either.
func TestRemoteDeltaFailedWrite(t *testing.T) {
	const n = 500
	cfg := testConfig(t, kindPebbleRemote)
	st, err := NewRemoteDirStore(cfg.Remote.Dir)
	must(t, err)
	fs := &failDeltaStore{Storage: st}
	cfg.Remote.Store = fs
	b := open(t, cfg)
	round := 0
	change := func() {
		round++
		listAppend(t, b, n, round)
		fillCounts(t, b, n, func(i int) int64 { return int64(round*1000 + i) })
	}
	type chk struct {
		rh     RestoreHandle
		raw    map[string]string
		rounds int
	}
	var chks []chk
	id := 0
	take := func(wantDeltas int) {
		t.Helper()
		id++
		rh, snap := remoteCheckpoint(t, b, cfg, id)
		if got := len(handleOf(t, snap).Deltas); got != wantDeltas {
			t.Fatalf("checkpoint %d: %d deltas, want %d", id, got, wantDeltas)
		}
		chks = append(chks, chk{rh, rawState(t, b, cfg.KeyGroupRange), round})
	}
	failing := func(mode int32) {
		t.Helper()
		fs.fail.Store(mode)
		id++
		root := filepath.Dir(cfg.Remote.Dir)
		write, err := SnapshotKeyed(b, SnapshotTarget{Dir: filepath.Join(root, fmt.Sprintf("chk-%d", id)), TaskPath: "op/0", SharedDir: filepath.Join(root, "shared")})
		must(t, err)
		if _, err := write(context.Background()); !errors.Is(err, errInjected) {
			t.Fatalf("checkpoint %d with a failing delta write: %v, want the injected failure", id, err)
		}
		fs.fail.Store(0)
	}
	change()
	take(0)
	change()
	take(1)
	for _, mode := range []int32{1, 2} {
		change()
		failing(mode)
		change()
		take(0) // the chain with the unwritten object is not continued
		change()
		take(1)
	}
	// The asynchronous part never runs (aborted), or runs after the next
	// checkpoint's synchronous part.
	change()
	id++
	root := filepath.Dir(cfg.Remote.Dir)
	_, err = SnapshotKeyed(b, SnapshotTarget{Dir: filepath.Join(root, fmt.Sprintf("chk-%d", id)), TaskPath: "op/0", SharedDir: filepath.Join(root, "shared")})
	must(t, err)
	change()
	take(0)
	change()
	id++
	late, err := SnapshotKeyed(b, SnapshotTarget{Dir: filepath.Join(root, fmt.Sprintf("chk-%d", id)), TaskPath: "op/0", SharedDir: filepath.Join(root, "shared")})
	must(t, err)
	change()
	take(0) // the late one's object is not written yet: a base
	if _, err := late(context.Background()); err != nil {
		t.Fatalf("late asynchronous part: %v", err)
	}
	change()
	take(1)
	change()
	take(2)
	must(t, b.Close())
	for i, c := range chks {
		rb := restoreRemote(t, cfg, c.rh)
		step := fmt.Sprintf("restore of completed checkpoint %d", i+1)
		checkRaw(t, step, rawState(t, rb, cfg.KeyGroupRange), c.raw)
		checkLists(t, step, rb, n, c.rounds)
		must(t, rb.Close())
	}
}

// TestRemoteDeltaIntoLocalAndRead: a delta checkpoint restores into a
// local Pebble backend (the switch from remote to local state) and reads
// through ReadKeyedSnapshot with exactly the checkpointed entries, at
// the original parallelism and rescaled 1 -> 3.
func TestRemoteDeltaIntoLocalAndRead(t *testing.T) {
	const n = 900
	cfg := testConfig(t, kindPebbleRemote)
	b, rh, snap := threeRoundChain(t, cfg, n)
	if len(handleOf(t, snap).Deltas) != 2 {
		t.Fatalf("checkpoint 3 names %d deltas, want 2", len(handleOf(t, snap).Deltas))
	}
	want := rawState(t, b, cfg.KeyGroupRange)
	must(t, b.Close())
	lists, counts := 0, 0
	_, err := ReadKeyedSnapshot(rh, t.TempDir(), func(e KeyedEntry) error {
		switch e.State.Name {
		case "rounds":
			lists++
		case "count":
			counts++
		}
		return nil
	})
	must(t, err)
	if lists != n || counts != n {
		t.Fatalf("read %d lists and %d counts, want %d each", lists, counts, n)
	}
	for _, p := range []int{1, 3} {
		for sub := range p {
			lc := testConfig(t, KindPebble)
			lc.KeyGroupRange = keygroup.RangeFor(testMaxP, p, sub)
			lb, err := OpenBackendRestored(lc, []RestoreHandle{rh})
			must(t, err)
			step := fmt.Sprintf("local restore, parallelism %d subtask %d", p, sub)
			checkRaw(t, step, rawState(t, lb, lc.KeyGroupRange), restrictRaw(want, lc.KeyGroupRange))
			checkLists(t, step, lb, n, 3)
			checkCounts(t, lb, n, func(i int) (int64, bool) { return int64(3000 + i), true })
			must(t, lb.Close())
		}
	}
}

// TestRemoteDeltaRescaleUneven: delta checkpoints of 3 subtasks restore
// into 2 and into 5 subtasks, whose key-group ranges cut across the old
// ones (each new subtask applies the deltas of two old snapshots, clipped,
// and the metadata records of all three): each holds exactly its key
// groups' entries, every list 1..rounds, and the instances' own delta
// checkpoints after it restore back into 3 exactly.
func TestRemoteDeltaRescaleUneven(t *testing.T) {
	const n = 900
	cfg := testConfig(t, kindPebbleRemote)
	all := cfg.KeyGroupRange
	var handles []RestoreHandle
	want := map[string]string{}
	id := 0
	for sub := range 3 {
		sc := cfg
		sc.Dir, sc.KeyGroupRange = t.TempDir(), keygroup.RangeFor(testMaxP, 3, sub)
		b, err := OpenBackend(sc)
		must(t, err)
		var rh RestoreHandle
		for r := 1; r <= 3; r++ {
			listAppend(t, b, n, r)
			fillOwnedCounts(t, b, n, int64(r*1000))
			id++
			var snap KeyedSnapshot
			rh, snap = remoteCheckpoint(t, b, sc, id)
			if got := len(handleOf(t, snap).Deltas); got != r-1 {
				t.Fatalf("subtask %d checkpoint %d: %d deltas, want %d", sub, r, got, r-1)
			}
		}
		maps.Copy(want, rawState(t, b, sc.KeyGroupRange))
		handles = append(handles, rh)
		must(t, b.Close())
	}
	rounds := 3
	for _, par := range []int{2, 5, 3} {
		next := map[string]string{}
		var nextHandles []RestoreHandle
		for sub := range par {
			sc := cfg
			sc.Dir, sc.KeyGroupRange = t.TempDir(), keygroup.RangeFor(testMaxP, par, sub)
			b, err := OpenBackendRestored(sc, handles)
			must(t, err)
			step := fmt.Sprintf("parallelism %d subtask %d", par, sub)
			checkRaw(t, step, rawState(t, b, all), restrictRaw(want, sc.KeyGroupRange))
			checkLists(t, step, b, n, rounds)
			id++
			remoteCheckpoint(t, b, sc, id) // a base
			listAppend(t, b, n, rounds+1)
			id++
			rh, snap := remoteCheckpoint(t, b, sc, id)
			if got := len(handleOf(t, snap).Deltas); got != 1 {
				t.Fatalf("%s: %d deltas, want 1", step, got)
			}
			maps.Copy(next, rawState(t, b, sc.KeyGroupRange))
			nextHandles = append(nextHandles, rh)
			must(t, b.Close())
		}
		want, handles = next, nextHandles
		rounds++
	}
	fb := restoreRemote(t, cfg, handles...)
	checkRaw(t, "all key groups after 3 -> 2 -> 5 -> 3", rawState(t, fb, all), want)
	checkLists(t, "all key groups after 3 -> 2 -> 5 -> 3", fb, n, rounds)
}

// TestRemoteDeltaOverlappingFinishers: the asynchronous part of a
// checkpoint may still run when the next checkpoint's synchronous part
// starts (the finisher of a timed-out checkpoint); with commits from
// another goroutine racing both, every checkpoint whose asynchronous part
// succeeded restores an unbroken prefix of the commits, between the
// commits done before its synchronous part and those begun before it
// returned.
func TestRemoteDeltaOverlappingFinishers(t *testing.T) {
	cfg := testConfig(t, kindPebbleRemote)
	cfg.WriteCacheBytes = -1
	cfg.Remote.MaxDeltaCheckpoints = 4
	b := open(t, cfg)
	st := b.(*pebbleBackend).st
	cl := startCommitLoop(st)
	type chk struct {
		snap     chan KeyedSnapshot
		dir      string
		min, max int64
	}
	root := filepath.Dir(cfg.Remote.Dir)
	var chks []*chk
	var prev chan struct{}
	deltas := 0
	for id := 1; id <= 16; id++ {
		c := &chk{snap: make(chan KeyedSnapshot, 1), dir: filepath.Join(root, fmt.Sprintf("chk-%d", id))}
		for cl.committed.Load() < int64(id)*50 {
			runtime.Gosched()
		}
		c.min = cl.committed.Load()
		write, err := SnapshotKeyed(b, SnapshotTarget{Dir: c.dir, TaskPath: "op/0", SharedDir: filepath.Join(root, "shared")})
		must(t, err)
		c.max = cl.started.Load()
		fin := make(chan struct{})
		wait := prev
		go func() {
			defer close(fin)
			if wait != nil && id%2 == 0 {
				<-wait // every other finisher runs after the last one
			}
			snap, err := write(context.Background())
			if err != nil {
				t.Errorf("checkpoint %d async part: %v", id, err)
				close(c.snap)
				return
			}
			c.snap <- snap
		}()
		if id%3 == 0 {
			<-fin // sometimes the finisher completes before the next checkpoint
		}
		prev = fin
		chks = append(chks, c)
	}
	<-prev
	must(t, cl.halt())
	for i, c := range chks {
		snap, ok := <-c.snap
		if !ok {
			continue
		}
		deltas += min(len(handleOf(t, snap).Deltas), 1)
		rb := restoreRemote(t, cfg, RestoreHandle{Handle: snap.Handle, Dir: c.dir, SharedDir: filepath.Join(root, "shared")})
		cl.checkPrefix(t, i+1, rawState(t, rb, cfg.KeyGroupRange), c.min, c.max)
		must(t, rb.Close())
	}
	t.Logf("%d of %d checkpoints were delta checkpoints", deltas, len(chks))
}

// TestRemoteDeltaAfterLocalRestore: a local Pebble checkpoint restored
// into remote state (the switch from local to remote) starts a chain with
// a base; the delta checkpoints after it restore exactly, lists included,
// and so does a restore of them back into local state.
func TestRemoteDeltaAfterLocalRestore(t *testing.T) {
	const n = 700
	lc := testConfig(t, KindPebble)
	lb := open(t, lc)
	listAppend(t, lb, n, 1)
	fillCounts(t, lb, n, func(i int) int64 { return int64(1000 + i) })
	root := t.TempDir()
	tgt := SnapshotTarget{Dir: filepath.Join(root, "chk-1"), TaskPath: "op/0", SharedDir: filepath.Join(root, "shared")}
	write, err := SnapshotKeyed(lb, tgt)
	must(t, err)
	snap, err := write(context.Background())
	must(t, err)
	must(t, lb.Close())
	cfg := testConfig(t, kindPebbleRemote)
	b := restoreRemote(t, cfg, RestoreHandle{Handle: snap.Handle, Dir: tgt.Dir, SharedDir: tgt.SharedDir})
	checkLists(t, "local checkpoint restored into remote state", b, n, 1)
	var last RestoreHandle
	var want map[string]string
	for r := 2; r <= 4; r++ {
		listAppend(t, b, n, r)
		fillCounts(t, b, n, func(i int) int64 { return int64(r*1000 + i) })
		var s KeyedSnapshot
		last, s = remoteCheckpoint(t, b, cfg, r)
		if got := len(handleOf(t, s).Deltas); got != r-2 {
			t.Fatalf("checkpoint %d: %d deltas, want %d", r, got, r-2)
		}
		want = rawState(t, b, cfg.KeyGroupRange)
	}
	must(t, b.Close())
	rb := restoreRemote(t, cfg, last)
	checkRaw(t, "remote restore", rawState(t, rb, cfg.KeyGroupRange), want)
	checkLists(t, "remote restore", rb, n, 4)
	must(t, rb.Close())
	lc2 := testConfig(t, KindPebble)
	lb2, err := OpenBackendRestored(lc2, []RestoreHandle{last})
	must(t, err)
	defer lb2.Close()
	checkRaw(t, "local restore", rawState(t, lb2, lc2.KeyGroupRange), want)
	checkLists(t, "local restore", lb2, n, 4)
}

// threeRoundChain opens a backend of cfg and runs three rounds over n
// keys (list appends and counts), with a checkpoint after each: a base,
// then two delta checkpoints (the default chain limits). It returns the
// backend, still open, and the third checkpoint's restore handle and
// snapshot.
func threeRoundChain(t *testing.T, cfg BackendConfig, n int) (KeyedStateBackend, RestoreHandle, KeyedSnapshot) {
	t.Helper()
	b := open(t, cfg)
	for r := 1; r <= 3; r++ {
		listAppend(t, b, n, r)
		fillCounts(t, b, n, func(i int) int64 { return int64(r*1000 + i) })
		if r < 3 {
			remoteCheckpoint(t, b, cfg, r)
		}
	}
	rh, snap := remoteCheckpoint(t, b, cfg, 3)
	return b, rh, snap
}
