package state

import (
	"context"
	"io"
	"path/filepath"
	"slices"
	"testing"
)

// dirSyncRecorder records the directories a dirStore fsyncs.
type dirSyncRecorder struct{ dirs []string }

func (r *dirSyncRecorder) syncDir(dir string) error {
	r.dirs = append(r.dirs, dir)
	return nil
}

// TestRemoteDirStoreSyncsObjectRename: an object of a filesystem remote
// state store is referred to by checkpoints ("../remote/<object>"), never
// copied, so it must be durable under its name before a checkpoint names
// it: the file was fsynced but its rename into place was not, and a crash
// after the checkpoint's HEAD could leave the checkpoint naming an object
// that is not there. Close fsyncs the store's directory after the rename
// (once per object); the object reads back whole.
func TestRemoteDirStoreSyncsObjectRename(t *testing.T) {
	rec := &dirSyncRecorder{}
	dir := t.TempDir()
	st := dirStore{dir: dir, syncer: rec}
	w, err := st.CreateObject("000007.sst")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(w, "table bytes"); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if want := []string{dir}; !slices.Equal(rec.dirs, want) {
		t.Fatalf("synced %q, want %q", rec.dirs, want)
	}
	r, size, err := st.ReadObject(context.Background(), "000007.sst")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	buf := make([]byte, size)
	if err := r.ReadAt(context.Background(), buf, 0); err != nil || string(buf) != "table bytes" {
		t.Fatalf("read %q, %v; want the object's bytes", buf, err)
	}
	if got, err := filepath.Glob(filepath.Join(dir, tmpObjPrefix+"*")); err != nil || len(got) != 0 {
		t.Fatalf("temporary files left: %q, %v", got, err)
	}
}
