package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// verifyFixture is a job directory <root>/job with chk-5: a sink "out" of
// two subtasks holding committables (state "c") and a keyed operator "op"
// of one subtask with a private file (op/0/MANIFEST, 4 bytes) and a shared
// one (shared/i-000001.sst, 6 bytes).
type verifyFixture struct {
	storage *Storage
	dir     string
	meta    *Metadata
}

func newVerifyFixture(t *testing.T) *verifyFixture {
	t.Helper()
	s := NewStorage(t.TempDir(), "job", 3, nil)
	dir := s.CheckpointDir(5)
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(dir, "op", "0", "MANIFEST"), "mani")
	write(filepath.Join(s.SharedDir(), "i-000001.sst"), "sstsst")
	keyed := `{"key_groups":{"Start":0,"End":127},"keyed":{"backend":"pebble","key_groups":{"Start":0,"End":127},"max_parallelism":128,"files":[` +
		`{"name":"MANIFEST","path":"op/0/MANIFEST","size":4},{"name":"000001.sst","path":"i-000001.sst","shared":true,"size":6}]}}`
	m := &Metadata{Version: MetadataVersion, Job: "job", CheckpointID: 5, MaxParallelism: 128,
		SharedFiles: []string{"i-000001.sst"}, SharedDir: DefaultSharedDir,
		Operators: map[string]OperatorMetadata{
			"out": {Parallelism: 2, RequiredStates: []string{"c"}, Subtasks: []json.RawMessage{
				json.RawMessage(`{"operator":{"c":{"mode":"split","entries":["e30="]}}}`),
				json.RawMessage(`{"operator":{"c":{"mode":"split","entries":["e30=","e30="]}}}`),
			}},
			"op":  {Parallelism: 1, Subtasks: []json.RawMessage{json.RawMessage(keyed)}},
			"src": {Parallelism: 1, Subtasks: []json.RawMessage{json.RawMessage(`null`)}},
		}}
	if err := writeMetadata(dir, m, nil); err != nil {
		t.Fatal(err)
	}
	return &verifyFixture{storage: s, dir: dir, meta: m}
}

// TestVerify damages one part of a consistent checkpoint per case and
// asserts exactly the problems Verify reports.
func TestVerify(t *testing.T) {
	committables := func(f *verifyFixture, sub int, raw string) {
		op := f.meta.Operators["out"]
		op.Subtasks[sub] = json.RawMessage(raw)
	}
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, f *verifyFixture)
		opts   VerifyOptions
		want   []Problem
	}{
		{name: "consistent", damage: func(*testing.T, *verifyFixture) {}},
		{name: "sink entry deleted", damage: func(_ *testing.T, f *verifyFixture) {
			committables(f, 1, `{"operator":{"c":{"mode":"split","entries":[]}}}`)
		}, want: []Problem{{"out", 1, `holds no entry of "c", which every subtask must hold`}}},
		{name: "sink subtask state deleted", damage: func(_ *testing.T, f *verifyFixture) {
			committables(f, 0, `null`)
		}, want: []Problem{{"out", 0, `has no state, but every subtask must hold an entry of "c"`}}},
		{name: "sink subtask missing from the list", damage: func(_ *testing.T, f *verifyFixture) {
			op := f.meta.Operators["out"]
			op.Subtasks = op.Subtasks[:1]
			f.meta.Operators["out"] = op
		}, want: []Problem{{"out", -1, "the metadata says parallelism 2 but holds 1 subtask states"}}},
		{name: "undecodable subtask state", damage: func(_ *testing.T, f *verifyFixture) {
			committables(f, 1, `[1]`)
		}, want: []Problem{{"out", 1, "state cannot be decoded: json: cannot unmarshal array into Go value of type checkpoint.TaskState"}}},
		{name: "private file missing", damage: func(t *testing.T, f *verifyFixture) {
			if err := os.Remove(filepath.Join(f.dir, "op", "0", "MANIFEST")); err != nil {
				t.Fatal(err)
			}
		}, want: []Problem{{"op", 0, "keyed state file op/0/MANIFEST is missing (" + filepath.Join("DIR", "op", "0", "MANIFEST") + ")"}}},
		{name: "shared file truncated", damage: func(t *testing.T, f *verifyFixture) {
			if err := os.Truncate(filepath.Join(f.storage.SharedDir(), "i-000001.sst"), 2); err != nil {
				t.Fatal(err)
			}
		}, want: []Problem{{"op", 0, "keyed state shared file i-000001.sst has 2 bytes, the checkpoint recorded 6 (truncated or replaced; " + filepath.Join("JOB", "shared", "i-000001.sst") + ")"}}},
		{name: "version 1: committables inferred", damage: func(_ *testing.T, f *verifyFixture) {
			f.meta.Version, f.meta.SharedDir = 1, ""
			op := f.meta.Operators["out"]
			op.RequiredStates = nil
			f.meta.Operators["out"] = op
			committables(f, 1, `{}`)
		}, opts: VerifyOptions{InferRequired: []string{"c"}},
			want: []Problem{{"out", 1, `holds no entry of "c", which every subtask must hold`}}},
		{name: "version 1: no subtask holds the inferred state", damage: func(_ *testing.T, f *verifyFixture) {
			f.meta.Version, f.meta.SharedDir = 1, ""
			op := f.meta.Operators["out"]
			op.RequiredStates = nil
			f.meta.Operators["out"] = op
			committables(f, 0, `null`)
			committables(f, 1, `{}`)
		}, opts: VerifyOptions{InferRequired: []string{"c"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newVerifyFixture(t)
			tc.damage(t, f)
			err := Verify(f.dir, f.meta, tc.opts)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Verify = %v, want nil", err)
				}
				return
			}
			var ie *InconsistentError
			if !errors.As(err, &ie) || !errors.Is(err, ErrInconsistent) {
				t.Fatalf("Verify = %v, want an *InconsistentError wrapping ErrInconsistent", err)
			}
			for i := range ie.Problems {
				ie.Problems[i].Detail = strings.ReplaceAll(ie.Problems[i].Detail, f.dir, "DIR")
				ie.Problems[i].Detail = strings.ReplaceAll(ie.Problems[i].Detail, f.storage.JobDir(), "JOB")
			}
			if !slices.Equal(ie.Problems, tc.want) || ie.CheckpointID != 5 || ie.Dir != f.dir || ie.Savepoint {
				t.Fatalf("Verify problems = %q (checkpoint %d in %s), want %q", ie.Problems, ie.CheckpointID, ie.Dir, tc.want)
			}
		})
	}
}

