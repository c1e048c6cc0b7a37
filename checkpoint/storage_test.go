package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"
)

// layout is a job directory to lay out: per chk-<id>, what it holds.
type chkLayout struct {
	id     int64
	kind   string   // "completed", "tmp" (half-written: temp metadata only), "corrupt", "version", "empty"
	shared []string // shared files the metadata refers to
}

func writeLayout(t *testing.T, s *Storage, chks []chkLayout, shared []string) {
	t.Helper()
	for _, c := range chks {
		dir := s.CheckpointDir(c.id)
		if err := os.MkdirAll(filepath.Join(dir, "op", "0"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "op", "0", "state"), []byte("12345"), 0o644); err != nil {
			t.Fatal(err)
		}
		m := &Metadata{Version: MetadataVersion, Job: "job", CheckpointID: c.id, MaxParallelism: 128,
			Timestamp: time.Unix(1000+c.id, 0).UTC(), Operators: map[string]OperatorMetadata{}, SharedFiles: c.shared, Bytes: 5}
		switch c.kind {
		case "completed":
			if err := writeMetadata(dir, m, nil); err != nil {
				t.Fatal(err)
			}
		case "tmp":
			// A crash after the temp file was written, before the rename.
			err := writeMetadata(dir, m, func() error { return errors.New("crash") })
			if err == nil || !exists(t, filepath.Join(dir, MetadataFile+".tmp")) {
				t.Fatalf("half-written checkpoint: err %v", err)
			}
		case "corrupt":
			if err := os.WriteFile(filepath.Join(dir, MetadataFile), []byte(`{"version": 1, "checkpoint_id": `), 0o644); err != nil {
				t.Fatal(err)
			}
		case "version":
			m.Version = MetadataVersion + 1
			b, _ := json.Marshal(m)
			if err := os.WriteFile(filepath.Join(dir, MetadataFile), b, 0o644); err != nil {
				t.Fatal(err)
			}
		case "empty":
			if err := os.RemoveAll(filepath.Join(dir, "op")); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("unknown kind %q", c.kind)
		}
	}
	for _, f := range shared {
		p := filepath.Join(s.SharedDir(), filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStorageLatestAndList: only a checkpoint with a readable metadata file
// of this version is completed; a half-written one (temporary metadata
// only), a corrupt one, one of another version and an empty one are
// incomplete and never returned by Latest; names other than chk-<n>, n > 0,
// are not checkpoints.
func TestStorageLatestAndList(t *testing.T) {
	for _, tc := range []struct {
		name       string
		chks       []chkLayout
		wantList   []string
		wantLatest int64 // 0: ErrNoCheckpoint
	}{
		{name: "no job dir", wantLatest: 0},
		{
			name:       "newer half-written",
			chks:       []chkLayout{{id: 1, kind: "completed"}, {id: 2, kind: "completed"}, {id: 3, kind: "tmp"}},
			wantList:   []string{"1:completed", "2:completed", "3:incomplete"},
			wantLatest: 2,
		},
		{
			name:       "every kind of broken newer checkpoint",
			chks:       []chkLayout{{id: 4, kind: "completed"}, {id: 5, kind: "tmp"}, {id: 6, kind: "corrupt"}, {id: 7, kind: "version"}, {id: 8, kind: "empty"}},
			wantList:   []string{"4:completed", "5:incomplete", "6:incomplete", "7:incomplete", "8:incomplete"},
			wantLatest: 4,
		},
		{
			name:       "only half-written",
			chks:       []chkLayout{{id: 1, kind: "tmp"}},
			wantList:   []string{"1:incomplete"},
			wantLatest: 0,
		},
		{
			// Sorted by number, not by name.
			name:       "ids past 9",
			chks:       []chkLayout{{id: 9, kind: "completed"}, {id: 10, kind: "completed"}, {id: 100, kind: "tmp"}},
			wantList:   []string{"9:completed", "10:completed", "100:incomplete"},
			wantLatest: 10,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStorage(t.TempDir(), "job", 3, nil)
			writeLayout(t, s, tc.chks, nil)
			if len(tc.chks) > 0 {
				for _, junk := range []string{"chk-0", "chk-x", "chk--3", "savepoint-1-1"} {
					if err := os.MkdirAll(filepath.Join(s.JobDir(), junk), 0o755); err != nil {
						t.Fatal(err)
					}
				}
				if err := os.WriteFile(filepath.Join(s.JobDir(), "chk-99"), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got := listStates(t, s); !slices.Equal(got, tc.wantList) {
				t.Fatalf("List = %q, want %q", got, tc.wantList)
			}
			dir, m, err := s.Latest()
			if tc.wantLatest == 0 {
				if !errors.Is(err, ErrNoCheckpoint) {
					t.Fatalf("Latest = %s, %v; want ErrNoCheckpoint", dir, err)
				}
				return
			}
			if err != nil || dir != s.CheckpointDir(tc.wantLatest) || m.CheckpointID != tc.wantLatest || !m.Timestamp.Equal(time.Unix(1000+tc.wantLatest, 0)) {
				t.Fatalf("Latest = %s, %+v, %v; want chk-%d", dir, m, err, tc.wantLatest)
			}
		})
	}
}

func TestListReportsSizeAndTime(t *testing.T) {
	s := NewStorage(t.TempDir(), "job", 3, nil)
	writeLayout(t, s, []chkLayout{{id: 1, kind: "completed"}, {id: 2, kind: "tmp"}}, nil)
	infos, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	tmpSize := fileSize(t, filepath.Join(s.CheckpointDir(2), MetadataFile+".tmp"))
	want := []Info{
		{ID: 1, Dir: s.CheckpointDir(1), State: StateCompleted, Time: time.Unix(1001, 0).UTC(), Bytes: 5},
		{ID: 2, Dir: s.CheckpointDir(2), State: StateIncomplete, Time: infos[1].Time, Bytes: 5 + tmpSize},
	}
	if !reflect.DeepEqual(infos, want) {
		t.Fatalf("List = %+v\nwant %+v", infos, want)
	}
	if infos[1].Time.IsZero() {
		t.Fatal("incomplete checkpoint without a directory time")
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// TestPrune: retention keeps the newest Retained completed checkpoints and
// any incomplete one newer than the newest completed (it may be in flight),
// deletes the rest, and deletes exactly the shared files no kept
// checkpoint refers to.
func TestPrune(t *testing.T) {
	for _, tc := range []struct {
		name       string
		retained   int
		chks       []chkLayout
		shared     []string
		wantList   []string
		wantShared []string
		wantRefs   map[string]int
	}{
		{
			name:     "rolls over",
			retained: 2,
			chks: []chkLayout{
				{id: 1, kind: "completed", shared: []string{"a", "b"}},
				{id: 2, kind: "completed", shared: []string{"b", "c"}},
				{id: 3, kind: "tmp", shared: []string{"x"}},
				{id: 4, kind: "completed", shared: []string{"c", "d"}},
				{id: 5, kind: "completed", shared: []string{"d", "e", "sub/y"}},
				{id: 6, kind: "tmp"},
			},
			shared:     []string{"a", "b", "c", "d", "e", "x", "orphan", "sub/y", "sub/z", "d.tmp"},
			wantList:   []string{"4:completed", "5:completed", "6:incomplete"},
			wantShared: []string{"c", "d", "e", "sub/y"},
			wantRefs:   map[string]int{"c": 1, "d": 2, "e": 1, "sub/y": 1},
		},
		{
			name:       "fewer than retained",
			retained:   3,
			chks:       []chkLayout{{id: 1, kind: "corrupt"}, {id: 2, kind: "completed", shared: []string{"a"}}, {id: 3, kind: "completed", shared: []string{"a"}}},
			shared:     []string{"a", "b"},
			wantList:   []string{"2:completed", "3:completed"},
			wantShared: []string{"a"},
			wantRefs:   map[string]int{"a": 2},
		},
		{
			name:     "no completed checkpoint deletes nothing",
			retained: 1,
			chks:     []chkLayout{{id: 1, kind: "tmp"}, {id: 2, kind: "empty"}},
			shared:   []string{"a"},
			wantList: []string{"1:incomplete", "2:incomplete"}, wantShared: []string{"a"}, wantRefs: map[string]int{},
		},
		{
			name:     "no shared dir",
			retained: 1,
			chks:     []chkLayout{{id: 1, kind: "completed"}, {id: 2, kind: "completed"}},
			wantList: []string{"2:completed"}, wantRefs: map[string]int{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStorage(t.TempDir(), "job", tc.retained, nil)
			writeLayout(t, s, tc.chks, tc.shared)
			if err := s.Prune(); err != nil {
				t.Fatalf("Prune: %v", err)
			}
			if got := listStates(t, s); !slices.Equal(got, tc.wantList) {
				t.Fatalf("List = %q, want %q", got, tc.wantList)
			}
			var onDisk []string
			if exists(t, s.SharedDir()) {
				onDisk = sharedFiles(t, s.SharedDir())
			}
			if !slices.Equal(onDisk, tc.wantShared) {
				t.Fatalf("shared files = %q, want %q", onDisk, tc.wantShared)
			}
			refs, err := s.SharedRefCounts()
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(refs, tc.wantRefs) {
				t.Fatalf("SharedRefCounts = %v, want %v", refs, tc.wantRefs)
			}
			// Prune is idempotent.
			if err := s.Prune(); err != nil {
				t.Fatalf("second Prune: %v", err)
			}
			if got := listStates(t, s); !slices.Equal(got, tc.wantList) {
				t.Fatalf("List after a second Prune = %q, want %q", got, tc.wantList)
			}
		})
	}
}

// TestDiscardIncomplete deletes every checkpoint without readable metadata
// (aborted, cut short, corrupt), whatever its id, and nothing else.
func TestDiscardIncomplete(t *testing.T) {
	s := NewStorage(t.TempDir(), "job", 3, nil)
	writeLayout(t, s, []chkLayout{
		{id: 1, kind: "completed", shared: []string{"a"}}, {id: 2, kind: "tmp"}, {id: 3, kind: "corrupt"},
		{id: 4, kind: "completed", shared: []string{"a"}}, {id: 5, kind: "empty"}, {id: 6, kind: "version"},
	}, []string{"a", "b"})
	if err := s.DiscardIncomplete(); err != nil {
		t.Fatal(err)
	}
	if got := listStates(t, s); !slices.Equal(got, []string{"1:completed", "4:completed"}) {
		t.Fatalf("List = %q, want [1:completed 4:completed]", got)
	}
	for _, id := range []int64{2, 3, 5, 6} {
		if exists(t, s.CheckpointDir(id)) {
			t.Fatalf("chk-%d survived", id)
		}
	}
	// Shared files are retention's business.
	if got := sharedFiles(t, s.SharedDir()); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("shared files = %q", got)
	}
	if err := s.DiscardIncomplete(); err != nil {
		t.Fatal(err)
	}
	if err := NewStorage(t.TempDir(), "none", 3, nil).DiscardIncomplete(); err != nil {
		t.Fatalf("DiscardIncomplete without a job dir = %v", err)
	}
}

func TestReadMetadataErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadMetadata(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ReadMetadata without a file = %v, want ErrNotExist", err)
	}
	for _, tc := range []struct{ name, content string }{
		{"truncated", `{"version": 1`},
		{"wrong type", `{"version": "1"}`},
		{"newer version", `{"version": 4}`},
		{"version 0", `{"version": 0}`},
		{"no version", `{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(dir, MetadataFile), []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := ReadMetadata(dir); !errors.Is(err, ErrCorruptMetadata) {
				t.Fatalf("ReadMetadata(%s) = %v, want ErrCorruptMetadata", tc.content, err)
			}
		})
	}
}

// FuzzReadMetadata: ReadMetadata never panics, and what it accepts writes
// and reads back unchanged.
func FuzzReadMetadata(f *testing.F) {
	good, _ := json.Marshal(&Metadata{Version: MetadataVersion, Job: "job", CheckpointID: 3, MaxParallelism: 128,
		Operators:   map[string]OperatorMetadata{"op": {Parallelism: 2, Subtasks: []json.RawMessage{json.RawMessage(`{"key_groups":{"Start":0,"End":63}}`), json.RawMessage(`null`)}}},
		SharedFiles: []string{"a-000001.sst"}, SharedDir: "../shared", Bytes: 10})
	sink, _ := json.Marshal(&Metadata{Version: MetadataVersion, Job: "job", CheckpointID: 4, MaxParallelism: 128,
		Operators: map[string]OperatorMetadata{"sink": {Parallelism: 2, RequiredStates: []string{"c"},
			Subtasks: []json.RawMessage{json.RawMessage(`{"operator":{"c":{"mode":"split","entries":["e30="]}}}`), json.RawMessage(`{"keyed":{"files":[{"path":"x","size":3}]}}`)}}}})
	for _, seed := range []string{string(good), string(sink), `{"version":1}`, `{"version":2}`, `{"version":3}`, `{`, ``, `null`, `{"version":1,"operators":{"x":{"subtasks":[1,"a"]}}}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, MetadataFile), data, 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := ReadMetadata(dir)
		if err != nil {
			if !errors.Is(err, ErrCorruptMetadata) {
				t.Fatalf("error %v does not wrap ErrCorruptMetadata", err)
			}
			return
		}
		if err := Verify(dir, m, VerifyOptions{InferRequired: []string{"c"}}); err != nil && !errors.Is(err, ErrInconsistent) {
			t.Fatalf("Verify error %v does not wrap ErrInconsistent", err)
		}
		out := t.TempDir()
		if err := writeMetadata(out, m, nil); err != nil {
			t.Fatal(err)
		}
		again, err := ReadMetadata(out)
		if err != nil {
			t.Fatalf("re-reading written metadata: %v", err)
		}
		a, _ := json.Marshal(m)
		b, _ := json.Marshal(again)
		if string(a) != string(b) {
			t.Fatalf("round trip changed the metadata:\n%s\n%s", a, b)
		}
	})
}

// TestListAll checks what `kstreamd checkpoints list` shows: a job
// directory's checkpoints plus the savepoint its pointer names elsewhere,
// a savepoint directory's savepoints (savepoint-<id>-<unix>), and one
// savepoint directory given itself.
func TestListAll(t *testing.T) {
	root := t.TempDir()
	s := NewStorage(filepath.Join(root, "checkpoints"), "job", 3, nil)
	writeLayout(t, s, []chkLayout{{id: 1, kind: "completed"}, {id: 2, kind: "empty"}, {id: 4, kind: "completed"}}, nil)
	spRoot := filepath.Join(root, "savepoints")
	savepoint := func(id int64, complete bool) string {
		dir := filepath.Join(spRoot, fmt.Sprintf("savepoint-%d-%d", id, 1700000000+id))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if complete {
			m := &Metadata{Version: MetadataVersion, Job: "job", CheckpointID: id, Savepoint: true, MaxParallelism: 128,
				Timestamp: time.Unix(2000+id, 0).UTC(), Operators: map[string]OperatorMetadata{}, Bytes: 7}
			if err := writeMetadata(dir, m, nil); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	sp3, sp5, sp6 := savepoint(3, true), savepoint(5, true), savepoint(6, false)
	for _, junk := range []string{"savepoint-x-1", "savepoint-7", "notes"} {
		if err := os.MkdirAll(filepath.Join(spRoot, junk), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.RecordSavepoint(sp3); err != nil {
		t.Fatal(err)
	}
	type row struct {
		ID        int64
		State     string
		Savepoint bool
		Dir       string
	}
	rows := func(dir string) []row {
		infos, err := ListAll(dir)
		if err != nil {
			t.Fatalf("ListAll(%s): %v", dir, err)
		}
		var out []row
		for _, in := range infos {
			out = append(out, row{in.ID, in.State, in.Savepoint, in.Dir})
		}
		return out
	}
	for _, tc := range []struct {
		dir  string
		want []row
	}{
		{s.JobDir(), []row{
			{1, StateCompleted, false, s.CheckpointDir(1)},
			{2, StateIncomplete, false, s.CheckpointDir(2)},
			{3, StateCompleted, true, sp3},
			{4, StateCompleted, false, s.CheckpointDir(4)},
		}},
		{spRoot, []row{
			{3, StateCompleted, true, sp3},
			{5, StateCompleted, true, sp5},
			{6, StateIncomplete, true, sp6},
		}},
		{sp5, []row{{5, StateCompleted, true, sp5}}},
		{filepath.Join(root, "missing"), nil},
	} {
		if got := rows(tc.dir); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ListAll(%s) =\n%+v\nwant\n%+v", tc.dir, got, tc.want)
		}
	}
}
