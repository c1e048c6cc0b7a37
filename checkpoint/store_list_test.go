package checkpoint

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestFileStoreListReadsOnlyMatchingDirectories: a unit's retention lists
// its HEADs (prefix ".../HEAD-") twice per checkpoint; before, List walked
// the whole unit directory for it, every chk-<id>/<operator>/<subtask>/
// and shared/ included, twelve units a second in the cluster bench. List
// now reads only the directories whose keys can start with the prefix,
// and returns the same keys as a full walk filtered by the prefix.
func TestFileStoreListReadsOnlyMatchingDirectories(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	var read []string
	s := FileStore{Root: root, hooks: &fileStoreHooks{listDir: func(dir string) { read = append(read, dir) }}}
	unit := UnitPrefix("job", 1, 0)
	keys := []string{
		unit + "HEAD-1", unit + "HEAD-2", unit + "HEAD-10",
		unit + "chk-1/_claim", unit + "chk-1/_metadata", unit + "chk-1/out/0/MANIFEST-000001",
		unit + "chk-2/_claim", unit + "chk-2/out/0/OPTIONS-000003",
		unit + "chk-10/_claim",
		unit + "shared/a-000005.sst", unit + "shared/a-000007.sst",
		UnitPrefix("job", 1, 1) + "HEAD-1",
		"job/graphs/x.json",
	}
	for _, k := range keys {
		if err := s.Create(ctx, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	// A temporary file and a directory named like a key's beginning but
	// holding none.
	if err := os.WriteFile(filepath.Join(root, filepath.FromSlash(unit), tmpPrefix+"1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, filepath.FromSlash(unit), "HEAD-dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		prefix string
		dirs   []string // read, in walk order
	}{
		{unit + "HEAD-", []string{"job/units/1/0", "job/units/1/0/HEAD-dir"}},
		{unit + "HEAD-1", []string{"job/units/1/0"}},
		{unit + "chk-1", []string{"job/units/1/0", "job/units/1/0/chk-1", "job/units/1/0/chk-1/out", "job/units/1/0/chk-1/out/0", "job/units/1/0/chk-10"}},
		{unit + "chk-1/", []string{"job/units/1/0/chk-1", "job/units/1/0/chk-1/out", "job/units/1/0/chk-1/out/0"}},
		{unit + "shared/", []string{"job/units/1/0/shared"}},
		{unit + "chk-2/out/0/", []string{"job/units/1/0/chk-2/out/0"}},
		{"job/units/1/", []string{"job/units/1", "job/units/1/0", "job/units/1/0/HEAD-dir", "job/units/1/0/chk-1", "job/units/1/0/chk-1/out",
			"job/units/1/0/chk-1/out/0", "job/units/1/0/chk-10", "job/units/1/0/chk-2", "job/units/1/0/chk-2/out", "job/units/1/0/chk-2/out/0",
			"job/units/1/0/shared", "job/units/1/1"}},
		{"job/g", []string{"job", "job/graphs"}},
		{"jo", []string{".", "job", "job/graphs", "job/units", "job/units/1", "job/units/1/0", "job/units/1/0/HEAD-dir", "job/units/1/0/chk-1",
			"job/units/1/0/chk-1/out", "job/units/1/0/chk-1/out/0", "job/units/1/0/chk-10", "job/units/1/0/chk-2", "job/units/1/0/chk-2/out",
			"job/units/1/0/chk-2/out/0", "job/units/1/0/shared", "job/units/1/1"}},
		{"nothing/", nil},
	} {
		read = nil
		got, err := s.List(ctx, tc.prefix)
		if err != nil {
			t.Fatalf("List(%q): %v", tc.prefix, err)
		}
		var want []string
		for _, k := range keys {
			if len(k) >= len(tc.prefix) && k[:len(tc.prefix)] == tc.prefix {
				want = append(want, k)
			}
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("List(%q) = %q, want %q", tc.prefix, got, want)
		}
		if !slices.Equal(read, tc.dirs) {
			t.Errorf("List(%q) read directories %q, want %q", tc.prefix, read, tc.dirs)
		}
	}
}
