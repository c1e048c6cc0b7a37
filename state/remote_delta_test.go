package state

import (
	"bytes"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/state/keygroup"
)

// rawState returns every key and value (merge operands resolved) of a
// Pebble backend whose key is in key groups r or in the metadata space.
func rawState(t testing.TB, b KeyedStateBackend, r keygroup.Range) map[string]string {
	t.Helper()
	pb := b.(*pebbleBackend)
	must(t, pb.st.flushCache())
	it, err := pb.st.db.NewIter(nil)
	must(t, err)
	defer it.Close()
	lo, hi := kgBound(r.Start), kgBound(r.End+1)
	out := map[string]string{}
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if bytes.Compare(k, keyGroupsEnd) < 0 && (bytes.Compare(k, lo) < 0 || bytes.Compare(k, hi) >= 0) {
			continue
		}
		out[string(k)] = string(it.Value())
	}
	must(t, it.Error())
	return out
}

// restrictRaw keeps the entries of raw in key groups r and the metadata
// space.
func restrictRaw(raw map[string]string, r keygroup.Range) map[string]string {
	lo, hi := kgBound(r.Start), kgBound(r.End+1)
	out := map[string]string{}
	for k, v := range raw {
		if k >= string(keyGroupsEnd) || k >= string(lo) && k < string(hi) {
			out[k] = v
		}
	}
	return out
}

// deltaJob is the state of TestRemoteDeltaCheckpointRestore on one
// backend: values, lists (merge operands), map entries, timers and
// values with a TTL that background cleanup deletes.
type deltaJob struct {
	b     KeyedStateBackend
	clock *fakeClock
	count ValueState[int64]
	list  ListState[int64]
	m     MapState[int64, int64]
	ttl   ValueState[int64]
	q     *TimerQueue
}

func newDeltaJob(t testing.TB, b KeyedStateBackend, clock *fakeClock) *deltaJob {
	t.Helper()
	j := &deltaJob{b: b, clock: clock}
	j.count = must1(GetValueState(b, ValueStateDescriptor[int64]{Name: "count", Serializer: Int64Serializer{}}))(t)
	j.list = must1(GetListState(b, ListStateDescriptor[int64]{Name: "l", Serializer: Int64Serializer{}}))(t)
	j.m = must1(GetMapState(b, MapStateDescriptor[int64, int64]{Name: "m", KeySerializer: Int64Serializer{}, ValueSerializer: Int64Serializer{}}))(t)
	j.ttl = must1(GetValueState(b, ValueStateDescriptor[int64]{Name: "tv", Serializer: Int64Serializer{}, TTL: &StateTtlConfig{TTL: time.Second}}))(t)
	j.q = must1(NewTimerQueue(b))(t)
	return j
}

// round changes the state of the owned keys among n: every key's count,
// list appends (merges), map puts and removes, timers registered and
// deleted, TTL values written (even keys, then odd keys), then the clock
// moves on and background cleanup deletes the expired TTL values.
func (j *deltaJob) round(t testing.TB, n, round int) {
	t.Helper()
	r := j.b.KeyGroupRange()
	for i := range n {
		k := []byte(fmt.Sprintf("k%06d", i))
		if !r.Contains(keygroup.Assign(k, testMaxP)) {
			continue
		}
		j.b.SetCurrentKey(k)
		must(t, j.count.Update(int64(round*100000+i)))
		if i%3 == round%3 {
			must(t, j.list.Add(int64(round)))
		}
		if i%5 == 0 {
			must(t, j.m.Put(int64(round), int64(i)))
			if round > 1 {
				must(t, j.m.Remove(int64(round-1)))
			}
		}
		if i%7 == 0 {
			must1(j.q.Register(EventTime, k, int64(round*1000+i)))(t)
			if round > 1 && i%14 == 0 {
				must(t, j.q.Delete(EventTime, k, int64((round-1)*1000+i)))
			}
		}
		if i%2 == round%2 {
			must(t, j.ttl.Update(int64(round)))
		}
		if i%11 == round%11 {
			must(t, j.count.Clear())
		}
	}
	j.clock.at(time.Duration(round) * 700 * time.Millisecond)
	for range 20 {
		if must1(j.b.CleanupStep())(t) == 0 {
			break
		}
	}
}

