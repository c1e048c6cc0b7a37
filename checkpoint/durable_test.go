package checkpoint

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kstreamd/kstreamd/internal/atomicfile"
)

// syncLog records the directory fsyncs of a test seam, relative to root.
type syncLog struct {
	t    *testing.T
	root string
	mu   sync.Mutex
	dirs []string
}

func (l *syncLog) sync(dir string) error {
	rel, err := filepath.Rel(l.root, dir)
	if err != nil {
		l.t.Errorf("sync outside the test root: %s", dir)
	}
	l.mu.Lock()
	l.dirs = append(l.dirs, filepath.ToSlash(rel))
	l.mu.Unlock()
	return atomicfile.SyncDir(dir)
}

// take returns the fsyncs since the last take.
func (l *syncLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.dirs
	l.dirs = nil
	return out
}

// TestCheckpointDirectoriesAreDurable: a checkpoint's directory is
// created with its new parents fsynced (chk-<id>'s entry in the job
// directory, the job directory's in the checkpoints directory, ...), and
// before the _metadata the checkpoint's directories that hold the task
// directories are fsynced once each; then the _metadata's directory once.
// The fake tasks write op/<n>/state and src/0/state without fsyncs, as a
// backend creates <operator>/<subtask>/ with os.MkdirAll.
func TestCheckpointDirectoriesAreDurable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		root := t.TempDir()
		log := &syncLog{t: t, root: root}
		s := NewStorage(filepath.Join(root, "checkpoints"), "job", 3, nil)
		s.syncDir = log.sync
		var atCommit [][]string
		s.beforeCommit = func(int64) error { // on the coordinator's goroutine
			log.mu.Lock()
			atCommit = append(atCommit, slices.Clone(log.dirs))
			log.mu.Unlock()
			return nil
		}
		j := newFakeJob(2, nil)
		c := j.coordinator(t, CoordinatorConfig{Job: "job", MaxParallelism: 128, Storage: s, Interval: 100 * time.Millisecond})
		r := runCoordinator(c)
		defer r.stop()

		time.Sleep(150 * time.Millisecond)
		synctest.Wait()
		if id, _ := c.LastCompleted(); id != 1 {
			t.Fatalf("LastCompleted %d, want 1", id)
		}
		want1 := []string{
			"checkpoints/job", "checkpoints", ".", // MkdirAll of checkpoints/job/chk-1: each new component's parent
			"checkpoints/job/chk-1", "checkpoints/job/chk-1/op", "checkpoints/job/chk-1/src", // the task directories' entries
			"checkpoints/job/chk-1", // the _metadata rename
		}
		if got := log.take(); !slices.Equal(got, want1) {
			t.Fatalf("checkpoint 1 fsynced %q, want %q", got, want1)
		}
		// Everything but the _metadata's own fsync came before the rename.
		log.mu.Lock()
		commits := slices.Clone(atCommit)
		log.mu.Unlock()
		if len(commits) != 1 || !slices.Equal(commits[0], want1[:6]) {
			t.Fatalf("fsynced before the metadata rename: %q, want %q", commits, want1[:6])
		}
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if id, _ := c.LastCompleted(); id != 2 {
			t.Fatalf("LastCompleted %d, want 2", id)
		}
		want2 := []string{"checkpoints/job",
			"checkpoints/job/chk-2", "checkpoints/job/chk-2/op", "checkpoints/job/chk-2/src",
			"checkpoints/job/chk-2"}
		if got := log.take(); !slices.Equal(got, want2) {
			t.Fatalf("checkpoint 2 fsynced %q, want %q", got, want2)
		}
	})
}

// TestSavepointDirectoryIsDurable: a savepoint directory outside the job's
// directory is created with its new parents fsynced, and the latest-
// savepoint pointer's job directory too.
func TestSavepointDirectoryIsDurable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		root := t.TempDir()
		log := &syncLog{t: t, root: root}
		s := NewStorage(filepath.Join(root, "checkpoints"), "job", 3, nil)
		s.syncDir = log.sync
		j := newFakeJob(1, nil)
		c := j.coordinator(t, CoordinatorConfig{Job: "job", MaxParallelism: 128, Storage: s, Interval: time.Hour})
		r := runCoordinator(c)
		defer r.stop()
		sp := filepath.Join(root, "savepoints", "sp-1")
		path, err := c.TriggerSavepoint(context.Background(), sp, false)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Dir(path) != sp {
			t.Fatalf("savepoint at %s, want one in %s", path, sp)
		}
		spd := "savepoints/sp-1/" + filepath.Base(path)
		want := []string{
			"savepoints/sp-1", "savepoints", ".", // MkdirAll of savepoints/sp-1/savepoint-<id>-<time>
			spd, spd + "/op", spd + "/src", // task directories' entries
			spd,                                   // _metadata
			"checkpoints", ".", "checkpoints/job", // RecordSavepoint: MkdirAll of the job dir, then the pointer
		}
		if got := log.take(); !slices.Equal(got, want) {
			t.Fatalf("savepoint fsynced %q, want %q", got, want)
		}
	})
}

