package checkpoint

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// syncRecorder records the directories FileStore fsyncs (dirSync).
type syncRecorder struct{ dirs []string }

func (r *syncRecorder) syncDir(dir string) error {
	r.dirs = append(r.dirs, dir)
	return nil
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
	s := FileStore{Root: root, dirSync: rec}
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
	if !slices.Equal(rec.dirs, want) {
		t.Fatalf("synced %q, want %q", rec.dirs, want)
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
	if len(rec.dirs) != 0 {
		t.Fatalf("synced %q for keys in existing directories, want nothing more", rec.dirs)
	}
	if err := s.Create(ctx, "job/units/0/0/chk-2/_claim", nil); err != nil {
		t.Fatal(err)
	}
	if want := []string{filepath.Join(root, "job/units/0/0")}; !slices.Equal(rec.dirs, want) {
		t.Fatalf("synced %q for a new chk-2, want %q", rec.dirs, want)
	}
}
