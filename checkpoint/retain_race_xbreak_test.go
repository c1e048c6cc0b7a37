package checkpoint

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// hookStore is a FileStore that runs afterHeads once, right after the
// first HEAD listing (a List of a prefix ending in HeadPrefix) made
// while it is armed: a write of another member landing between a
// retention's takeover check and its purge.
type hookStore struct {
	FileStore
	afterHeads *func()
}

func (s hookStore) List(ctx context.Context, prefix string) ([]string, error) {
	keys, err := s.FileStore.List(ctx, prefix)
	if f := *s.afterHeads; f != nil && strings.HasSuffix(prefix, HeadPrefix) {
		*s.afterHeads = nil
		f()
	}
	return keys, err
}

// unitCheckpoint stages and completes one checkpoint of o (a MANIFEST
// whose bytes are i) and returns its id.
func unitCheckpoint(t *testing.T, o *Owner, local *Storage, i int) int64 {
	t.Helper()
	ctx := context.Background()
	id := o.NextCheckpointID()
	dir := local.CheckpointDir(id)
	if err := os.MkdirAll(filepath.Join(dir, "op", "0"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "op", "0", "MANIFEST-000001"), []byte(strconv.Itoa(i)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeMetadata(dir, &Metadata{Version: MetadataVersion, Job: "job", CheckpointID: id, Operators: map[string]OperatorMetadata{}}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Reserve(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := o.Checkpoint(ctx, id, UnitCommit{}); err != nil {
		t.Fatalf("checkpoint %d: %v", id, err)
	}
	return id
}

// TestUnitRetainWritesBetweenListingAndPurge: a retention purges its old
// HEADs from the listing its takeover check made (Heads.purgeListed). A
// takeover claim created right after that listing is never deleted (it
// is above the owner's HEAD), the new owner restores the newest
// checkpoint the old one kept, and the old owner's next checkpoint and
// retention are fenced and delete nothing. A HEAD a zombie creates
// below the kept ones after the listing (a number purged before) is left
// by this retention and deleted by the next. The namespace then holds
// exactly the named HEADs and checkpoints.
func TestUnitRetainWritesBetweenListingAndPurge(t *testing.T) {
	ctx := context.Background()
	prefix := UnitPrefix("job", 1, 0)
	setup := func(t *testing.T) (hookStore, *Owner, *Storage, string) {
		root := t.TempDir()
		var hook func()
		store := hookStore{FileStore: FileStore{Root: filepath.Join(root, "store")}, afterHeads: &hook}
		local := NewStorage(filepath.Join(root, "staging-a"), "0", 2, nil)
		o, _, err := Claim(ctx, Namespace{Store: store, Prefix: prefix, Local: local}, "a", "fp", 1, 2)
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= 4; i++ {
			unitCheckpoint(t, o, local, i)
			if err := o.Retain(ctx, o.Seq()); err != nil {
				t.Fatal(err)
			}
		}
		unitCheckpoint(t, o, local, 5) // chk-5, HEAD-6
		return store, o, local, root
	}
	namespace := func(t *testing.T, store hookStore, want ...string) {
		t.Helper()
		got, err := store.FileStore.List(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			want[i] = prefix + want[i]
		}
		if !slices.Equal(got, want) {
			t.Fatalf("the namespace holds\n%q\nwant\n%q", got, want)
		}
	}

	t.Run("takeover", func(t *testing.T) {
		store, a, _, root := setup(t)
		var b *Owner
		var bHead Head
		*store.afterHeads = func() {
			var err error
			b, bHead, err = Claim(ctx, Namespace{Store: store.FileStore, Prefix: prefix, Local: NewStorage(filepath.Join(root, "staging-b"), "0", 2, nil)}, "b", "fp", 1, 2)
			if err != nil {
				t.Error(err)
			}
		}
		if err := a.Retain(ctx, a.Seq()); err != nil {
			t.Fatalf("retention whose check passed before the claim: %v", err)
		}
		if b == nil || bHead.Seq != 6 || bHead.CheckpointID != 5 || b.Seq() != 7 {
			t.Fatalf("claim read HEAD-%d naming chk-%d and claimed HEAD-%d, want HEAD-6, chk-5, HEAD-7", bHead.Seq, bHead.CheckpointID, b.Seq())
		}
		namespace(t, store, "HEAD-5", "HEAD-6", "HEAD-7", "chk-4/_metadata", "chk-5/_metadata")
		dir, m, err := b.Restore(ctx, bHead)
		if err != nil || m.CheckpointID != 5 {
			t.Fatalf("the new owner's restore: %v, %+v", err, m)
		}
		if got, err := os.ReadFile(filepath.Join(dir, "op", "0", "MANIFEST-000001")); err != nil || string(got) != "5" {
			t.Fatalf("restored MANIFEST %q, %v; want %q", got, err, "5")
		}
		// The old owner is fenced: its retention deletes nothing.
		if err := a.Retain(ctx, a.Seq()); !errors.Is(err, ErrHeadExists) {
			t.Fatalf("the old owner's next retention: %v, want ErrHeadExists", err)
		}
		namespace(t, store, "HEAD-5", "HEAD-6", "HEAD-7", "chk-4/_metadata", "chk-5/_metadata")
	})

	t.Run("zombie HEAD below the kept ones", func(t *testing.T) {
		store, a, local, _ := setup(t)
		*store.afterHeads = func() {
			if err := (Heads{Store: store.FileStore, Prefix: prefix}).Create(ctx, Head{Seq: 2, CheckpointID: 1, Owner: "zombie", Fingerprint: "fp", Units: 1}); err != nil {
				t.Error(err)
			}
		}
		if err := a.Retain(ctx, a.Seq()); err != nil {
			t.Fatal(err)
		}
		// Not in this retention's listing, so left (f2a2eb3's second
		// listing deleted it here already); it names no kept checkpoint.
		namespace(t, store, "HEAD-2", "HEAD-5", "HEAD-6", "chk-4/_metadata", "chk-5/_metadata")
		unitCheckpoint(t, a, local, 6) // chk-6, HEAD-7
		if err := a.Retain(ctx, a.Seq()); err != nil {
			t.Fatal(err)
		}
		namespace(t, store, "HEAD-6", "HEAD-7", "chk-5/_metadata", "chk-6/_metadata")
	})
}
