package state

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/kstreamd/kstreamd/state/keygroup"
)

// TestRemoteRestoresA62e0e9Checkpoint restores a disaggregated checkpoint
// written by a62e0e9 (testdata/remote-a62e0e9: its handle and its two
// objects, an L6 table of k000000-k000299 = i and an L0 table of
// k000000-k000099 = -i, the metadata in the L6 one) whole and into two
// halves (rescale 1 -> 2), then checkpoints the restored state: the
// values are exact, and the new checkpoint names the restored objects
// with the sizes the old handle recorded.
func TestRemoteRestoresA62e0e9Checkpoint(t *testing.T) {
	golden := filepath.Join("testdata", "remote-a62e0e9")
	handle := must1(os.ReadFile(filepath.Join(golden, "handle.json")))(t)
	want := func(i int) (int64, bool) {
		if i < 100 {
			return int64(-i), true
		}
		return int64(i), true
	}
	for _, ranges := range [][]keygroup.Range{
		{{Start: 0, End: testMaxP - 1}},
		{{Start: 0, End: testMaxP/2 - 1}, {Start: testMaxP / 2, End: testMaxP - 1}},
	} {
		root := t.TempDir()
		store := filepath.Join(root, RemoteDirName)
		must(t, os.MkdirAll(store, 0o755))
		ents := must1(os.ReadDir(filepath.Join(golden, RemoteDirName)))(t)
		for _, e := range ents {
			data := must1(os.ReadFile(filepath.Join(golden, RemoteDirName, e.Name())))(t)
			must(t, os.WriteFile(filepath.Join(store, e.Name()), data, 0o644))
		}
		rh := RestoreHandle{Handle: handle, Dir: filepath.Join(root, "chk-1"), SharedDir: filepath.Join(root, "shared")}
		for i, r := range ranges {
			cfg := BackendConfig{Kind: KindPebble, Dir: filepath.Join(root, "db", string(rune('a'+i))), MaxParallelism: testMaxP,
				KeyGroupRange: r, Remote: &RemoteConfig{Dir: store, CacheBytes: 1 << 20}}
			b := must1(OpenBackendRestored(cfg, []RestoreHandle{rh}))(t)
			checkCounts(t, b, 300, want)
			nh, snap := remoteCheckpoint(t, b, cfg, 2+i)
			var h keyedHandle
			must(t, json.Unmarshal(nh.Handle, &h))
			for _, f := range h.Files {
				st := must1(os.Stat(filepath.Join(store, f.Name)))(t)
				if f.Size != st.Size() {
					t.Errorf("range %v: new checkpoint records %s with %d bytes, the store holds %d", r, f.Name, f.Size, st.Size())
				}
			}
			if len(snap.SharedFiles) == 0 {
				t.Errorf("range %v: the new checkpoint names no shared file", r)
			}
			must(t, b.Close())
		}
	}
}