// TestUnitUploadSyncsEachDirectoryOnce: a unit's upload into a FileStore
// fsyncs the parent of every directory it creates, and each directory it
// writes files into once after its last file (not once per file), all
// before the _metadata; then the _metadata's directory and the HEAD's.
func TestUnitUploadSyncsEachDirectoryOnce(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	log := &syncLog{t: t, root: filepath.Join(root, "store")}
	store := FileStore{Root: filepath.Join(root, "store"), hooks: &fileStoreHooks{syncDir: log.sync}}
	local := NewStorage(filepath.Join(root, "staging"), "0", 3, nil)
	ns := Namespace{Store: store, Prefix: UnitPrefix("clicks", 0, 0), Local: local}
	o, _, err := Claim(ctx, ns, "a", "fp", 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	log.take()
	dir := local.CheckpointDir(1)
	write := func(p string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		// Larger than inlineFileMax: an object each, not in the _metadata.
		if err := os.WriteFile(p, bytes.Repeat([]byte("x"), inlineFileMax+1), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"op/0/a", "op/0/b", "op/0/c", "op/1/a", "op/1/b"} {
		write(filepath.Join(dir, filepath.FromSlash(f)))
	}
	shared := []string{"inst/1.sst", "inst/2.sst", "inst/3.sst"}
	for _, f := range shared {
		write(filepath.Join(local.SharedDir(), filepath.FromSlash(f)))
	}
	if err := writeMetadata(dir, &Metadata{Version: MetadataVersion, Job: "clicks", CheckpointID: 1, Operators: map[string]OperatorMetadata{}, SharedFiles: shared}, nil); err != nil {
		t.Fatal(err)
	}
	var beforeHead []string
	if err := o.Checkpoint(ctx, 1, UnitCommit{Upload: func() error { beforeHead = log.take(); return nil }}); err != nil {
		t.Fatal(err)
	}
	p := ns.Prefix[:len(ns.Prefix)-1] // the unit's directory, relative to the store's root
	want := []string{
		p, p + "/chk-1", // the owner marker (Create): chk-1's entry, then _claim's
		// FileBatch.Sync, once per directory: each written into, then the
		// parents of the directories created, deepest first per upload.
		p + "/chk-1/op/0", p + "/chk-1/op", p + "/chk-1", p + "/chk-1/op/1",
		p + "/shared/inst", p + "/shared", p,
		p + "/chk-1", // _metadata
	}
	if !slices.Equal(beforeHead, want) {
		t.Fatalf("upload fsynced %q\nwant %q", beforeHead, want)
	}
	if got := log.take(); !slices.Equal(got, []string{p}) {
		t.Fatalf("HEAD fsynced %q, want [%s]", got, p)
	}
	// Everything is in the store.
	keys, err := store.List(ctx, ns.Prefix+"chk-1/")
	if err != nil {
		t.Fatal(err)
	}
	wantKeys := []string{ns.Prefix + "chk-1/_claim", ns.Prefix + "chk-1/_metadata", ns.Prefix + "chk-1/op/0/a", ns.Prefix + "chk-1/op/0/b",
		ns.Prefix + "chk-1/op/0/c", ns.Prefix + "chk-1/op/1/a", ns.Prefix + "chk-1/op/1/b"}
	if !slices.Equal(keys, wantKeys) {
		t.Fatalf("store holds %q, want %q", keys, wantKeys)
	}
}

// TestRetentionReadsOnlyNewMetadata: Storage caches completed
// checkpoints' metadata; a checkpoint committed through Storage.commit is
// never read back, one written by another Storage (a restart) is read once,
// and one whose directory was replaced is read again. Retention's
// decisions are those of the uncached listing.
func TestRetentionReadsOnlyNewMetadata(t *testing.T) {
	dir := t.TempDir()
	s := NewStorage(dir, "job", 2, nil)
	commit := func(s *Storage, id int64, shared ...string) {
		t.Helper()
		d := s.CheckpointDir(id)
		if err := os.MkdirAll(filepath.Join(d, "op", "0"), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range shared {
			p := filepath.Join(s.SharedDir(), f)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		m := &Metadata{Version: MetadataVersion, Job: "job", CheckpointID: id, Operators: map[string]OperatorMetadata{}, SharedFiles: shared}
		if err := s.commit(d, m, false); err != nil {
			t.Fatal(err)
		}
		if err := s.Prune(); err != nil {
			t.Fatal(err)
		}
	}
	for id := int64(1); id <= 4; id++ {
		commit(s, id, "i/"+string(rune('a'+id)))
	}
	// commit caches a summary (a copy) of what it wrote: retention reads
	// no _metadata back.
	if n := s.metadataReads(); n != 0 {
		t.Fatalf("retention after 4 checkpoints read %d _metadata files, want 0", n)
	}
	if got := listStates(t, s); !slices.Equal(got, []string{"3:completed", "4:completed"}) {
		t.Fatalf("List = %q, want [3:completed 4:completed]", got)
	}
	uncached, err := ListDir(s.JobDir())
	if err != nil {
		t.Fatal(err)
	}
	cached, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cached, uncached) {
		t.Fatalf("cached List %+v, ListDir %+v", cached, uncached)
	}
	refs, err := s.SharedRefCounts()
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != 2 || refs["i/d"] != 1 || refs["i/e"] != 1 {
		t.Fatalf("shared refs %v, want i/d and i/e once", refs)
	}

	// A restart: the new Storage reads each retained checkpoint once.
	s2 := NewStorage(dir, "job", 2, nil)
	if err := s2.Prune(); err != nil {
		t.Fatal(err)
	}
	if n := s2.metadataReads(); n != 2 {
		t.Fatalf("first retention after a restart read %d _metadata files, want 2", n)
	}
	if err := s2.Prune(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s2.Latest(); err != nil {
		t.Fatal(err)
	}
	if n := s2.metadataReads(); n != 2 {
		t.Fatalf("second retention read %d _metadata files in all, want still 2", n)
	}
	// chk-4 replaced by another writer (another directory): read again.
	d4 := s2.CheckpointDir(4)
	if err := os.RemoveAll(d4); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(d4, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeMetadata(d4, &Metadata{Version: MetadataVersion, Job: "job", CheckpointID: 4, Bytes: 77, Operators: map[string]OperatorMetadata{}}, nil); err != nil {
		t.Fatal(err)
	}
	_, m, err := s2.Latest()
	if err != nil {
		t.Fatal(err)
	}
	if m.Bytes != 77 || s2.metadataReads() != 3 {
		t.Fatalf("replaced chk-4: Bytes %d after %d reads, want 77 after 3", m.Bytes, s2.metadataReads())
	}
}

// TestUnitRetentionReadsOnlyNewMetadata: an owner's retention never reads
// back the _metadata of checkpoints it uploaded (upload caches their
// shared files), a new owner reads each retained one once and then none,
// and retention still deletes exactly the checkpoints and shared files no
// retained checkpoint names.
func TestUnitRetentionReadsOnlyNewMetadata(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	store := FileStore{Root: filepath.Join(root, "store")}
	staging := func(who string) Namespace {
		return Namespace{Store: store, Prefix: UnitPrefix("clicks", 0, 0),
			Local: NewStorage(filepath.Join(root, who), "0", 2, nil)}
	}
	checkpoint := func(o *Owner, ns Namespace, id int64) {
		t.Helper()
		dir := ns.Local.CheckpointDir(id)
		f := fmt.Sprintf("inst/%d.sst", id)
		for _, p := range []string{filepath.Join(dir, "op", "0", "state"), filepath.Join(ns.Local.SharedDir(), f)} {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		m := &Metadata{Version: MetadataVersion, Job: "clicks", CheckpointID: id, Operators: map[string]OperatorMetadata{}, SharedFiles: []string{f}}
		if err := ns.Local.commit(dir, m, true); err != nil {
			t.Fatal(err)
		}
		if err := o.Checkpoint(ctx, id, UnitCommit{}); err != nil {
			t.Fatal(err)
		}
		if err := o.Retain(ctx, o.Seq()); err != nil {
			t.Fatal(err)
		}
	}
	nsA := staging("a")
	a, _, err := Claim(ctx, nsA, "a", "fp", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	for id := int64(1); id <= 4; id++ {
		checkpoint(a, nsA, id)
	}
	if a.metaReads != 0 || nsA.Local.metadataReads() != 0 {
		t.Fatalf("owner a read %d store and %d staging _metadata files, want 0 and 0", a.metaReads, nsA.Local.metadataReads())
	}
	keys, err := store.List(ctx, nsA.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	var data []string
	for _, k := range keys {
		if rel := strings.TrimPrefix(k, nsA.Prefix); !strings.HasPrefix(rel, HeadPrefix) && !strings.HasSuffix(rel, ClaimFile) {
			data = append(data, rel)
		}
	}
	want := []string{"chk-3/_metadata", "chk-4/_metadata", "shared/inst/3.sst", "shared/inst/4.sst"} // op/0/state inline
	if !slices.Equal(data, want) {
		t.Fatalf("store after retention holds %q, want %q", data, want)
	}

	nsB := staging("b")
	b, _, err := Claim(ctx, nsB, "b", "fp", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	checkpoint(b, nsB, b.NextCheckpointID())
	if b.metaReads != 1 {
		t.Fatalf("new owner's first retention read %d store _metadata files, want 1 (chk-4, the other retained one)", b.metaReads)
	}
	checkpoint(b, nsB, b.NextCheckpointID())
	if b.metaReads != 1 {
		t.Fatalf("new owner's second retention read %d store _metadata files in all, want still 1", b.metaReads)
	}
}

// TestMetadataCacheIsolatesCallers: what List and retention see of a
// completed checkpoint is its _metadata file, whatever a caller does with
// a Metadata object afterwards: the coordinator's own object after commit
// (it goes on using it), and the one Latest hands a restore (which owns
// it). On 0749423 the cache held and handed out those very objects, so
// changing one after the fact made retention delete the shared files of a
// retained checkpoint and List report another size.
func TestMetadataCacheIsolatesCallers(t *testing.T) {
	dir := t.TempDir()
	s := NewStorage(dir, "job", 2, nil)
	commit := func(id int64, shared ...string) *Metadata {
		t.Helper()
		d := s.CheckpointDir(id)
		if err := os.MkdirAll(filepath.Join(d, "op", "0"), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range shared {
			p := filepath.Join(s.SharedDir(), f)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		m := &Metadata{Version: MetadataVersion, Job: "job", CheckpointID: id, Timestamp: time.Now(), Bytes: 100 * id,
			Operators: map[string]OperatorMetadata{}, SharedFiles: shared, SharedDir: DefaultSharedDir}
		if err := s.commit(d, m, false); err != nil {
			t.Fatal(err)
		}
		if err := s.Prune(); err != nil {
			t.Fatal(err)
		}
		return m
	}
	sharedLeft := func() []string {
		t.Helper()
		var out []string
		_ = filepath.WalkDir(s.SharedDir(), func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				rel, _ := filepath.Rel(s.SharedDir(), p)
				out = append(out, filepath.ToSlash(rel))
			}
			return nil
		})
		return out
	}
	check := func(when string) {
		t.Helper()
		got, err := s.List()
		if err != nil {
			t.Fatal(err)
		}
		want, err := ListDir(s.JobDir())
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: List %+v, the files say %+v", when, got, want)
		}
		for i := range got {
			if got[i].ID != want[i].ID || got[i].State != want[i].State || got[i].Bytes != want[i].Bytes ||
				got[i].Savepoint != want[i].Savepoint || !got[i].Time.Equal(want[i].Time) {
				t.Fatalf("%s: List %+v, the files say %+v", when, got[i], want[i])
			}
		}
	}

	m1 := commit(1, "i/a", "i/shared-by-1-and-2")
	// The coordinator's object changes after its commit.
	m1.SharedFiles[0], m1.SharedFiles[1] = "i/other", "i/other2"
	m1.Bytes, m1.Savepoint = 1, true
	check("after the coordinator changed chk-1's object")
	commit(2, "i/b", "i/shared-by-1-and-2")
	if got, want := sharedLeft(), []string{"i/a", "i/b", "i/shared-by-1-and-2"}; !slices.Equal(got, want) {
		t.Fatalf("after chk-2's retention the shared dir holds %q, want %q", got, want)
	}

	// A restore changes the object Latest handed it.
	_, m, err := s.Latest()
	if err != nil {
		t.Fatal(err)
	}
	if m.CheckpointID != 2 || !slices.Equal(m.SharedFiles, []string{"i/b", "i/shared-by-1-and-2"}) || m.Bytes != 200 {
		t.Fatalf("Latest: checkpoint %d, shared %q, %d bytes; want 2, [i/b i/shared-by-1-and-2], 200", m.CheckpointID, m.SharedFiles, m.Bytes)
	}
	m.SharedFiles[0], m.SharedFiles[1] = "i/c", "i/d"
	m.Bytes = 7
	check("after the restore changed chk-2's object")
	commit(3, "i/c")
	// Retained: chk-2 and chk-3. chk-1's i/a goes; chk-2's two stay.
	if got, want := sharedLeft(), []string{"i/b", "i/c", "i/shared-by-1-and-2"}; !slices.Equal(got, want) {
		t.Fatalf("after chk-3's retention the shared dir holds %q, want %q", got, want)
	}
	refs, err := s.SharedRefCounts()
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != 3 || refs["i/b"] != 1 || refs["i/c"] != 1 || refs["i/shared-by-1-and-2"] != 1 {
		t.Fatalf("shared refs %v, want i/b, i/c and i/shared-by-1-and-2 once each", refs)
	}
	check("at the end")
}
