package state

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPebbleSnapshotManifestBounded: the MANIFEST a local Pebble backend's
// snapshot copies stays bounded however many checkpoints the DB has taken
// (maxManifestBytes: Pebble starts a new one), where with Pebble's
// default of 128 MiB it grows by every checkpoint's edits; and the
// snapshot taken after many rotations restores every value. The bound is
// lowered to 2 KiB here so that 120 checkpoints pass it many times.
func TestPebbleSnapshotManifestBounded(t *testing.T) {
	prev := maxManifestBytes
	maxManifestBytes = 2 << 10
	defer func() { maxManifestBytes = prev }()
	cfg := testConfig(t, KindPebble)
	cfg.NoSync = true
	b := open(t, cfg)
	s := must1(GetValueState(b, ckptValue))(t)
	const keys, rounds = 1000, 120
	root := t.TempDir()
	var ks KeyedSnapshot
	largest := int64(0)
	for i := range rounds {
		for k := range 100 { // a tenth of the keys per checkpoint
			key := (i*100 + k) % keys
			b.SetCurrentKey(u64key(uint64(key)))
			must(t, s.Update(int64(i*keys+key)))
		}
		dir := filepath.Join(root, fmt.Sprint("chk-", i))
		finish, err := SnapshotKeyed(b, SnapshotTarget{Dir: dir, TaskPath: "op/0", SharedDir: filepath.Join(root, "shared"), NoSync: true})
		must(t, err)
		ks, err = finish(context.Background())
		must(t, err)
		ents, err := os.ReadDir(filepath.Join(dir, "op/0"))
		must(t, err)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "MANIFEST") {
				st := must1(os.Stat(filepath.Join(dir, "op/0", e.Name())))(t)
				largest = max(largest, st.Size())
			}
		}
		if i < rounds-1 {
			must(t, os.RemoveAll(dir))
		}
	}
	// Pebble writes the current version into a new MANIFEST once the edits
	// since the last one outweigh it, so the file stays within about twice
	// the bound plus one version (tens of tables here). 120 checkpoints
	// append about 12 KiB of edits.
	if largest == 0 || largest > 6<<10 {
		t.Fatalf("largest MANIFEST copied into a snapshot: %d bytes, want 1..%d", largest, 6<<10)
	}
	r, err := OpenBackendRestored(testConfig(t, KindPebble), []RestoreHandle{{Handle: ks.Handle, Dir: filepath.Join(root, fmt.Sprint("chk-", rounds-1)), SharedDir: filepath.Join(root, "shared")}})
	must(t, err)
	defer r.Close()
	rs := must1(GetValueState(r, ckptValue))(t)
	for key := range keys {
		// the last round that wrote key: i with (i*100 + k) % keys == key
		last := -1
		for i := range rounds {
			if (key-(i*100)%keys+keys)%keys < 100 {
				last = i
			}
		}
		r.SetCurrentKey(u64key(uint64(key)))
		v, ok, err := rs.Value()
		if err != nil || !ok || v != int64(last*keys+key) {
			t.Fatalf("restored key %d: %d %v %v, want %d", key, v, ok, err, last*keys+key)
		}
	}
	t.Logf("largest MANIFEST %d bytes", largest)
}