func TestInconsistentErrorMessage(t *testing.T) {
	e := &InconsistentError{Dir: "/c/job/chk-5", CheckpointID: 5, Problems: []Problem{{"out", 1, "holds no entry"}, {"op", -1, "bad"}}}
	want := `checkpoint: checkpoint 5 (/c/job/chk-5) is inconsistent, refusing to restore it: operator "out" subtask 1: holds no entry; operator "op": bad`
	if got := e.Error(); got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	e.Savepoint = true
	if got := e.Error(); !strings.HasPrefix(got, "checkpoint: savepoint 5 ") {
		t.Fatalf("savepoint Error() = %q", got)
	}
}

func TestSharedDirOf(t *testing.T) {
	for _, tc := range []struct {
		version      int
		shared, want string
	}{
		{1, "", "/c/job/shared"},
		{2, "../shared", "/c/job/shared"},
		{2, "../../other/shared", "/c/other/shared"},
		{2, "/elsewhere/shared", "/elsewhere/shared"},
	} {
		t.Run(fmt.Sprintf("v%d %q", tc.version, tc.shared), func(t *testing.T) {
			m := &Metadata{Version: tc.version, SharedDir: tc.shared}
			if got := m.SharedDirOf(filepath.FromSlash("/c/job/chk-5")); got != filepath.FromSlash(tc.want) {
				t.Fatalf("SharedDirOf = %s, want %s", got, tc.want)
			}
		})
	}
}