// TestRemoteDeltaCheckpointRestore: checkpoints after a base of a
// disaggregated backend are delta checkpoints (the base's tables plus
// delta objects of the commits since, no flush), and restoring the
// newest gives exactly the state at that checkpoint: every stored key
// and value (values, lists built of merge operands, map entries, timers,
// TTL values after cleanup), with and without the write cache. Then a
// rescale 2 -> 4 -> 1 through delta checkpoints of the restored
// instances gives each instance exactly its key groups' state.
func TestRemoteDeltaCheckpointRestore(t *testing.T) {
	forRemoteKinds(t, func(t *testing.T, kind string) {
		for _, cache := range []int{0, -1} {
			t.Run(fmt.Sprintf("cache=%d", cache), func(t *testing.T) {
				testRemoteDeltaCheckpointRestore(t, kind, cache)
			})
		}
	})
}

func testRemoteDeltaCheckpointRestore(t *testing.T, kind string, cache int) {
	const n = 2000
	clock := newFakeClock()
	cfg := testConfig(t, kind)
	cfg.Clock, cfg.WriteCacheBytes = clock, cache
	cfg.TTLCleanup = TTLCleanupConfig{EntriesPerStep: 500}
	all := cfg.KeyGroupRange
	b := open(t, cfg)
	j := newDeltaJob(t, b, clock)
	j.round(t, n, 1)
	_, base := remoteCheckpoint(t, b, cfg, 1)
	if h := handleOf(t, base); len(h.Deltas) != 0 {
		t.Fatalf("first checkpoint has %d deltas, want a base", len(h.Deltas))
	}
	var rh RestoreHandle
	for id := 2; id <= 3; id++ {
		j.round(t, n, id)
		var snap KeyedSnapshot
		rh, snap = remoteCheckpoint(t, b, cfg, id)
		h, bh := handleOf(t, snap), handleOf(t, base)
		if len(h.Deltas) != id-1 {
			t.Fatalf("checkpoint %d has %d deltas, want %d", id, len(h.Deltas), id-1)
		}
		if len(h.Files) != len(bh.Files) {
			t.Fatalf("checkpoint %d names %d tables, the base %d", id, len(h.Files), len(bh.Files))
		}
		for i := range h.Files {
			if h.Files[i].Name != bh.Files[i].Name {
				t.Fatalf("checkpoint %d table %d is %s, the base's %s", id, i, h.Files[i].Name, bh.Files[i].Name)
			}
		}
	}
	want := rawState(t, b, all)
	j.round(t, n, 4) // after the checkpoint: not restored
	must(t, b.Close())

	rc := cfg
	rc.Dir = t.TempDir()
	nb, err := OpenBackendRestored(rc, []RestoreHandle{rh})
	must(t, err)
	checkRaw(t, "restore of the delta checkpoint", rawState(t, nb, all), want)
	must(t, nb.Close())

	// Rescale 2 -> 4 -> 1, each step from delta checkpoints of the last.
	handles := []RestoreHandle{rh}
	id := 10
	for _, par := range []int{2, 4, 1} {
		next := map[string]string{}
		var nextHandles []RestoreHandle
		for sub := range par {
			sc := cfg
			sc.Dir, sc.KeyGroupRange = t.TempDir(), keygroup.RangeFor(testMaxP, par, sub)
			sb, err := OpenBackendRestored(sc, handles)
			must(t, err)
			checkRaw(t, fmt.Sprintf("parallelism %d subtask %d", par, sub), rawState(t, sb, all), restrictRaw(want, sc.KeyGroupRange)) // no key of another key group
			sj := newDeltaJob(t, sb, clock)
			id++
			remoteCheckpoint(t, sb, sc, id) // the base of this instance
			sj.round(t, n, 4+par)
			id++
			srh, snap := remoteCheckpoint(t, sb, sc, id)
			if h := handleOf(t, snap); len(h.Deltas) != 1 {
				t.Fatalf("parallelism %d subtask %d: %d deltas, want 1", par, sub, len(h.Deltas))
			}
			maps.Copy(next, rawState(t, sb, sc.KeyGroupRange))
			nextHandles = append(nextHandles, srh)
			must(t, sb.Close())
		}
		want, handles = next, nextHandles
	}
	fc := cfg
	fc.Dir = t.TempDir()
	fb, err := OpenBackendRestored(fc, handles)
	must(t, err)
	defer fb.Close()
	checkRaw(t, "after the rescale 2 -> 4 -> 1", rawState(t, fb, all), want)
}

