package job

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/graph"
)

// TestGatherClusterSavepointSyncs: a cluster savepoint is a durable copy
// (the stopped job's units' state may be removed after it), but its
// units' files arrive through Store.Download, which writes a restore's
// working copy without fsync. The gather must fsync every file it copied
// (the unit's private file and the shared file it refers to), every
// directory of the savepoint and the directory holding it, all before
// the savepoint's _metadata (its commit point) exists.
func TestGatherClusterSavepointSyncs(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	store := checkpoint.FileStore{Root: filepath.Join(root, "store")}
	st := &graph.Stages{Job: "j", Units: 1, MaxParallelism: 128, Stages: []*graph.Stage{{Index: 0}}}
	prefix := checkpoint.UnitPrefix("j", 0, 0)
	ts, _ := json.Marshal(checkpoint.TaskState{Keyed: json.RawMessage(`{"files":[{"path":"count/0/000001.sst","size":7},{"path":"i-000002.sst","shared":true,"size":6}]}`)})
	m := checkpoint.Metadata{Version: checkpoint.MetadataVersion, Job: "j", CheckpointID: 3, MaxParallelism: 128,
		SharedFiles: []string{"i-000002.sst"},
		Operators:   map[string]checkpoint.OperatorMetadata{"count": {Parallelism: 1, Subtasks: []json.RawMessage{ts}}}}
	mb, _ := json.Marshal(m)
	for k, v := range map[string]string{
		prefix + "chk-3/count/0/000001.sst":         "private",
		prefix + "chk-3/" + checkpoint.MetadataFile: string(mb),
		prefix + "shared/i-000002.sst":              "shared",
	} {
		if err := store.Create(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	if err := (checkpoint.Heads{Store: store, Prefix: prefix}).Create(ctx, checkpoint.Head{Seq: 1, CheckpointID: 3, Owner: "a"}); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "savepoints")
	var synced []string
	var early []string // synced after the savepoint's _metadata existed
	sp, err := gatherClusterSavepoint(ctx, st, store, dir, nil, func(p string) error {
		synced = append(synced, p)
		if matches, _ := filepath.Glob(filepath.Join(dir, "*", checkpoint.MetadataFile)); len(matches) > 0 {
			early = append(early, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(sp, "units/0/0/chk/count/0/000001.sst")); err != nil || string(b) != "private" {
		t.Fatalf("gathered private file %q, %v", b, err)
	}
	want := []string{
		filepath.Join(sp, "units/0/0/chk/count/0/000001.sst"),
		filepath.Join(sp, "units/0/0/shared/i-000002.sst"),
		filepath.Join(sp, "units/0/0/chk/count/0"),
		filepath.Join(sp, "units/0/0/chk"),
		filepath.Join(sp, "units/0/0/shared"),
		filepath.Join(sp, "units/0/0"),
		filepath.Join(sp, "units"),
		sp,
		dir,
	}
	for _, p := range want {
		if !slices.Contains(synced, p) {
			t.Errorf("%s was never synced (synced: %q)", p, synced)
		}
	}
	if len(early) > 0 {
		t.Errorf("synced after _metadata was written: %q", early)
	}
}

// TestGatherClusterSavepointInlineFiles: a unit checkpoint whose small
// private files are in its store _metadata (version 4, inline_files, as
// checkpoint.Owner's upload writes them) gathers into a savepoint holding
// those files with their bytes beside the ones that are objects, each
// synced before the savepoint's _metadata, which carries no inline files.
func TestGatherClusterSavepointInlineFiles(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	store := checkpoint.FileStore{Root: filepath.Join(root, "store")}
	st := &graph.Stages{Job: "j", Units: 1, MaxParallelism: 128, Stages: []*graph.Stage{{Index: 0}}}
	prefix := checkpoint.UnitPrefix("j", 0, 0)
	ts, _ := json.Marshal(checkpoint.TaskState{Keyed: json.RawMessage(`{"files":[{"path":"count/0/000001.sst","size":7},{"path":"count/0/MANIFEST-000001","size":8}]}`)})
	m := checkpoint.Metadata{Version: checkpoint.InlineMetadataVersion, Job: "j", CheckpointID: 3, MaxParallelism: 128,
		Operators:   map[string]checkpoint.OperatorMetadata{"count": {Parallelism: 1, Subtasks: []json.RawMessage{ts}}},
		InlineFiles: map[string][]byte{"count/0/MANIFEST-000001": []byte("manifest")}}
	mb, _ := json.Marshal(m)
	for k, v := range map[string]string{
		prefix + "chk-3/count/0/000001.sst":         "private",
		prefix + "chk-3/" + checkpoint.MetadataFile: string(mb),
	} {
		if err := store.Create(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	if err := (checkpoint.Heads{Store: store, Prefix: prefix}).Create(ctx, checkpoint.Head{Seq: 1, CheckpointID: 3, Owner: "a"}); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "savepoints")
	var synced []string
	sp, err := gatherClusterSavepoint(ctx, st, store, dir, nil, func(p string) error { synced = append(synced, p); return nil })
	if err != nil {
		t.Fatal(err)
	}
	for rel, want := range map[string]string{"count/0/000001.sst": "private", "count/0/MANIFEST-000001": "manifest"} {
		p := filepath.Join(sp, "units/0/0/chk", filepath.FromSlash(rel))
		if b, err := os.ReadFile(p); err != nil || string(b) != want {
			t.Errorf("gathered %s: %q, %v; want %q", rel, b, err, want)
		}
		if !slices.Contains(synced, p) {
			t.Errorf("%s was never synced", p)
		}
	}
	got, err := checkpoint.ReadMetadata(sp)
	if err != nil {
		t.Fatal(err)
	}
	if got.InlineFiles != nil || got.Version != checkpoint.MetadataVersion {
		t.Errorf("savepoint metadata version %d with %d inline files, want %d and none", got.Version, len(got.InlineFiles), checkpoint.MetadataVersion)
	}
}