// TestAdoptShared: another job's storage takes the checkpoint's shared
// files by hard link; a second call finds them present; the job's own
// checkpoint needs nothing; a file of another size already there is
// refused.
func TestAdoptShared(t *testing.T) {
	f := newVerifyFixture(t)
	other := NewStorage(t.TempDir(), "other", 3, nil)
	if n, err := other.AdoptShared(f.dir, f.meta); err != nil || n != 1 {
		t.Fatalf("AdoptShared = %d, %v; want 1 file", n, err)
	}
	src, _ := os.Stat(filepath.Join(f.storage.SharedDir(), "i-000001.sst"))
	dst, err := os.Stat(filepath.Join(other.SharedDir(), "i-000001.sst"))
	if err != nil || !os.SameFile(src, dst) {
		t.Fatalf("adopted file %v (err %v) is not a hard link of the original", dst, err)
	}
	// The restored checkpoint now verifies against the adopting job's copy
	// even once the original job's directory is gone.
	if err := os.RemoveAll(f.storage.JobDir()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(other.SharedDir(), "i-000001.sst")); err != nil {
		t.Fatalf("the adopted file went with the original job's directory: %v", err)
	}
	if n, err := other.AdoptShared(f.dir, &Metadata{CheckpointID: 5, SharedFiles: []string{"i-000001.sst"}, SharedDir: filepath.ToSlash(other.SharedDir())}); err != nil || n != 0 {
		t.Fatalf("AdoptShared of a checkpoint sharing the job's own directory = %d, %v; want 0, nil", n, err)
	}

	g := newVerifyFixture(t)
	if n, err := g.storage.AdoptShared(g.dir, g.meta); err != nil || n != 0 {
		t.Fatalf("AdoptShared of the job's own checkpoint = %d, %v; want 0, nil", n, err)
	}
	third := NewStorage(t.TempDir(), "third", 3, nil)
	if err := os.MkdirAll(third.SharedDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(third.SharedDir(), "i-000001.sst"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := third.AdoptShared(g.dir, g.meta); err == nil || !strings.Contains(err.Error(), "exists in") {
		t.Fatalf("AdoptShared over a file of another size = %v, want a refusal", err)
	}
}

// TestProtectKeepsRestoredCheckpoint: a checkpoint restored explicitly is
// older than the retained ones; Prune keeps it and its shared files while
// deleting the other old checkpoints.
func TestProtectKeepsRestoredCheckpoint(t *testing.T) {
	f := newVerifyFixture(t) // chk-5 with shared/i-000001.sst
	s := NewStorage(filepath.Dir(f.storage.JobDir()), "job", 1, nil)
	for _, id := range []int64{6, 7} {
		if err := os.MkdirAll(s.CheckpointDir(id), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := writeMetadata(s.CheckpointDir(id), &Metadata{Version: MetadataVersion, Job: "job", CheckpointID: id, MaxParallelism: 128}, nil); err != nil {
			t.Fatal(err)
		}
	}
	rel, err := filepath.Rel(".", f.dir)
	if err != nil {
		rel = f.dir
	}
	s.Protect(rel) // relative or absolute: the same checkpoint
	if err := s.Prune(); err != nil {
		t.Fatal(err)
	}
	if got := listStates(t, s); !slices.Equal(got, []string{"5:completed", "7:completed"}) {
		t.Fatalf("after Prune (retained 1, chk-5 protected): %q, want [5:completed 7:completed]", got)
	}
	if !exists(t, filepath.Join(s.SharedDir(), "i-000001.sst")) {
		t.Fatal("Prune deleted a shared file of the protected checkpoint")
	}
	unprotected := NewStorage(filepath.Dir(f.storage.JobDir()), "job", 1, nil)
	if err := unprotected.Prune(); err != nil {
		t.Fatal(err)
	}
	if got := listStates(t, unprotected); !slices.Equal(got, []string{"7:completed"}) || exists(t, filepath.Join(s.SharedDir(), "i-000001.sst")) {
		t.Fatalf("without protection Prune left %q and the shared file", got)
	}
}

// TestVerifyUnreadableFileIsNotInconsistent: a keyed state file Verify
// cannot stat (here a symlink loop, ELOOP; in production an I/O error or a
// stale network mount) is not a verdict on the checkpoint: Verify returns
// the stat's error, not an *InconsistentError, so the job's restart
// strategy (job.IncompatibleRestore) may retry the restore.
func TestVerifyUnreadableFileIsNotInconsistent(t *testing.T) {
	f := newVerifyFixture(t)
	manifest := filepath.Join(f.dir, "op", "0", "MANIFEST")
	if err := os.Remove(manifest); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(manifest, manifest); err != nil { // a loop: stat gives ELOOP
		t.Fatal(err)
	}
	err := Verify(f.dir, f.meta, VerifyOptions{})
	if err == nil || errors.Is(err, ErrInconsistent) || !errors.Is(err, syscall.ELOOP) {
		t.Fatalf("Verify = %v, want the stat's ELOOP and not ErrInconsistent", err)
	}
	if want := `operator "op" subtask 0: state: keyed state file op/0/MANIFEST cannot be read`; !strings.Contains(err.Error(), want) {
		t.Fatalf("Verify = %q, want it to contain %q", err, want)
	}
}
