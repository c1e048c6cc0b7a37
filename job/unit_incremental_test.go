package job_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/internal/testkit"
)

// TestUnitsFullThenIncremental: the upgrade to cluster mode's default of
// incremental checkpoints. Owner a runs the two stages of a keyed count
// (Pebble) with full checkpoints, as a cluster job did before the default;
// owner b takes every unit over from the store alone (a's staging
// directory deleted), restoring a's full checkpoints, and goes on with
// incremental ones, one retained, until each stage-1 unit completed three
// of its own (a's are pruned by then); owner c takes over from b's
// incremental checkpoints, whose shared files must all still be in the
// store. The read_committed output holds, per key, exactly the counts
// 1..n.
func TestUnitsFullThenIncremental(t *testing.T) {
	f := newUnitFixture(t, "units.yaml", strings.Replace(unitsYAML, "units: 4", "units: 2", 1), kfake.SeedTopics(2, "clicks", "counts"))
	opts, st, dir := f.opts, f.st, f.dir
	ctx := context.Background()
	f.ensureRepartitions(t)
	set := f.set
	set.StateBackend, set.Retained = "pebble", 1
	var logs testkit.SyncBuffer
	const users, perUser = 5, 21
	committed := func() []*kgo.Record {
		return testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), "counts", 10*time.Second)
	}
	latest := func(u int) checkpoint.Head {
		h, err := checkpoint.Heads{Store: set.Store, Prefix: checkpoint.UnitPrefix("clicks", 1, u)}.Latest(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	// run runs every unit as member until want output records are
	// committed and each stage-1 unit's newest HEAD is one of member's
	// checkpoints at least after more than the HEAD it started from.
	run := func(member string, incremental bool, want, after int) []string {
		s := set
		s.Incremental = incremental
		from := make([]int64, st.Units)
		for u := range st.Units {
			from[u] = latest(u).CheckpointID
		}
		return runUnits(t, st, s, dir, member, opts, nil, &logs, func() bool {
			if len(committed()) < want {
				return false
			}
			for u := range st.Units {
				if h := latest(u); h.Owner != member || h.Claim || h.CheckpointID < from[u]+int64(after) {
					return false
				}
			}
			return true
		})
	}
	// store lists the files of the store's unit namespaces: the
	// shared files and the checkpoint directories.
	store := func() (shared, chks []string) {
		root := dir + "/store"
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			switch {
			case !d.IsDir() && strings.Contains(rel, "/shared/"):
				shared = append(shared, rel)
			case d.IsDir() && strings.HasPrefix(d.Name(), "chk-"):
				chks = append(chks, rel)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return shared, chks
	}
	produceClicks(t, opts, 0, perUser/3, users)
	run("a", false, users*perUser/3, 1)
	if shared, chks := store(); len(shared) != 0 || len(chks) == 0 {
		t.Fatalf("after a's full checkpoints the store holds shared files %v, checkpoints %v", shared, chks)
	}
	if err := os.RemoveAll(dir + "/a"); err != nil {
		t.Fatal(err)
	}
	produceClicks(t, opts, perUser/3, 2*perUser/3, users)
	checkRestoredFrom(t, run("b", true, users*2*perUser/3, 3), dir, "b", "clicks")
	shared, chks := store()
	if len(shared) == 0 {
		t.Fatalf("after b's incremental checkpoints the store holds no shared file (checkpoints %v)", chks)
	}
	if err := os.RemoveAll(dir + "/b"); err != nil {
		t.Fatal(err)
	}
	produceClicks(t, opts, 2*perUser/3, perUser, users)
	checkRestoredFrom(t, run("c", true, users*perUser, 1), dir, "c", "clicks")
	checkUserCounts(t, committed(), users, perUser)
	if t.Failed() {
		t.Logf("warnings:\n%s", logs.String())
	}
}