// TestRemoteDeltaFlushBoundary: commits from another goroutine (as the
// async state API's could make) race every checkpoint of a chain of bases
// and deltas; the restore of each checkpoint holds exactly the keys
// committed in an unbroken prefix: every commit that returned before the
// checkpoint began, none that began after it returned, and no commit
// lost between a base's flush and its list of tables, nor between two
// deltas.
func TestRemoteDeltaFlushBoundary(t *testing.T) {
	cfg := testConfig(t, kindPebbleRemote)
	cfg.WriteCacheBytes = -1
	cfg.Remote.MaxDeltaCheckpoints = 2
	b := open(t, cfg)
	st := b.(*pebbleBackend).st
	cl := startCommitLoop(st)
	type chk struct {
		rh       RestoreHandle
		min, max int64
		deltas   int
	}
	var chks []chk
	after := int64(-1) // started when the last checkpoint returned
	for id := 1; id <= 9; id++ {
		for cl.committed.Load() <= after {
			runtime.Gosched() // a commit that began after the last checkpoint returned
		}
		lo := cl.committed.Load()
		rh, snap := remoteCheckpoint(t, b, cfg, id)
		after = cl.started.Load()
		chks = append(chks, chk{rh: rh, min: lo, max: after, deltas: len(handleOf(t, snap).Deltas)})
	}
	must(t, cl.halt())
	for i, c := range chks {
		if c.deltas != i%3 { // a base, then 2 deltas
			t.Fatalf("checkpoint %d has %d deltas, want %d", i+1, c.deltas, i%3)
		}
	}
	for i, c := range chks {
		rc := cfg
		rc.Dir = t.TempDir()
		rb, err := OpenBackendRestored(rc, []RestoreHandle{c.rh})
		must(t, err)
		cl.checkPrefix(t, i+1, rawState(t, rb, cfg.KeyGroupRange), c.min, c.max)
		must(t, rb.Close())
	}
}

// commitLoop commits key(0), key(1), ... through pebbleStore.dbSet on its
// own goroutine until halted, as a task's writes would race a checkpoint:
// started counts the commits begun, committed those that returned.
type commitLoop struct {
	committed, started atomic.Int64
	stop               chan struct{}
	done               chan error
}

// commitLoopKey is the key of commit i: in key group 0, ordered by i.
func commitLoopKey(i int64) []byte {
	return fmt.Appendf(slices.Clone(kgBound(0)), "w%09d", i)
}

func startCommitLoop(st *pebbleStore) *commitLoop {
	c := &commitLoop{stop: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		for i := int64(0); ; i++ {
			select {
			case <-c.stop:
				c.done <- nil
				return
			default:
			}
			c.started.Store(i + 1)
			if err := st.dbSet(commitLoopKey(i), []byte("v"), nil); err != nil {
				c.done <- err
				return
			}
			c.committed.Store(i + 1)
		}
	}()
	return c
}

// halt stops the loop and returns its commit error, if any.
func (c *commitLoop) halt() error {
	close(c.stop)
	return <-c.done
}

// checkPrefix fails the test unless raw (a restored state, rawState) holds
// exactly the first n commits of the loop, with lo <= n <= hi, and no key
// of the loop after a gap.
func (c *commitLoop) checkPrefix(t *testing.T, chk int, raw map[string]string, lo, hi int64) {
	t.Helper()
	n := int64(0)
	for ; ; n++ {
		if _, ok := raw[string(commitLoopKey(n))]; !ok {
			break
		}
	}
	for k := range raw {
		if k < string(keyGroupsEnd) && (len(k) != len(commitLoopKey(0)) || k >= string(commitLoopKey(n))) {
			t.Fatalf("checkpoint %d: key %q restored after a gap at %d", chk, k, n)
		}
	}
	if n < lo || n > hi {
		t.Fatalf("checkpoint %d restored the first %d commits, want between %d and %d", chk, n, lo, hi)
	}
}
