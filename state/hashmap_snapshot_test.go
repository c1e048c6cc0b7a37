package state

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestHashmapSnapshotKeyedIsAsynchronous: the synchronous part of a hashmap
// checkpoint snapshot writes nothing; the state may then change, also while
// the asynchronous part writes; the file holds the state as of the
// synchronous part, byte for byte what Snapshot writes for it (expired TTL
// entries left out), and restores to it.
func TestHashmapSnapshotKeyedIsAsynchronous(t *testing.T) {
	clock := newFakeClock()
	cfg := testConfig(t, KindHashmap)
	cfg.Clock = clock
	b := open(t, cfg)
	vd := ValueStateDescriptor[int64]{Name: "v", Serializer: Int64Serializer{}}
	ld := ListStateDescriptor[string]{Name: "l", Serializer: StringSerializer{}}
	md := MapStateDescriptor[string, string]{Name: "m", KeySerializer: StringSerializer{}, ValueSerializer: StringSerializer{}}
	td := ValueStateDescriptor[string]{Name: "ttl", Serializer: StringSerializer{}, TTL: &StateTtlConfig{TTL: time.Second}}
	v := must1(GetValueState(b, vd))(t)
	l := must1(GetListState(b, ld))(t)
	m := must1(GetMapState(b, md))(t)
	tv := must1(GetValueState(b, td))(t)
	keys := []string{"a", "b", "c", "d"}
	for i, k := range keys {
		b.SetCurrentKey([]byte(k))
		must(t, v.Update(int64(i)))
		for j := range 5 {
			must(t, l.Add(k+string(rune('0'+j))))
		}
		must(t, m.Put("x", k))
		must(t, m.Put("y", k))
	}
	b.SetCurrentKey([]byte("old"))
	must(t, tv.Update("expires"))
	clock.at(1200 * ms)
	b.SetCurrentKey([]byte("new"))
	must(t, tv.Update("lives"))

	cpDir := t.TempDir()
	target := SnapshotTarget{Dir: cpDir, TaskPath: "op/0"}
	write, err := SnapshotKeyed(b, target)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(cpDir, "op", "0", SnapshotFileName)
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Fatalf("snapshot file after the synchronous part: %v, want none yet", err)
	}
	refDir := t.TempDir()
	must(t, b.(Snapshotter).Snapshot(refDir)) // the same state, written synchronously

	// Change everything, before and while the asynchronous part runs.
	mutate := func(round int) {
		for _, k := range keys {
			b.SetCurrentKey([]byte(k))
			must(t, v.Update(int64(100+round)))
			must(t, l.Add("later")) // appends to the stored list bytes
			must(t, m.Put("x", "changed"))
			must(t, m.Remove("y"))
			must(t, m.Put("z", "new"))
		}
		b.SetCurrentKey([]byte("c"))
		must(t, l.Clear())
		b.SetCurrentKey([]byte("e"))
		must(t, v.Update(-1))
	}
	mutate(0)
	done := make(chan error, 1)
	var snap KeyedSnapshot
	go func() {
		var err error
		snap, err = write(context.Background())
		done <- err
	}()
	for i := 1; i <= 50; i++ {
		mutate(i)
	}
	must(t, <-done)

	got, err := os.ReadFile(file)
	must(t, err)
	want, err := os.ReadFile(filepath.Join(refDir, SnapshotFileName))
	must(t, err)
	if !bytes.Equal(got, want) {
		t.Fatalf("asynchronous snapshot (%d bytes) differs from Snapshot's file (%d bytes) for the same state", len(got), len(want))
	}
	if snap.Bytes != int64(len(got)) {
		t.Fatalf("KeyedSnapshot.Bytes = %d, want the file size %d", snap.Bytes, len(got))
	}

	rcfg := testConfig(t, KindHashmap)
	rcfg.Clock = clock
	rb, err := OpenBackendRestored(rcfg, []RestoreHandle{{Handle: snap.Handle, Dir: cpDir}})
	must(t, err)
	t.Cleanup(func() { _ = rb.Close() })
	rv := must1(GetValueState(rb, vd))(t)
	rl := must1(GetListState(rb, ld))(t)
	rm := must1(GetMapState(rb, md))(t)
	rt := must1(GetValueState(rb, td))(t)
	for i, k := range keys {
		rb.SetCurrentKey([]byte(k))
		if n, ok, err := rv.Value(); err != nil || !ok || n != int64(i) {
			t.Fatalf("key %s: restored value %d (found %v, %v), want %d", k, n, ok, err, i)
		}
		wantList := []string{k + "0", k + "1", k + "2", k + "3", k + "4"}
		if got := collect(t, rl.Get()); !slices.Equal(got, wantList) {
			t.Fatalf("key %s: restored list %q, want %q", k, got, wantList)
		}
		for _, uk := range []string{"x", "y"} {
			if got, ok, err := rm.Get(uk); err != nil || !ok || got != k {
				t.Fatalf("key %s: restored map[%s] = %q (found %v, %v), want %q", k, uk, got, ok, err, k)
			}
		}
		if ok, err := rm.Contains("z"); err != nil || ok {
			t.Fatalf("key %s: restored map has z (%v), written after the snapshot", k, err)
		}
	}
	rb.SetCurrentKey([]byte("e"))
	if _, ok, _ := rv.Value(); ok {
		t.Fatal("key e, written after the snapshot, was restored")
	}
	if n := storedEntries(t, rb); n != 4+4+8+1 {
		t.Fatalf("restored %d entries, want 17 (the expired TTL value left out)", n)
	}
	rb.SetCurrentKey([]byte("new"))
	if s, ok, err := rt.Value(); err != nil || !ok || s != "lives" {
		t.Fatalf("restored TTL value %q (found %v, %v), want lives", s, ok, err)
	}
}

// TestHashmapSnapshotKeyedClosed: a closed backend refuses the snapshot in
// the synchronous part.
func TestHashmapSnapshotKeyedClosed(t *testing.T) {
	b := open(t, testConfig(t, KindHashmap))
	must(t, b.Close())
	if _, err := SnapshotKeyed(b, SnapshotTarget{Dir: t.TempDir(), TaskPath: "op/0"}); err != ErrClosed {
		t.Fatalf("SnapshotKeyed after Close = %v, want ErrClosed", err)
	}
}
