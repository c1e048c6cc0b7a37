package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// stageUnitCheckpoint writes checkpoint id into the staging storage of ns:
// files (path relative to the checkpoint's directory -> content), the
// shared files named and a version 3 _metadata naming them.
func stageUnitCheckpoint(t *testing.T, ns Namespace, id int64, files map[string][]byte, shared ...string) *Metadata {
	t.Helper()
	dir := ns.Local.CheckpointDir(id)
	for rel, b := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range shared {
		p := filepath.Join(ns.Local.SharedDir(), filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("sst "+f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m := &Metadata{Version: MetadataVersion, Job: "clicks", CheckpointID: id, MaxParallelism: 128,
		Operators:   map[string]OperatorMetadata{"out": {Parallelism: 1, Subtasks: []json.RawMessage{json.RawMessage(`{"key_groups":{"Start":0,"End":127}}`)}}},
		SharedFiles: shared, SharedDir: DefaultSharedDir, Bytes: 7}
	if err := writeMetadata(dir, m, nil); err != nil {
		t.Fatal(err)
	}
	return m
}

// readTree returns every file under dir but _metadata (slash-separated
// relative path -> content).
func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == MetadataFile {
			return nil
		}
		b, err := os.ReadFile(p)
		out[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestUnitCheckpointInlinesSmallFiles: a unit's upload puts the small
// private files of its checkpoint (a Pebble checkpoint's MANIFEST, OPTIONS
// and empty markers) into the store's _metadata (version 4, inline_files)
// instead of an object each, while a file above inlineFileMax, the files
// past inlineTotalMax and the shared files stay objects; the _claim stays
// the first object and the HEAD names the checkpoint as before. Another
// owner's Restore rebuilds exactly the staged directory, with a version 3
// _metadata without inline_files (what the staging commit wrote).
func TestUnitCheckpointInlinesSmallFiles(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	store := FileStore{Root: filepath.Join(root, "store")}
	nsA := Namespace{Store: store, Prefix: UnitPrefix("clicks", 1, 0), Local: NewStorage(filepath.Join(root, "a"), "0", 2, nil)}
	a, _, err := Claim(ctx, nsA, "a", "fp", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	big := func(n int, c byte) []byte { return bytes.Repeat([]byte{c}, n) }
	files := map[string][]byte{
		"out/0/MANIFEST-000001":                        []byte("manifest\x00\x01\xff"),
		"out/0/OPTIONS-000003":                         []byte("[Options]\n"),
		"out/0/marker.format-version.000001.024":       {},
		"out/0/marker.manifest.000001.MANIFEST-000001": {},
		"out/1/big":   big(inlineFileMax+1, 'b'), // too large for the _metadata
		"src/0/p1":    big(inlineFileMax, '1'),   // the largest that is inlined
		"src/0/p2":    big(inlineFileMax, '2'),
		"src/0/p3":    big(inlineFileMax, '3'),
		"src/0/p4":    big(inlineFileMax, '4'), // past inlineTotalMax with the ones before
		"src/0/small": []byte("s"),             // still fits after p4 was left out
	}
	staged := stageUnitCheckpoint(t, nsA, 1, files, "inst/1.sst")
	if _, err := a.Reserve(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := a.Checkpoint(ctx, 1, UnitCommit{}); err != nil {
		t.Fatal(err)
	}
	keys, err := store.List(ctx, nsA.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	p := nsA.Prefix
	want := []string{p + "HEAD-1", p + "HEAD-2", p + "chk-1/_claim", p + "chk-1/_metadata", p + "chk-1/out/1/big", p + "chk-1/src/0/p4", p + "shared/inst/1.sst"}
	if !slices.Equal(keys, want) {
		t.Fatalf("store holds\n%q\nwant\n%q", keys, want)
	}
	b, err := store.Read(ctx, p+"chk-1/_metadata")
	if err != nil {
		t.Fatal(err)
	}
	var m Metadata
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Version != InlineMetadataVersion || m.CheckpointID != 1 || !slices.Equal(m.SharedFiles, []string{"inst/1.sst"}) {
		t.Errorf("store _metadata: version %d, checkpoint %d, shared %q; want %d, 1, [inst/1.sst]", m.Version, m.CheckpointID, m.SharedFiles, InlineMetadataVersion)
	}
	wantInline := []string{"out/0/MANIFEST-000001", "out/0/OPTIONS-000003", "out/0/marker.format-version.000001.024",
		"out/0/marker.manifest.000001.MANIFEST-000001", "src/0/p1", "src/0/p2", "src/0/p3", "src/0/small"}
	var gotInline []string
	for rel, c := range m.InlineFiles {
		gotInline = append(gotInline, rel)
		if !bytes.Equal(c, files[rel]) {
			t.Errorf("inline %s: %d bytes, want the staged %d", rel, len(c), len(files[rel]))
		}
	}
	slices.Sort(gotInline)
	if !slices.Equal(gotInline, wantInline) {
		t.Errorf("inline files %q, want %q", gotInline, wantInline)
	}

	// Another owner takes the unit over and restores the checkpoint.
	nsB := Namespace{Store: store, Prefix: nsA.Prefix, Local: NewStorage(filepath.Join(root, "b"), "0", 2, nil)}
	b2, hd, err := Claim(ctx, nsB, "b", "fp", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	dir, rm, err := b2.Restore(ctx, hd)
	if err != nil {
		t.Fatal(err)
	}
	if got := readTree(t, dir); !mapsEqualBytes(got, files) {
		t.Errorf("restored directory holds %d files, want the %d staged ones with their bytes", len(got), len(files))
	}
	if rm.Version != MetadataVersion || rm.InlineFiles != nil || rm.CheckpointID != staged.CheckpointID || !slices.Equal(rm.SharedFiles, staged.SharedFiles) || rm.Bytes != staged.Bytes {
		t.Errorf("restored metadata %+v, want the staged version 3 one without inline files", rm)
	}
	raw, err := os.ReadFile(filepath.Join(dir, MetadataFile))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "inline_files") {
		t.Errorf("restored _metadata carries inline_files: %s", raw)
	}
	if got, err := os.ReadFile(filepath.Join(nsB.Local.SharedDir(), "inst", "1.sst")); err != nil || string(got) != "sst inst/1.sst" {
		t.Errorf("restored shared file: %q, %v", got, err)
	}
}

func mapsEqualBytes(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

// TestRestoreOldLayoutUnitCheckpoint: a unit store written by the binary
// before inline files (706ff2d: testdata/unitstore-v3, every private file
// an object, _metadata version 3) restores with the new binary: the
// checkpoint's four Pebble files with their bytes, the shared SST, and the
// _metadata as it was.
func TestRestoreOldLayoutUnitCheckpoint(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	if err := os.CopyFS(filepath.Join(root, "store"), os.DirFS(filepath.Join("testdata", "unitstore-v3"))); err != nil {
		t.Fatal(err)
	}
	store := FileStore{Root: filepath.Join(root, "store")}
	ns := Namespace{Store: store, Prefix: UnitPrefix("golden", 1, 0), Local: NewStorage(filepath.Join(root, "b"), "0", 2, nil)}
	o, hd, err := Claim(ctx, ns, "m2", "fp", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if hd.Seq != 2 || hd.CheckpointID != 1 || hd.CheckpointClaim != 1 {
		t.Fatalf("the golden store's newest HEAD %+v, want HEAD-2 naming chk-1 under claim 1", hd)
	}
	dir, m, err := o.Restore(ctx, hd)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{
		"out/0/MANIFEST-000001":                        []byte("manifest bytes\x00\x01\x02"),
		"out/0/OPTIONS-000003":                         []byte("[Version]\n  pebble_version=0.1\n"),
		"out/0/marker.format-version.000001.024":       {},
		"out/0/marker.manifest.000001.MANIFEST-000001": {},
	}
	if got := readTree(t, dir); !mapsEqualBytes(got, want) {
		t.Errorf("restored %q, want the four Pebble files of the golden checkpoint", slices.Sorted(func(yield func(string) bool) {
			for k := range got {
				if !yield(k) {
					return
				}
			}
		}))
	}
	if m.Version != 3 || m.Job != "golden" || m.CheckpointID != 1 || m.MaxParallelism != 128 || !slices.Equal(m.SharedFiles, []string{"inst/000004.sst"}) || m.Bytes != 42 || m.InlineFiles != nil {
		t.Errorf("restored metadata %+v, want the golden version 3 one", m)
	}
	golden, err := os.ReadFile(filepath.Join("testdata", "unitstore-v3", "golden", "units", "1", "0", "chk-1", MetadataFile))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, MetadataFile)); err != nil || !bytes.Equal(got, golden) {
		t.Errorf("restored _metadata differs from the store's (%v)", err)
	}
	if got, err := os.ReadFile(filepath.Join(ns.Local.SharedDir(), "inst", "000004.sst")); err != nil || string(got) != "sst bytes" {
		t.Errorf("restored shared file: %q, %v", got, err)
	}
}

// TestWriteInlineFilesRefusesPathsOutside: an inline file whose path
// leaves the checkpoint's directory (a corrupt or hostile _metadata) is
// refused with ErrCorruptMetadata before anything is written.
func TestWriteInlineFilesRefusesPathsOutside(t *testing.T) {
	for _, rel := range []string{"../x", "/abs", "a/../../x", "", MetadataFile} {
		dir := filepath.Join(t.TempDir(), "chk-1")
		err := WriteInlineFiles(dir, map[string][]byte{"ok/a": []byte("a"), rel: []byte("x")})
		if !errors.Is(err, ErrCorruptMetadata) {
			t.Errorf("WriteInlineFiles(%q) = %v, want ErrCorruptMetadata", rel, err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("WriteInlineFiles(%q) wrote into %s (%v)", rel, dir, err)
		}
	}
}

// TestWriteInlineFilesRefusesAliases: an inline file named so that it
// lands on another name (the _metadata or another inline file) or that
// the filesystem cannot hold (NUL), is refused with ErrCorruptMetadata
// before anything is written; a symlink in the directory does not lead a
// write outside it.
func TestWriteInlineFilesRefusesAliases(t *testing.T) {
	for _, files := range []map[string][]byte{
		{"ok/a": []byte("a"), "./" + MetadataFile: []byte("x")},
		{"ok/a": []byte("a"), "ok/../" + MetadataFile: []byte("x")},
		{"ok/a": []byte("a"), "ok//b": []byte("x")},
		{"ok/a": []byte("a"), "ok/./a": []byte("x")}, // the same file twice
		{"ok/a": []byte("a"), "ok/b/": []byte("x")},
		{"ok/a": []byte("a"), "ok/b\x00c": []byte("x")},
	} {
		dir := filepath.Join(t.TempDir(), "chk-1")
		err := WriteInlineFiles(dir, files)
		if !errors.Is(err, ErrCorruptMetadata) {
			t.Errorf("WriteInlineFiles(%q) = %v, want ErrCorruptMetadata", slices.Sorted(maps.Keys(files)), err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("WriteInlineFiles(%q) wrote into %s (%v)", slices.Sorted(maps.Keys(files)), dir, err)
		}
	}
	root := t.TempDir()
	dir, outside := filepath.Join(root, "chk-1"), filepath.Join(root, "outside")
	for _, d := range []string{dir, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(dir, "op")); err != nil {
		t.Fatal(err)
	}
	if err := WriteInlineFiles(dir, map[string][]byte{"op/0/MANIFEST-000001": []byte("m")}); err == nil {
		t.Errorf("WriteInlineFiles through a symlink out of the directory succeeded")
	}
	if got := readTree(t, outside); len(got) != 0 {
		t.Errorf("WriteInlineFiles wrote %q outside the directory", slices.Sorted(maps.Keys(got)))
	}
	// Well-formed names still write, into nested directories.
	ok := map[string][]byte{"out/0/MANIFEST-000001": []byte("m"), "out/0/marker": {}, "state": []byte("s")}
	dir = filepath.Join(t.TempDir(), "chk-2")
	if err := WriteInlineFiles(dir, ok); err != nil {
		t.Fatal(err)
	}
	if got := readTree(t, dir); !mapsEqualBytes(got, ok) {
		t.Errorf("WriteInlineFiles wrote %q, want %q", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(ok)))
	}
}

// TestReadMetadataRefusesStoreInlineVersion: a unit's store _metadata
// (version 4 with inline files), read as a local checkpoint directory
// (`kstreamd --from-savepoint` or `state inspect` pointed into a FileStore),
// is refused with ErrCorruptMetadata and a message that says what it is
// and how to restore it, instead of restoring a checkpoint without its
// inline files; version 5 stays an unknown version.
func TestReadMetadataRefusesStoreInlineVersion(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	store := FileStore{Root: filepath.Join(root, "store")}
	ns := Namespace{Store: store, Prefix: UnitPrefix("clicks", 1, 0), Local: NewStorage(filepath.Join(root, "a"), "0", 2, nil)}
	o, _, err := Claim(ctx, ns, "a", "fp", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	stageUnitCheckpoint(t, ns, 1, map[string][]byte{"out/0/MANIFEST-000001": []byte("m"), "out/0/OPTIONS-000003": []byte("o")})
	if err := o.Checkpoint(ctx, 1, UnitCommit{}); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(store.Root, filepath.FromSlash(ns.Prefix), "chk-1")
	_, err = ReadMetadata(dir)
	want := "version 4 is a cluster unit's checkpoint in its store, with 2 of its files inline in the _metadata: restore it through the cluster (its unit's owner) or gather a cluster savepoint from it, not from this directory"
	if !errors.Is(err, ErrCorruptMetadata) || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("ReadMetadata of the store's chk-1: %v, want ErrCorruptMetadata ending %q", err, want)
	}
	v5 := t.TempDir()
	if err := os.WriteFile(filepath.Join(v5, MetadataFile), []byte(`{"version":5}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadMetadata(v5); !errors.Is(err, ErrCorruptMetadata) || !strings.HasSuffix(err.Error(), "version 5, want 1 to 3") {
		t.Errorf("ReadMetadata of version 5: %v", err)
	}
}
