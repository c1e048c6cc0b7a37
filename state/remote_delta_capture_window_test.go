package state

import (
	"runtime"
	"testing"
)

// TestRemoteDeltaCaptureWindowRead: a read on another goroutine (an
// asynchronous state read, here a scan after flushCache) that falls
// between the delta checkpoint's capture of the write cache (which marks
// the entries clean) and the pending commit's registration must wait for
// the captured entries, not read Pebble without them. The window is held
// open by holding the delta log's lock, which the checkpoint's cutDelta
// takes after the capture. On f47cda3 the read returns the values of the
// base checkpoint (count 1 instead of 2).
func TestRemoteDeltaCaptureWindowRead(t *testing.T) {
	cfg := testConfig(t, kindPebbleRemote)
	b := open(t, cfg)
	defer func() { must(t, b.Close()) }()
	st := b.(*pebbleBackend).st
	count := must1(GetValueState(b, ValueStateDescriptor[int64]{Name: "count", Serializer: Int64Serializer{}}))(t)
	const n = 200
	set := func(v int64) {
		for i := range n {
			b.SetCurrentKey(testKey(i))
			must(t, count.Update(v))
		}
	}
	set(1)
	remoteCheckpoint(t, b, cfg, 1) // the base
	base := stateEntries(t, b, cfg)
	set(2) // dirty in the write cache: the delta checkpoint captures them

	st.delta.mu.Lock() // the checkpoint blocks in cutDelta, after its capture
	chk := make(chan RestoreHandle)
	go func() {
		rh, _ := remoteCheckpoint(t, b, cfg, 2)
		chk <- rh
	}()
	for {
		st.cache.mu.Lock()
		nd := st.cache.ndirty
		st.cache.mu.Unlock()
		if nd == 0 {
			break
		}
		runtime.Gosched()
	}
	read := make(chan map[string]string)
	go func() { read <- rawState(t, b, cfg.KeyGroupRange) }()
	var early map[string]string
	for i := 0; i < 1000 && early == nil; i++ {
		select {
		case early = <-read:
		default:
			runtime.Gosched()
		}
	}
	st.delta.mu.Unlock()
	rh := <-chk
	got := early
	if got == nil {
		got = <-read
	}
	must(t, st.settle())
	want := stateEntries(t, b, cfg)
	for k, v := range want {
		if base[k] == v {
			t.Fatalf("key %q: %q as in the base: the second write did not change it", k, v)
		}
		if got[k] != v {
			t.Fatalf("read during the checkpoint: key %q = %q, want %q (Pebble read without the captured entries)", k, got[k], v)
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

// stateEntries is rawState of b without the metadata space.
func stateEntries(t *testing.T, b KeyedStateBackend, cfg BackendConfig) map[string]string {
	t.Helper()
	all := rawState(t, b, cfg.KeyGroupRange)
	out := map[string]string{}
	for k, v := range all {
		if k < string(keyGroupsEnd) {
			out[k] = v
		}
	}
	if len(out) == 0 {
		t.Fatal("no state entries")
	}
	return out
}
