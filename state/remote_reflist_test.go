package state

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRemoteRestoreReferenceList: a restore by reference takes its
// instance's reference on the checkpoint's objects with one reference
// list (a marker object naming them all) instead of a marker per object.
// The list names exactly the handle's objects; retention with no
// retained checkpoint keeps every one of them while the instance lives;
// once the instance dies (no Close: its DB closed, its directory and list
// left, as after kill -9) the next instance of the subtask releases the
// list and retention deletes exactly those objects; a clean Close
// releases the list too. Fails when retention ignores the list's content
// (the live instance's objects are deleted) or when a dead instance's
// list is not released.
func TestRemoteRestoreReferenceList(t *testing.T) {
	forRemoteKinds(t, func(t *testing.T, kind string) {
		cfg := testConfig(t, kind)
		cfg.Remote.MaxDeltaCheckpoints = -1
		cfg.WriteCacheBytes = -1
		cfg.L0CompactionThreshold = 1000 // the flushes stay tables of their own
		src := open(t, cfg)
		for f := range 3 {
			fillCounts(t, src, 300, func(i int) int64 { return int64(i + f) })
			must(t, src.(*pebbleBackend).st.db.Flush())
		}
		rh, _ := remoteCheckpoint(t, src, cfg, 1)
		must(t, src.Close())
		var h keyedHandle
		must(t, json.Unmarshal(rh.Handle, &h))
		var objs []string
		for _, f := range h.Files {
			objs = append(objs, path.Base(f.Path))
		}
		slices.Sort(objs)
		objs = slices.Compact(objs)
		if len(objs) < 3 {
			t.Fatalf("checkpoint names %d objects, want at least 3", len(objs))
		}
		st := testStore(t, cfg)
		_, before := storeObjects(t, cfg)

		restore := func(dir string) *pebbleBackend {
			rc := cfg
			rc.Dir = dir
			return must1(OpenBackendRestored(rc, []RestoreHandle{rh}))(t).(*pebbleBackend)
		}
		newMarkers := func() []string {
			_, ms := storeObjects(t, cfg)
			var out []string
			for _, m := range ms {
				if !slices.Contains(before, m) {
					out = append(out, m)
				}
			}
			return out
		}

		// A clean Close releases the list.
		rb := restore(filepath.Join(t.TempDir(), "clean"))
		ms := newMarkers()
		if len(ms) != 1 || !isRefList(ms[0]) {
			t.Fatalf("restore wrote markers %v, want one reference list", ms)
		}
		listed, ok, err := readRefList(st, ms[0])
		must(t, err)
		slices.Sort(listed)
		if !ok || !slices.Equal(listed, objs) {
			t.Fatalf("reference list names %v, want the checkpoint's objects %v", listed, objs)
		}
		checkCounts(t, rb, 300, func(i int) (int64, bool) { return int64(i + 2), true })
		must(t, rb.Close())
		if ms := newMarkers(); len(ms) != 0 {
			t.Fatalf("after Close markers %v left, want none", ms)
		}

		// A live instance's list keeps its objects from retention.
		dir := filepath.Join(t.TempDir(), "dead")
		dead := restore(dir)
		deleted, err := CollectRemoteGarbage(st, nil)
		must(t, err)
		for _, o := range objs {
			if slices.Contains(deleted, o) {
				t.Fatalf("retention deleted %s, which the live instance's reference list names (deleted %v)", o, deleted)
			}
		}
		checkCounts(t, dead, 300, func(i int) (int64, bool) { return int64(i + 2), true })

		// It dies; the next instance of the subtask releases its list.
		must(t, dead.st.db.Close())
		dead.closed = true
		if ms := newMarkers(); len(ms) != 1 {
			t.Fatalf("dead instance left markers %v, want its reference list", ms)
		}
		rc := cfg
		rc.Dir = dir
		live := open(t, rc)
		defer live.Close()
		if _, err := os.Stat(dead.st.dir); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("dead instance's dir %s left: %v", dead.st.dir, err)
		}
		for _, m := range newMarkers() {
			if isRefList(m) || strings.HasSuffix(m, ".ext") {
				t.Fatalf("dead instance's marker %s left", m)
			}
		}
		deleted, err = CollectRemoteGarbage(st, nil)
		must(t, err)
		for _, o := range objs {
			if !slices.Contains(deleted, o) {
				t.Fatalf("retention deleted %v, want every object of the released list %v", deleted, objs)
			}
		}
	})
}
