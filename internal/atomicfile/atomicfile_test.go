package atomicfile

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// names returns the sorted entry names of dir.
func names(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

func content(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func mode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

func TestWriteReplacesContentAndLeavesNoTemp(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		perm fs.FileMode
	}{
		{"unique temp", Options{}, 0o600},
		{"unique temp, perm", Options{Perm: 0o644}, 0o644},
		{"pattern", Options{TempPattern: ".x-*", Perm: 0o640}, 0o640},
		{"fixed temp", Options{TempName: "f.tmp", Perm: 0o644}, 0o644},
		{"no sync", Options{NoSync: true}, 0o600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			dst := filepath.Join(dir, "f")
			if err := os.WriteFile(dst, []byte("old content, longer than the new"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := WriteFile(dst, []byte("new"), tc.opts); err != nil {
				t.Fatal(err)
			}
			if got := content(t, dst); got != "new" {
				t.Fatalf("content %q, want %q", got, "new")
			}
			if got := mode(t, dst); got != tc.perm {
				t.Fatalf("mode %o, want %o", got, tc.perm)
			}
			if got := names(t, dir); !slices.Equal(got, []string{"f"}) {
				t.Fatalf("dir holds %q, want only [f]", got)
			}
		})
	}
}

func TestWriteStreams(t *testing.T) {
	dir := t.TempDir()
	dst := filepath.Join(dir, "stream")
	err := Write(dst, Options{}, func(w io.Writer) error {
		for _, s := range []string{"a", "bc", "def"} {
			if _, err := io.WriteString(w, s); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := content(t, dst); got != "abcdef" {
		t.Fatalf("content %q, want abcdef", got)
	}
}

func TestWriteErrorLeavesDestinationAndNoTemp(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"unique temp", Options{}},
		{"fixed temp", Options{TempName: "f.tmp"}},
		{"no replace", Options{NoReplace: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			dst := filepath.Join(dir, "f")
			if err := os.WriteFile(dst, []byte("old"), 0o644); err != nil {
				t.Fatal(err)
			}
			boom := errors.New("boom")
			err := Write(dst, tc.opts, func(w io.Writer) error {
				if _, err := io.WriteString(w, "partial"); err != nil {
					return err
				}
				return boom
			})
			if !errors.Is(err, boom) {
				t.Fatalf("err %v, want the writer's error", err)
			}
			if got := content(t, dst); got != "old" {
				t.Fatalf("dst %q after a failed write, want old", got)
			}
			if got := names(t, dir); !slices.Equal(got, []string{"f"}) {
				t.Fatalf("dir holds %q, want only [f]", got)
			}
		})
	}
}

func TestWriteCreatesAbsentDestination(t *testing.T) {
	dir := t.TempDir()
	dst := filepath.Join(dir, "new")
	if err := WriteFile(dst, []byte("x"), Options{}); err != nil {
		t.Fatal(err)
	}
	if got := content(t, dst); got != "x" {
		t.Fatalf("content %q, want x", got)
	}
}

func TestWriteMissingDirectory(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "missing", "f")
	if err := WriteFile(dst, []byte("x"), Options{}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err %v, want fs.ErrNotExist (Write does not create directories)", err)
	}
}

func TestRenameErrorRemovesTemp(t *testing.T) {
	dir := t.TempDir()
	dst := filepath.Join(dir, "d")
	// A non-empty directory at dst makes rename(2) fail.
	if err := os.MkdirAll(filepath.Join(dst, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(dst, []byte("x"), Options{}); err == nil {
		t.Fatal("rename over a non-empty directory succeeded")
	}
	if got := names(t, dir); !slices.Equal(got, []string{"d"}) {
		t.Fatalf("dir holds %q, want only [d]", got)
	}
	if got := names(t, dst); !slices.Equal(got, []string{"x"}) {
		t.Fatalf("dst directory holds %q, want [x]", got)
	}
}

func TestBeforeRename(t *testing.T) {
	t.Run("runs before the rename with the temp complete", func(t *testing.T) {
		dir := t.TempDir()
		dst := filepath.Join(dir, "f")
		if err := os.WriteFile(dst, []byte("old"), 0o644); err != nil {
			t.Fatal(err)
		}
		calls := 0
		err := WriteFile(dst, []byte("new"), Options{TempName: "f.tmp", BeforeRename: func() error {
			calls++
			if got := content(t, dst); got != "old" {
				t.Errorf("dst %q in BeforeRename, want old", got)
			}
			if got := content(t, filepath.Join(dir, "f.tmp")); got != "new" {
				t.Errorf("temp %q in BeforeRename, want new", got)
			}
			return nil
		}})
		if err != nil || calls != 1 {
			t.Fatalf("err %v, %d calls; want nil and 1", err, calls)
		}
		if got := content(t, dst); got != "new" {
			t.Fatalf("content %q, want new", got)
		}
		if got := names(t, dir); !slices.Equal(got, []string{"f"}) {
			t.Fatalf("dir holds %q, want only [f]", got)
		}
	})
	t.Run("an error is a crash: the temp stays, dst untouched", func(t *testing.T) {
		dir := t.TempDir()
		dst := filepath.Join(dir, "f")
		if err := os.WriteFile(dst, []byte("old"), 0o644); err != nil {
			t.Fatal(err)
		}
		crash := errors.New("crash")
		err := WriteFile(dst, []byte("new"), Options{TempName: "f.tmp", BeforeRename: func() error { return crash }})
		if !errors.Is(err, crash) {
			t.Fatalf("err %v, want the hook's", err)
		}
		if got := content(t, dst); got != "old" {
			t.Fatalf("dst %q, want old", got)
		}
		if got := content(t, filepath.Join(dir, "f.tmp")); got != "new" {
			t.Fatalf("temp %q, want the complete new content", got)
		}
		// The next write with the same TempName truncates the leftover.
		if err := WriteFile(dst, []byte("n2"), Options{TempName: "f.tmp"}); err != nil {
			t.Fatal(err)
		}
		if got := content(t, dst); got != "n2" {
			t.Fatalf("dst %q, want n2", got)
		}
		if got := names(t, dir); !slices.Equal(got, []string{"f"}) {
			t.Fatalf("dir holds %q, want only [f]", got)
		}
	})
}

func TestNoReplace(t *testing.T) {
	dir := t.TempDir()
	dst := filepath.Join(dir, "obj")
	if err := WriteFile(dst, []byte("first"), Options{NoReplace: true, TempPattern: ".tmp-*"}); err != nil {
		t.Fatal(err)
	}
	err := WriteFile(dst, []byte("second"), Options{NoReplace: true, TempPattern: ".tmp-*"})
	if !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second create-only write: err %v, want fs.ErrExist", err)
	}
	if got := content(t, dst); got != "first" {
		t.Fatalf("content %q, want first", got)
	}
	if got := names(t, dir); !slices.Equal(got, []string{"obj"}) {
		t.Fatalf("dir holds %q, want only [obj]", got)
	}
}

func TestCopyFile(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	if err := os.WriteFile(src, []byte("payload"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := CopyFile(src, dst, Options{Perm: 0o644}); err != nil {
		t.Fatal(err)
	}
	if got := content(t, dst); got != "payload" {
		t.Fatalf("content %q, want payload", got)
	}
	if got := mode(t, dst); got != 0o644 {
		t.Fatalf("mode %o, want 644", got)
	}
	if err := CopyFile(filepath.Join(dir, "absent"), dst, Options{}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("copy of an absent file: err %v, want fs.ErrNotExist", err)
	}
	if got := content(t, dst); got != "payload" {
		t.Fatalf("dst %q after a failed copy, want payload", got)
	}
	if got := names(t, dir); !slices.Equal(got, []string{"dst", "src"}) {
		t.Fatalf("dir holds %q, want [dst src]", got)
	}
}

func TestSyncDir(t *testing.T) {
	if err := SyncDir(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if err := SyncDir(filepath.Join(t.TempDir(), "absent")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err %v, want fs.ErrNotExist", err)
	}
}

// TestConcurrentWritersUniqueTemps: writers of one dst with unique
// temporary names (the default) never truncate each other's file: every
// Write succeeds and dst holds one writer's complete content.
func TestConcurrentWritersUniqueTemps(t *testing.T) {
	dir := t.TempDir()
	dst := filepath.Join(dir, "shared.sst")
	payload := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, 64<<10) }
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { errs[i] = WriteFile(dst, payload(i), Options{Perm: 0o644}) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: %v", i, err)
		}
	}
	got, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 64<<10 || !bytes.Equal(got, bytes.Repeat(got[:1], len(got))) || got[0] < 'a' || got[0] >= 'a'+8 {
		t.Fatalf("dst holds %d bytes starting %q: not one writer's complete content", len(got), got[:min(len(got), 8)])
	}
	if got := names(t, dir); !slices.Equal(got, []string{"shared.sst"}) {
		t.Fatalf("dir holds %q, want only [shared.sst]", got)
	}
}

// TestMkdirAllSyncsTheParentOfEachNewDirectory: MkdirAll creates the
// missing components and fsyncs the parent of each one it created, once,
// and nothing when dir exists.
func TestMkdirAllSyncsTheParentOfEachNewDirectory(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	var synced []string
	sync := func(d string) error { synced = append(synced, d); return SyncDir(d) }
	dir := filepath.Join(root, "a", "b", "c")
	if err := MkdirAll(dir, 0o755, sync); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		t.Fatalf("%s not created: %v", dir, err)
	}
	want := []string{filepath.Join(root, "a", "b"), filepath.Join(root, "a")}
	if !slices.Equal(synced, want) {
		t.Fatalf("synced %q, want %q", synced, want)
	}
	synced = nil
	if err := MkdirAll(dir, 0o755, sync); err != nil {
		t.Fatal(err)
	}
	if len(synced) != 0 {
		t.Fatalf("existing dir: synced %q, want nothing", synced)
	}
	f := filepath.Join(root, "file")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := MkdirAll(filepath.Join(f, "x"), 0o755, sync); err == nil {
		t.Fatal("MkdirAll under a file: no error")
	}
}

// TestWriteNoDirSyncSkipsOnlyTheDirectoryFsync: NoDirSync publishes dst
// without calling the directory fsync; without it the SyncDir hook runs
// once for dst's directory.
func TestWriteNoDirSyncSkipsOnlyTheDirectoryFsync(t *testing.T) {
	dir := t.TempDir()
	var synced []string
	hook := func(d string) error { synced = append(synced, d); return nil }
	if err := WriteFile(filepath.Join(dir, "a"), []byte("x"), Options{NoDirSync: true, SyncDir: hook}); err != nil {
		t.Fatal(err)
	}
	if got := content(t, filepath.Join(dir, "a")); got != "x" || len(synced) != 0 {
		t.Fatalf("NoDirSync: content %q, synced %q; want x and nothing", got, synced)
	}
	if err := WriteFile(filepath.Join(dir, "b"), []byte("y"), Options{SyncDir: hook}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(synced, []string{dir}) {
		t.Fatalf("synced %q, want [%s]", synced, dir)
	}
}
