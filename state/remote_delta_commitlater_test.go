package state

import (
	"fmt"
	"maps"
	"runtime"
	"testing"
)

// dbRaw returns every key and value of st's Pebble DB as committed now,
// without waiting for a pending commit (what a read that skipped settle
// would see).
func dbRaw(t *testing.T, st *pebbleStore) map[string]string {
	t.Helper()
	it, err := st.db.NewIter(nil)
	must(t, err)
	defer it.Close()
	out := map[string]string{}
	for ok := it.First(); ok; ok = it.Next() {
		out[string(it.Key())] = string(it.Value())
	}
	must(t, it.Error())
	return out
}

// TestRemoteDeltaCommitsCapturedLater: the synchronous part of a delta
// checkpoint captures the write cache's dirty entries into the delta and
// leaves their commit to Pebble to another goroutine (held here by
// commitLaterHook until released). The checkpoint completes while Pebble
// does not hold the captured entries yet; a write made after it and a
// read (an iterator, after flushing the cache) wait for the commit, so
// the later write shadows the captured one and the read sees both; the
// checkpoint restores exactly the captured state. It fails with the
// cache flushed and committed in the synchronous part (nothing pending),
// and with the pending commit not awaited by commit and flushCache.
func TestRemoteDeltaCommitsCapturedLater(t *testing.T) {
	cfg := testConfig(t, kindPebbleRemote)
	b := open(t, cfg)
	defer func() { must(t, b.Close()) }()
	st := b.(*pebbleBackend).st
	count := must1(GetValueState(b, ValueStateDescriptor[int64]{Name: "count", Serializer: Int64Serializer{}}))(t)
	const n = 200
	set := func(lo, hi int, v int64) {
		for i := lo; i < hi; i++ {
			b.SetCurrentKey(testKey(i))
			must(t, count.Update(v))
		}
	}
	set(0, n, 1)
	remoteCheckpoint(t, b, cfg, 1) // the base
	base := dbRaw(t, st)

	release := make(chan struct{})
	entered := make(chan struct{})
	commitLaterHook = func() { close(entered); <-release }
	defer func() { commitLaterHook = nil }()
	set(0, n, 2)
	rh, snap := remoteCheckpoint(t, b, cfg, 2)
	commitLaterHook = nil
	if got := len(handleOf(t, snap).Deltas); got != 1 {
		t.Fatalf("checkpoint 2 has %d deltas, want 1", got)
	}
	if st.pending.Load() == nil {
		t.Fatal("no commit pending after the delta checkpoint: the synchronous part committed the captured entries")
	}
	<-entered
	if got := dbRaw(t, st); !maps.Equal(got, base) {
		t.Fatalf("Pebble changed before the pending commit ran: %d keys, base %d", len(got), len(base))
	}
	// While the captured commit is held: a read of everything (an
	// iterator after flushing the clean cache) on one goroutine, and a
	// direct commit of one captured key on another; then the release.
	var k0 string
	for k := range base {
		if k < string(keyGroupsEnd) && (k0 == "" || k < k0) {
			k0 = k
		}
	}
	read := make(chan map[string]string)
	go func() { read <- rawState(t, b, cfg.KeyGroupRange) }()
	wrote := make(chan error)
	go func() { wrote <- st.dbSet([]byte(k0), []byte("later"), nil) }()
	for range 100 {
		runtime.Gosched()
	}
	close(release)
	live := <-read
	must(t, <-wrote)
	must(t, st.settle())
	after := dbRaw(t, st)
	if after[k0] != "later" {
		t.Fatalf("key %q: %q, want the write made after the checkpoint (the captured commit overtook it)", k0, after[k0])
	}
	delete(after, k0)
	delete(live, k0)
	if !maps.Equal(after, live) {
		t.Fatal("the read during the pending commit missed the captured entries")
	}
	for i := 1; i < n; i++ {
		b.SetCurrentKey(testKey(i))
		v, ok, err := count.Value()
		must(t, err)
		if !ok || v != 2 {
			t.Fatalf("key %d: %d (found %v) after the pending commit, want 2", i, v, ok)
		}
	}

	rc := cfg
	rc.Dir = t.TempDir()
	rb, err := OpenBackendRestored(rc, []RestoreHandle{rh})
	must(t, err)
	defer func() { must(t, rb.Close()) }()
	rcount := must1(GetValueState(rb, ValueStateDescriptor[int64]{Name: "count", Serializer: Int64Serializer{}}))(t)
	for i := range n {
		rb.SetCurrentKey(testKey(i))
		v, ok, err := rcount.Value()
		must(t, err)
		if !ok || v != 2 {
			t.Fatalf("restored key %d: %d (found %v), want 2", i, v, ok)
		}
	}
}

// testKey is the key of entry i of TestRemoteDeltaCommitsCapturedLater.
func testKey(i int) []byte { return fmt.Appendf(nil, "k%d", i) }
