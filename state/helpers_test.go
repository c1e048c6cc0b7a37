package state

import (
	"encoding/binary"
	"iter"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/objstorage/remote"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// epoch is time zero of the fake clock.
var epoch = time.UnixMilli(1_700_000_000_000)

// fakeClock is a Clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: epoch} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// at sets the clock to epoch + d.
func (c *fakeClock) at(d time.Duration) {
	c.mu.Lock()
	c.t = epoch.Add(d)
	c.mu.Unlock()
}

var backendKinds = []string{KindHashmap, KindPebble}

// kindPebbleRemote is a test-only kind name: the pebble backend with a
// remote store (BackendConfig.Remote), see testConfig.
const kindPebbleRemote = "pebble-remote"

// conformanceKinds are the backends the conformance suite runs on: both
// kinds and the disaggregated Pebble backend.
var conformanceKinds = []string{KindHashmap, KindPebble, kindPebbleRemote, kindPebbleRemoteS3}

// kindPebbleRemoteS3 is a test-only kind name: the pebble backend with a
// remote store on an in-process S3 server (testkit.S3Server), see
// testConfig.
const kindPebbleRemoteS3 = "pebble-remote-s3"

// remoteKinds are the disaggregated kinds: a directory store and an S3
// store.
var remoteKinds = []string{kindPebbleRemote, kindPebbleRemoteS3}

// forRemoteKinds runs f as a subtest for each of remoteKinds.
func forRemoteKinds(t *testing.T, f func(t *testing.T, kind string)) {
	for _, kind := range remoteKinds {
		t.Run(kind, func(t *testing.T) { f(t, kind) })
	}
}

// testS3Store starts an in-process S3 server for the test and returns
// the remote store of its bucket, under a prefix.
func testS3Store(t testing.TB) remote.Storage {
	t.Helper()
	addr := testkit.S3Server(t, "state", true)
	cl, err := minio.New(addr, &minio.Options{Creds: credentials.NewStaticV4(testkit.S3AccessKey, testkit.S3SecretKey, ""), BucketLookup: minio.BucketLookupPath})
	if err != nil {
		t.Fatal(err)
	}
	return NewRemoteS3Store(cl, "state", "job/remote/")
}

const testMaxP = 128

// testConfig returns the config of a backend owning every key group.
func testConfig(t testing.TB, kind string) BackendConfig {
	cfg := BackendConfig{Kind: kind, MaxParallelism: testMaxP, KeyGroupRange: keygroup.Range{Start: 0, End: testMaxP - 1}}
	switch kind {
	case kindPebbleRemote:
		root := t.TempDir()
		cfg.Kind, cfg.Remote = KindPebble, &RemoteConfig{Dir: filepath.Join(root, RemoteDirName), CacheBytes: 1 << 20}
	case kindPebbleRemoteS3:
		root := t.TempDir()
		cfg.Kind, cfg.Remote = KindPebble, &RemoteConfig{Dir: filepath.Join(root, RemoteDirName), CacheBytes: 1 << 20, Store: testS3Store(t)}
	}
	if cfg.Kind == KindPebble {
		cfg.Dir = t.TempDir()
	}
	return cfg
}

// open opens a backend and closes it at the end of the test.
func open(t testing.TB, cfg BackendConfig) KeyedStateBackend {
	t.Helper()
	b, err := OpenBackend(cfg)
	if err != nil {
		t.Fatalf("OpenBackend: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// storedEntries returns the stored entry count of a backend.
func storedEntries(t testing.TB, b KeyedStateBackend) int {
	t.Helper()
	n, err := b.core().st.countEntries()
	if err != nil {
		t.Fatalf("countEntries: %v", err)
	}
	return n
}

// collect drains an iterator, failing the test on an error.
func collect[T any](t testing.TB, seq iter.Seq2[T, error]) []T {
	t.Helper()
	var out []T
	for v, err := range seq {
		if err != nil {
			t.Fatalf("iteration: %v", err)
		}
		out = append(out, v)
	}
	return out
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// must1 is must for a call returning a value: must1(f())(t).
func must1[T any](v T, err error) func(testing.TB) T {
	return func(t testing.TB) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// u64key is the serialized key of n: 8 bytes big-endian.
func u64key(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }
