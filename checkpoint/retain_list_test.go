package checkpoint

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// listingStore is a FileStore that records the prefix of every List.
type listingStore struct {
	FileStore
	lists *[]string
}

func (s listingStore) List(ctx context.Context, prefix string) ([]string, error) {
	*s.lists = append(*s.lists, prefix)
	return s.FileStore.List(ctx, prefix)
}

// TestUnitRetainListsHeadsOnce: a unit's retention after each checkpoint
// lists its namespace once and then its HEADs once (the check that no
// newer owner claimed, whose listing the purge of the old HEADs reuses),
// not a second time for the purge; and it still keeps exactly the HEADs
// and checkpoints of the newest two, deleting the rest.
func TestUnitRetainListsHeadsOnce(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	var lists []string
	store := listingStore{FileStore: FileStore{Root: filepath.Join(root, "store")}, lists: &lists}
	local := NewStorage(filepath.Join(root, "staging"), "0", 2, nil)
	prefix := UnitPrefix("job", 1, 0)
	o, _, err := Claim(ctx, Namespace{Store: store, Prefix: prefix, Local: local}, "a", "fp", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 5; i++ {
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
			t.Fatal(err)
		}
		lists = nil
		if err := o.Retain(ctx, o.Seq()); err != nil {
			t.Fatal(err)
		}
		if want := []string{prefix, prefix + HeadPrefix}; !slices.Equal(lists, want) {
			t.Fatalf("retention after checkpoint %d listed %q, want %q", id, lists, want)
		}
	}
	got, err := store.FileStore.List(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{prefix + "HEAD-5", prefix + "HEAD-6", prefix + "chk-4/_metadata", prefix + "chk-5/_metadata"}
	if !slices.Equal(got, want) {
		t.Fatalf("the namespace holds %q, want %q", got, want)
	}
}
