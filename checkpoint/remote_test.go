package checkpoint

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/objstorage/remote"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/state"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// TestRemoteStateRetention: 50 checkpoints of a keyed operator on the
// disaggregated Pebble backend, committed into a Storage retaining 3,
// with the parallelism changed every 8 checkpoints (1 -> 2 -> 4 -> 1 ->
// ..., a restore by reference from the latest checkpoint) and, at
// checkpoint 30, a restore from an older retained checkpoint (protected,
// Flink's NO_CLAIM). After every Prune each object a kept checkpoint
// refers to exists; every restore gives exactly the restored checkpoint's
// state; once the backends closed, the remote directory holds exactly the
// objects the kept checkpoints refer to, and no reference marker. It runs
// on the directory store and on an S3 store (an in-process S3 server).
func TestRemoteStateRetention(t *testing.T) {
	for _, kind := range []string{"filesystem", "s3"} {
		t.Run(kind, func(t *testing.T) { testRemoteStateRetention(t, kind) })
	}
}

func testRemoteStateRetention(t *testing.T, kind string) {
	const (
		maxP   = 16
		keys   = 400
		rounds = 50
	)
	s := NewStorage(t.TempDir(), "job", 3, nil)
	// At most 3 delta checkpoints after a base: the restores at every 8th
	// checkpoint and of checkpoint 28 start from delta checkpoints, and
	// retention sees chains begin and end.
	remoteCfg := &state.RemoteConfig{Dir: s.RemoteDir(), CacheBytes: -1, MaxDeltaCheckpoints: 3}
	if kind == "s3" {
		addr := testkit.S3Server(t, "state", true)
		cl, err := minio.New(addr, &minio.Options{Creds: credentials.NewStaticV4(testkit.S3AccessKey, testkit.S3SecretKey, ""), BucketLookup: minio.BucketLookupPath})
		if err != nil {
			t.Fatal(err)
		}
		remoteCfg.Store = state.NewRemoteS3Store(cl, "state", "job/remote/")
		s.SetRemoteStore(remoteCfg.Store)
	}
	store, err := state.NewRemoteDirStore(s.RemoteDir())
	if err != nil {
		t.Fatal(err)
	}
	if remoteCfg.Store != nil {
		store = remoteCfg.Store
	}
	desc := state.ValueStateDescriptor[int64]{Name: "count", Serializer: state.Int64Serializer{}}
	open := func(r keygroup.Range, handles []state.RestoreHandle) state.KeyedStateBackend {
		t.Helper()
		b, err := state.OpenBackendRestored(state.BackendConfig{Kind: state.KindPebble, Dir: t.TempDir(),
			MaxParallelism: maxP, KeyGroupRange: r, Remote: remoteCfg, WriteCacheBytes: -1}, handles)
		if err != nil {
			t.Fatalf("open %s: %v", r, err)
		}
		return b
	}
	key := func(i int) []byte { return []byte(fmt.Sprintf("key-%04d", i)) }
	// write sets every owned key to v; check asserts it.
	write := func(b state.KeyedStateBackend, v int64) {
		st, err := state.GetValueState(b, desc)
		if err != nil {
			t.Fatal(err)
		}
		for i := range keys {
			if k := key(i); b.KeyGroupRange().Contains(keygroup.Assign(k, maxP)) {
				b.SetCurrentKey(k)
				if err := st.Update(v + int64(i)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	check := func(bs []state.KeyedStateBackend, v int64) {
		t.Helper()
		seen := 0
		for _, b := range bs {
			st, err := state.GetValueState(b, desc)
			if err != nil {
				t.Fatal(err)
			}
			for i := range keys {
				if k := key(i); b.KeyGroupRange().Contains(keygroup.Assign(k, maxP)) {
					b.SetCurrentKey(k)
					got, ok, err := st.Value()
					if err != nil || !ok || got != v+int64(i) {
						t.Fatalf("%s = %d, %t, %v; want %d", k, got, ok, err, v+int64(i))
					}
					seen++
				}
			}
		}
		if seen != keys {
			t.Fatalf("checked %d keys, want %d", seen, keys)
		}
	}
	type chk struct {
		id      int64
		handles []state.RestoreHandle
		value   int64
	}
	var done []chk
	deltaSnaps := 0
	backends := []state.KeyedStateBackend{open(keygroup.Range{Start: 0, End: maxP - 1}, nil)}
	closeAll := func() {
		for _, b := range backends {
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
		}
		backends = nil
	}
	restore := func(c chk, par int) {
		closeAll()
		for i := range par {
			backends = append(backends, open(keygroup.RangeFor(maxP, par, i), c.handles))
		}
		check(backends, c.value)
	}
	pars := []int{2, 4, 1}
	for id := int64(1); id <= rounds; id++ {
		v := id * 1000
		for _, b := range backends {
			write(b, v)
		}
		dir := s.CheckpointDir(id)
		c := chk{id: id, value: v}
		var shared []string
		for i, b := range backends {
			fin, err := state.SnapshotKeyed(b, state.SnapshotTarget{Dir: dir, TaskPath: fmt.Sprintf("op/%d", i), SharedDir: s.SharedDir()})
			if err != nil {
				t.Fatal(err)
			}
			snap, err := fin(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			shared = append(shared, snap.SharedFiles...)
			if bytes.Contains(snap.Handle, []byte(`"delta":true`)) {
				deltaSnaps++
			}
			c.handles = append(c.handles, state.RestoreHandle{Handle: snap.Handle, Dir: dir, SharedDir: s.SharedDir()})
		}
		m := &Metadata{Version: MetadataVersion, Job: "job", CheckpointID: id, MaxParallelism: maxP,
			Timestamp: time.Unix(id, 0).UTC(), Operators: map[string]OperatorMetadata{}, SharedFiles: shared}
		if err := writeMetadata(dir, m, nil); err != nil {
			t.Fatal(err)
		}
		done = append(done, c)
		if err := s.Prune(); err != nil {
			t.Fatalf("checkpoint %d: Prune: %v", id, err)
		}
		assertReferencedExist(t, s, store)
		switch {
		case id == 30:
			// Restore the oldest retained checkpoint (28), protected.
			old := done[len(done)-3]
			s.Protect(s.CheckpointDir(old.id))
			restore(old, 3)
		case id%8 == 0:
			restore(c, pars[int(id/8-1)%len(pars)])
		}
	}
	closeAll()
	if deltaSnaps < rounds/2 {
		t.Fatalf("%d snapshots were delta checkpoints, want at least %d", deltaSnaps, rounds/2)
	}
	if err := s.Prune(); err != nil {
		t.Fatal(err)
	}
	assertReferencedExist(t, s, store)
	refs, err := s.SharedRefCounts()
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for f := range refs {
		want = append(want, strings.TrimPrefix(f, "../"+state.RemoteDirName+"/"))
	}
	sort.Strings(want)
	if !slices.ContainsFunc(want, func(n string) bool { return strings.HasPrefix(n, "delta-") }) {
		t.Fatalf("the kept checkpoints refer to no delta object: %v", want)
	}
	got, err := store.List("", "")
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(got)
	if !slices.Equal(got, want) {
		t.Fatalf("remote store after retention:\n%v\nwant exactly the referenced objects\n%v", got, want)
	}
	infos, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, in := range infos {
		ids = append(ids, in.ID)
	}
	if !slices.Equal(ids, []int64{28, 48, 49, 50}) {
		t.Fatalf("kept checkpoints %v, want [28 48 49 50] (28 protected)", ids)
	}
	// The oldest kept checkpoint still restores exactly.
	restore(done[27], 2)
	closeAll()
}

// assertReferencedExist fails when an object a kept checkpoint refers to
// is missing from store.
func assertReferencedExist(t *testing.T, s *Storage, store remote.Storage) {
	t.Helper()
	refs, err := s.SharedRefCounts()
	if err != nil {
		t.Fatal(err)
	}
	for f := range refs {
		name, ok := strings.CutPrefix(f, "../"+state.RemoteDirName+"/")
		if !ok {
			t.Fatalf("referenced %s is not a remote object", f)
		}
		if _, err := store.Size(name); err != nil {
			t.Fatalf("referenced %s: %v", f, err)
		}
	}
}
