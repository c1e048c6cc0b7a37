package checkpoint

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// syncRecorder records the directories FileStore fsyncs (its hooks).
type syncRecorder struct{ dirs []string }

func (r *syncRecorder) syncDir(dir string) error {
	r.dirs = append(r.dirs, dir)
	return nil
}

// onlyParents drops the syncs of dir itself: atomicfile.Write's fsync of
// the key's own directory after its link, which the test does not count.
func onlyParents(dirs []string, own ...string) []string {
	var out []string
	for _, d := range dirs {
		if !slices.Contains(own, d) {
			out = append(out, d)
		}
	}
	return out
}

// TestFileStoreSyncsCreatedDirectories: a unit's upload creates the
// directories of a new checkpoint (chk-<id>/<operator>/<subtask>/) and its
// HEAD follows; atomicfile.Write fsyncs only the key's file and its own
// directory, so without more a crash after the HEAD could leave the HEAD
// naming a chk-<id> whose directory entry never reached the disk. Create
// and Upload fsync the parent of every directory they create, deepest
// first, and nothing more once the directories exist.
func TestFileStoreSyncsCreatedDirectories(t *testing.T) {
	ctx := context.Background()
	rec := &syncRecorder{}
	root := filepath.Join(t.TempDir(), "store")
	s := FileStore{Root: root, hooks: &fileStoreHooks{syncDir: rec.syncDir}}
	if err := s.Create(ctx, "job/units/0/0/chk-1/count/0/data", []byte("x")); err != nil {
		t.Fatal(err)
	}
	want := []string{
		filepath.Join(root, "job/units/0/0/chk-1/count"),
		filepath.Join(root, "job/units/0/0/chk-1"),
		filepath.Join(root, "job/units/0/0"),
		filepath.Join(root, "job/units/0"),
		filepath.Join(root, "job/units"),
		filepath.Join(root, "job"),
		root,
		filepath.Dir(root),
	}
	if got := onlyParents(rec.dirs, filepath.Join(root, "job/units/0/0/chk-1/count/0")); !slices.Equal(got, want) {
		t.Fatalf("synced %q, want %q", got, want)
	}
	rec.dirs = nil
	src := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(src, []byte("more"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Upload(ctx, "job/units/0/0/chk-1/count/0/more", src); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, "job/units/0/0/HEAD-2", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if got := onlyParents(rec.dirs, filepath.Join(root, "job/units/0/0/chk-1/count/0"), filepath.Join(root, "job/units/0/0")); len(got) != 0 {
		t.Fatalf("synced %q for keys in existing directories, want nothing more", got)
	}
	rec.dirs = nil
	if err := s.Create(ctx, "job/units/0/0/chk-2/_claim", nil); err != nil {
		t.Fatal(err)
	}
	if got, want := onlyParents(rec.dirs, filepath.Join(root, "job/units/0/0/chk-2")), []string{filepath.Join(root, "job/units/0/0")}; !slices.Equal(got, want) {
		t.Fatalf("synced %q for a new chk-2, want %q", got, want)
	}
}
