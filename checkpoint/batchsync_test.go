package checkpoint

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestUnitCheckpointSyncFailureNamesNothing: when the FileBatch's one
// directory-fsync pass fails (the marker, files and _metadata of chk-2
// are linked but not known durable), the checkpoint fails before its
// HEAD: HEAD-2 is not created, the newest HEAD still names chk-1 and
// restores it, and the next checkpoint of the same owner (chk-3) succeeds
// and is the one a HEAD names.
func TestUnitCheckpointSyncFailureNamesNothing(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	failing := false
	boom := errors.New("fsync failed")
	store := FileStore{Root: filepath.Join(root, "store"), hooks: &fileStoreHooks{syncDir: func(dir string) error {
		if failing {
			return boom
		}
		return nil
	}}}
	local := NewStorage(filepath.Join(root, "staging"), "0", 3, nil)
	ns := Namespace{Store: store, Prefix: UnitPrefix("clicks", 1, 0), Local: local}
	o, _, err := Claim(ctx, ns, "a", "fp", 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	stage := func(id int64, content string) {
		t.Helper()
		dir := local.CheckpointDir(id)
		if err := os.MkdirAll(filepath.Join(dir, "op", "0"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "op", "0", "state"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := writeMetadata(dir, &Metadata{Version: MetadataVersion, Job: "clicks", CheckpointID: id, Operators: map[string]OperatorMetadata{}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	checkpoint := func(id int64) error {
		t.Helper()
		got, err := o.Reserve(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if got != id {
			t.Fatalf("reserved %d, want %d", got, id)
		}
		stage(id, "state of "+string(rune('0'+id)))
		return o.Checkpoint(ctx, id, UnitCommit{})
	}
	if err := checkpoint(1); err != nil {
		t.Fatal(err)
	}
	failing = true
	if err := checkpoint(2); !errors.Is(err, boom) {
		t.Fatalf("checkpoint 2 with a failing fsync: err %v, want it", err)
	}
	failing = false
	hd, err := ns.Heads().Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if hd.CheckpointID != 1 {
		t.Fatalf("newest HEAD names chk-%d after chk-2's sync failed, want chk-1", hd.CheckpointID)
	}
	// chk-2's objects are in the store (linked before the failed pass),
	// no HEAD names them.
	keys, err := store.List(ctx, ns.Prefix+"chk-2/")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(keys, ns.Prefix+"chk-2/"+MetadataFile) || !slices.Contains(keys, ns.Prefix+"chk-2/"+ClaimFile) {
		t.Fatalf("chk-2 holds %q, want its marker and _metadata linked", keys)
	}
	if err := checkpoint(3); err != nil {
		t.Fatal(err)
	}
	hd, err = ns.Heads().Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if hd.CheckpointID != 3 || hd.CheckpointClaim == 0 {
		t.Fatalf("newest HEAD %+v, want one naming chk-3 with its claim", hd)
	}
	o2, _, err := Claim(ctx, Namespace{Store: store, Prefix: ns.Prefix, Local: NewStorage(filepath.Join(root, "staging2"), "0", 3, nil)}, "b", "fp", 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	dir, m, err := o2.Restore(ctx, hd)
	if err != nil {
		t.Fatal(err)
	}
	if m.CheckpointID != 3 {
		t.Fatalf("restored metadata of chk-%d, want chk-3", m.CheckpointID)
	}
	b, err := os.ReadFile(filepath.Join(dir, "op", "0", "state"))
	if err != nil || string(b) != "state of 3" {
		t.Fatalf("restored state %q (%v), want %q", b, err, "state of 3")
	}
}
