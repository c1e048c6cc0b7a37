package checkpoint

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kstreamd/kstreamd/state"
)

// TestUnitRemoteObjects: a unit's checkpoints that refer to objects of its
// remote state store (shared files "../remote/<object>") upload none of
// them into the namespace and restore none (no shared file downloaded);
// retention (1 retained) deletes exactly the store's objects neither the
// kept checkpoint nor a marker refers to; a fenced owner's retention
// deletes nothing, not even an object the new owner wrote after the
// claim without a marker yet.
func TestUnitRemoteObjects(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	store := FileStore{Root: filepath.Join(root, "store")}
	rs, err := state.NewRemoteDirStore(filepath.Join(root, "remote"))
	if err != nil {
		t.Fatal(err)
	}
	put := func(names ...string) {
		for _, n := range names {
			w, err := rs.CreateObject(n)
			if err == nil {
				_, err = w.Write([]byte(n))
			}
			if err == nil {
				err = w.Close()
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	listing := func() []string {
		names, err := rs.List("", "")
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(names)
		return names
	}
	local := NewStorage(filepath.Join(root, "staging", "clicks", "units", "1"), "0", 1, nil)
	ns := Namespace{Store: store, Prefix: UnitPrefix("clicks", 1, 0), Local: local, Remote: rs}
	write := func(id int64, objects ...string) {
		m := &Metadata{Version: MetadataVersion, Job: "clicks", CheckpointID: id}
		for _, o := range objects {
			m.SharedFiles = append(m.SharedFiles, "../remote/"+o)
		}
		if err := os.MkdirAll(local.CheckpointDir(id), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := writeMetadata(local.CheckpointDir(id), m, nil); err != nil {
			t.Fatal(err)
		}
	}
	put("o1", "o2", "o3", "o4", "o5")
	a, _, err := Claim(ctx, ns, "a", "fp", 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	write(1, "o1", "o2")
	if err := a.Checkpoint(ctx, 1, UnitCommit{}); err != nil {
		t.Fatal(err)
	}
	put("o3.ref.9.1") // a live instance reads o3
	write(2, "o2", "o4")
	if err := a.Checkpoint(ctx, 2, UnitCommit{}); err != nil {
		t.Fatal(err)
	}
	if err := a.Retain(ctx, a.Seq()); err != nil {
		t.Fatal(err)
	}
	if got, want := listing(), []string{"o2", "o3", "o3.ref.9.1", "o4"}; !slices.Equal(got, want) {
		t.Errorf("after retention the remote store holds %v, want %v", got, want)
	}
	keys, err := store.List(ctx, "clicks/")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if strings.Contains(k, "shared") || strings.Contains(k, "remote") {
			t.Errorf("the namespace holds %s: remote objects must not be uploaded", k)
		}
	}

	b, hd, err := Claim(ctx, Namespace{Store: store, Prefix: ns.Prefix, Local: NewStorage(filepath.Join(root, "b"), "0", 1, nil), Remote: rs}, "b", "fp", 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	put("o6") // b's instance's new table, its marker not listed yet
	if err := a.Retain(ctx, a.Seq()); err != nil && !errors.Is(err, ErrHeadExists) {
		t.Fatalf("zombie retention: %v", err)
	}
	if got, want := listing(), []string{"o2", "o3", "o3.ref.9.1", "o4", "o6"}; !slices.Equal(got, want) {
		t.Errorf("after the zombie's retention the remote store holds %v, want %v", got, want)
	}
	dir, m, err := b.Restore(ctx, hd)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"../remote/o2", "../remote/o4"}; !slices.Equal(m.SharedFiles, want) || m.CheckpointID != 2 {
		t.Errorf("b restored checkpoint %d referring to %v, want 2 referring to %v", m.CheckpointID, m.SharedFiles, want)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "remote")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the restore downloaded remote objects into the staging directory: %v", err)
	}
}
