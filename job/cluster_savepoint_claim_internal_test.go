package job

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/graph"
)

// TestGatherClusterSavepointMetadataClaim: the newest HEAD names chk-3,
// whose _metadata (version 4, every private file inline) names its claim
// (HEAD metadata_claim). Beside it lie a zombie's owner marker and
// private file (a marked checkpoint of the same id that lost the
// _metadata create). The gathered savepoint holds exactly the writer's
// inline file and the shared file its _metadata names, nothing of the
// zombie's.
func TestGatherClusterSavepointMetadataClaim(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	store := checkpoint.FileStore{Root: filepath.Join(root, "store")}
	st := &graph.Stages{Job: "j", Units: 1, MaxParallelism: 128, Stages: []*graph.Stage{{Index: 0}}}
	prefix := checkpoint.UnitPrefix("j", 0, 0)
	ts, _ := json.Marshal(checkpoint.TaskState{Keyed: json.RawMessage(`{"files":[{"path":"count/0/000001.sst","size":7},{"path":"i-000002.sst","shared":true,"size":6}]}`)})
	m := checkpoint.Metadata{Version: checkpoint.InlineMetadataVersion, Job: "j", CheckpointID: 3, MaxParallelism: 128,
		SharedFiles: []string{"i-000002.sst"}, SharedDir: "../shared",
		Operators:   map[string]checkpoint.OperatorMetadata{"count": {Parallelism: 1, Subtasks: []json.RawMessage{ts}}},
		InlineFiles: map[string][]byte{"count/0/000001.sst": []byte("private")},
		Claim:       &checkpoint.ClaimMarker{Claim: 5, Owner: "c"}}
	mb, _ := json.Marshal(m)
	for k, v := range map[string]string{
		prefix + "chk-3/" + checkpoint.ClaimFile:    `{"claim":3,"owner":"b"}`,
		prefix + "chk-3/count/0/000009.sst":         "the zombie's",
		prefix + "chk-3/count/0/000001.sst":         "the zombie's too",
		prefix + "chk-3/" + checkpoint.MetadataFile: string(mb),
		prefix + "shared/i-000002.sst":              "shared",
	} {
		if err := store.Create(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	if err := (checkpoint.Heads{Store: store, Prefix: prefix}).Create(ctx, checkpoint.Head{Seq: 6, CheckpointID: 3, Owner: "c", MetadataClaim: 5}); err != nil {
		t.Fatal(err)
	}
	sp, err := gatherClusterSavepoint(ctx, st, store, filepath.Join(root, "savepoints"), nil, func(string) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := filepath.WalkDir(filepath.Join(sp, "units"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(sp, p)
			got = append(got, filepath.ToSlash(rel))
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := []string{"units/0/0/chk/count/0/000001.sst", "units/0/0/shared/i-000002.sst"}; !slices.Equal(got, want) {
		t.Errorf("the savepoint's unit files %q, want %q", got, want)
	}
	if b, err := os.ReadFile(filepath.Join(sp, "units/0/0/chk/count/0/000001.sst")); err != nil || string(b) != "private" {
		t.Errorf("gathered count/0/000001.sst %q (%v), want the writer's %q", b, err, "private")
	}
}
