package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/state"
)

// writeCheckpoint writes a completed checkpoint's metadata (no operator
// state) with max parallelism maxP into dir.
func writeCheckpoint(t *testing.T, dir string, id int64, maxP int, savepoint bool) {
	t.Helper()
	m := checkpoint.Metadata{Version: checkpoint.MetadataVersion, Job: "rescale", CheckpointID: id, Savepoint: savepoint,
		Timestamp: time.Unix(1700000000, 0).UTC(), MaxParallelism: maxP, Operators: map[string]checkpoint.OperatorMetadata{}}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, checkpoint.MetadataFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBuildRestoreMaxParallelism: restoring a checkpoint or savepoint taken
// with another max parallelism than job.max_parallelism sets fails with a
// message naming both values; when the config derives it, the checkpoint's
// is kept (and must fit every operator's parallelism). The brokers are a
// kfake cluster holding the job's topics.
func TestBuildRestoreMaxParallelism(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "items", "rules", "matches"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	for _, tc := range []struct {
		name        string
		maxP        int // job.max_parallelism; 0 derives it (128 at parallelism 2 or 4)
		parallelism int
		chkMaxP     int
		savepoint   bool
		wantErr     string // with %s for the restored directory; "" for success
		wantIs      error
	}{
		{
			name: "checkpoint with another max parallelism", maxP: 128, parallelism: 2, chkMaxP: 256,
			wantErr: "job: restore %s: the checkpoint has max parallelism 256, the config sets job.max_parallelism 128; it cannot change across a restore: state: max parallelism changed",
			wantIs:  ErrMaxParallelismChanged,
		},
		{
			name: "savepoint with another max parallelism", maxP: 256, parallelism: 2, chkMaxP: 128, savepoint: true,
			wantErr: "job: restore %s: the checkpoint has max parallelism 128, the config sets job.max_parallelism 256; it cannot change across a restore: state: max parallelism changed",
			wantIs:  ErrMaxParallelismChanged,
		},
		{
			name: "derived max parallelism keeps the checkpoint's, too small", parallelism: 4, chkMaxP: 2,
			wantErr: `job: operator "matcher": parallelism 4 exceeds the restored max parallelism 2`,
		},
		{name: "derived max parallelism keeps the checkpoint's", parallelism: 2, chkMaxP: 256},
		{name: "same max parallelism", maxP: 256, parallelism: 2, chkMaxP: 256},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := t.TempDir()
			yaml := fmt.Sprintf(`job:
  name: rescale
  parallelism: %d
  max_parallelism: %d
data_dir: %s
kafka:
  brokers: [%s]
sources:
  - name: items
    topic: items
  - name: rules
    topic: rules
operators:
  - name: matcher
    type: shape_pair_matcher
    input: items
    key_by: color
    broadcast: rules
sinks:
  - name: matches
    input: matcher
    topic: matches
`, tc.parallelism, tc.maxP, dataDir, strings.Join(cluster.ListenAddrs(), ", "))
			cfg, err := Parse("rescale.yaml", []byte(yaml), nil)
			if err != nil {
				t.Fatal(err)
			}
			deps := Deps{Registerer: prometheus.NewRegistry(), ClientOpts: []kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)}}
			restored := filepath.Join(cfg.CheckpointDir(), "rescale", "chk-7")
			if tc.savepoint {
				restored = filepath.Join(dataDir, "savepoints", "savepoint-7-1700000000")
				deps.FromSavepoint = restored
			}
			writeCheckpoint(t, restored, 7, tc.chkMaxP, tc.savepoint)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			job, err := Build(ctx, cfg, deps)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Build: %v", err)
				}
				if job.RestoredFrom() != restored {
					t.Fatalf("restored from %q, want %q", job.RestoredFrom(), restored)
				}
				return
			}
			want := tc.wantErr
			if strings.Contains(want, "%s") {
				want = fmt.Sprintf(want, restored)
			}
			if err == nil || err.Error() != want {
				t.Fatalf("Build = %v\nwant %s", err, want)
			}
			if tc.wantIs != nil && (!errors.Is(err, tc.wantIs) || !errors.Is(err, state.ErrMaxParallelismChanged)) {
				t.Fatalf("Build error does not wrap ErrMaxParallelismChanged: %v", err)
			}
		})
	}
}
