package s3store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/checkpoint/s3store"
	"github.com/kstreamd/kstreamd/internal/testkit"
)

func newS3(t *testing.T, honour bool, prefix string) *s3store.Store {
	t.Helper()
	addr := testkit.S3Server(t, "kstreamd", honour)
	s, err := s3store.New(s3store.Config{Endpoint: addr, Bucket: "kstreamd", Prefix: prefix, Region: "us-east-1",
		PathStyle: true, AccessKey: testkit.S3AccessKey, SecretKey: testkit.S3SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestS3CreateOnly: on a store that honours If-None-Match, the self-test
// passes, a second create of one HEAD fails with ErrHeadExists and the
// first HEAD stays as written; a missing key reads as fs.ErrNotExist.
func TestS3CreateOnly(t *testing.T) {
	ctx := context.Background()
	s := newS3(t, true, "team/")
	if err := checkpoint.SelfTest(ctx, s, "clicks/"); err != nil {
		t.Fatal(err)
	}
	heads := checkpoint.Heads{Store: s, Prefix: checkpoint.UnitPrefix("clicks", 1, 2)}
	first := checkpoint.Head{Seq: 1, CheckpointID: 0, Owner: "a", Claim: true, Fingerprint: "fp"}
	if err := heads.Create(ctx, first); err != nil {
		t.Fatal(err)
	}
	err := heads.Create(ctx, checkpoint.Head{Seq: 1, Owner: "b", Fingerprint: "fp"})
	if !errors.Is(err, checkpoint.ErrHeadExists) {
		t.Fatalf("second create of HEAD-1: %v, want ErrHeadExists", err)
	}
	if got, err := heads.Latest(ctx); err != nil || got != first {
		t.Errorf("latest %+v (%v), want %+v", got, err, first)
	}
	keys, err := s.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"clicks/units/1/2/HEAD-1"}; !slices.Equal(keys, want) {
		t.Errorf("store holds %q, want %q (the probe deleted)", keys, want)
	}
	if _, err := s.Read(ctx, "clicks/none"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("read of a missing key: %v, want fs.ErrNotExist", err)
	}
	// An empty file (Pebble writes some) uploads and reads back empty.
	empty := filepath.Join(t.TempDir(), "marker")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Upload(ctx, "clicks/empty", empty); err != nil {
		t.Fatal(err)
	}
	if b, err := s.Read(ctx, "clicks/empty"); err != nil || len(b) != 0 {
		t.Errorf("empty object reads %q (%v), want empty", b, err)
	}
}

// TestS3SelfTestRefusesOverwritingStore: a server that ignores
// If-None-Match is refused at start, naming the store and what happened.
func TestS3SelfTestRefusesOverwritingStore(t *testing.T) {
	s := newS3(t, false, "")
	err := checkpoint.SelfTest(context.Background(), s, "clicks/")
	if !errors.Is(err, checkpoint.ErrCreateOnlyIgnored) {
		t.Fatalf("self-test: %v, want ErrCreateOnlyIgnored", err)
	}
	want := "checkpoint: store self-test of " + s.String() + ": a second create-only write of clicks/.selftest-"
	if !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "succeeded (it overwrote the object)") {
		t.Errorf("refusal %q, want it to start with %q and say it overwrote", err, want)
	}
	if !strings.HasPrefix(s.String(), "s3 kstreamd/ at 127.0.0.1:") {
		t.Errorf("store name %q", s.String())
	}
}

// writeLocal writes checkpoint id into the local staging storage: a
// private state file and the shared files it refers to.
func writeLocal(t *testing.T, local *checkpoint.Storage, id int64, shared ...string) {
	t.Helper()
	dir := local.CheckpointDir(id)
	if err := os.MkdirAll(filepath.Join(dir, "per_user-0"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "per_user-0", "state"), fmt.Appendf(nil, "state %d", id), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range shared {
		p := filepath.Join(local.SharedDir(), filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m := checkpoint.Metadata{Version: checkpoint.MetadataVersion, Job: "clicks", CheckpointID: id, MaxParallelism: 16,
		SharedFiles: shared, SharedDir: "../shared", Operators: map[string]checkpoint.OperatorMetadata{}}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, checkpoint.MetadataFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func localFiles(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// TestUnitRetention, on the filesystem store and on S3: an owner uploads
// four checkpoints of unit 0/0 (incremental shared files a..d) with 2
// retained; after retention the unit's namespace holds exactly the HEADs
// naming the two newest checkpoints, their files, and the shared files
// they refer to; another unit's objects and a chk-<id> newer than the
// newest HEAD (another owner's, in flight) stay. A second owner with an
// empty staging directory downloads exactly the newest checkpoint and its
// shared files, and starts its ids above every chk-<id> in the store. The
// first owner, now a zombie, deletes nothing.
func TestUnitRetention(t *testing.T) {
	for _, kind := range []string{"filesystem", "s3"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			var store checkpoint.Store = checkpoint.FileStore{Root: t.TempDir()}
			if kind == "s3" {
				store = newS3(t, true, "p/")
			}
			// Another unit's objects and another owner's chk-9 in flight.
			for _, k := range []string{"clicks/units/1/0/chk-1/_metadata", "clicks/units/1/0/shared/x/b.sst", "clicks/units/0/0/chk-9/per_user-0/state"} {
				if err := store.Create(ctx, k, []byte("other")); err != nil {
					t.Fatal(err)
				}
			}
			local := checkpoint.NewStorage(filepath.Join(t.TempDir(), "clicks", "units", "0"), "0", 2, nil)
			ns := checkpoint.Namespace{Store: store, Prefix: checkpoint.UnitPrefix("clicks", 0, 0), Local: local}
			a, _, err := checkpoint.Claim(ctx, ns, "a", "fp", 1, 2)
			if err != nil {
				t.Fatal(err)
			}
			if got := a.NextCheckpointID(); got != 10 {
				t.Errorf("first id %d, want 10 (above chk-9)", got)
			}
			shared := map[int64][]string{1: {"i/a.sst", "i/b.sst"}, 2: {"i/a.sst", "i/b.sst"}, 3: {"i/a.sst", "i/c.sst"}, 4: {"i/a.sst", "i/c.sst", "i/d.sst"}}
			for id := int64(1); id <= 4; id++ {
				writeLocal(t, local, id, shared[id]...)
				if err := a.Checkpoint(ctx, id, checkpoint.UnitCommit{}); err != nil {
					t.Fatal(err)
				}
				if err := a.Retain(ctx, a.Seq()); err != nil {
					t.Fatal(err)
				}
			}
			keys, err := store.List(ctx, "clicks/")
			if err != nil {
				t.Fatal(err)
			}
			want := []string{
				"clicks/units/0/0/HEAD-4", "clicks/units/0/0/HEAD-5",
				"clicks/units/0/0/chk-3/_metadata", // per_user-0/state inline: the _metadata is the owner marker
				"clicks/units/0/0/chk-4/_metadata",
				"clicks/units/0/0/chk-9/per_user-0/state",
				"clicks/units/0/0/shared/i/a.sst", "clicks/units/0/0/shared/i/c.sst", "clicks/units/0/0/shared/i/d.sst",
				"clicks/units/1/0/chk-1/_metadata", "clicks/units/1/0/shared/x/b.sst",
			}
			if !slices.Equal(keys, want) {
				t.Errorf("after retention the store holds\n%q\nwant\n%q", keys, want)
			}
			if fst, ok := store.(checkpoint.FileStore); ok { // no empty chk-<id> directory left behind
				ents, err := os.ReadDir(filepath.Join(fst.Root, "clicks", "units", "0", "0"))
				if err != nil {
					t.Fatal(err)
				}
				var names []string
				for _, e := range ents {
					names = append(names, e.Name())
				}
				if want := []string{"HEAD-4", "HEAD-5", "chk-3", "chk-4", "chk-9", "shared"}; !slices.Equal(names, want) {
					t.Errorf("the unit's directory holds %q, want %q", names, want)
				}
			}

			// b takes the unit over with an empty staging directory.
			stageB := t.TempDir()
			localB := checkpoint.NewStorage(filepath.Join(stageB, "clicks", "units", "0"), "0", 2, nil)
			nsB := ns
			nsB.Local = localB
			b, head, err := checkpoint.Claim(ctx, nsB, "b", "fp", 1, 2)
			if err != nil {
				t.Fatal(err)
			}
			if head.CheckpointID != 4 || head.Seq != 5 {
				t.Fatalf("b restores %+v, want HEAD-5 naming chk-4", head)
			}
			dir, m, err := b.Restore(ctx, head)
			if err != nil {
				t.Fatal(err)
			}
			if m.CheckpointID != 4 || dir != localB.CheckpointDir(4) {
				t.Errorf("restored %s (checkpoint %d), want %s (4)", dir, m.CheckpointID, localB.CheckpointDir(4))
			}
			wantLocal := []string{"clicks/units/0/0/chk-4/_metadata", "clicks/units/0/0/chk-4/per_user-0/state",
				"clicks/units/0/0/shared/i/a.sst", "clicks/units/0/0/shared/i/c.sst", "clicks/units/0/0/shared/i/d.sst"}
			if got := localFiles(t, stageB); !slices.Equal(got, wantLocal) {
				t.Errorf("b's staging holds %q, want %q", got, wantLocal)
			}
			if b, err := os.ReadFile(filepath.Join(dir, "per_user-0", "state")); err != nil || string(b) != "state 4" {
				t.Errorf("restored state %q (%v), want %q", b, err, "state 4")
			}
			if got := b.NextCheckpointID(); got != 10 {
				t.Errorf("b's first id %d, want 10", got)
			}

			// a is a zombie now: its next checkpoint fails at the HEAD, and
			// its retention deletes nothing.
			before, err := store.List(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			writeLocal(t, local, 5, "i/a.sst", "i/e.sst")
			if err := a.Checkpoint(ctx, 5, checkpoint.UnitCommit{}); !errors.Is(err, checkpoint.ErrHeadExists) {
				t.Fatalf("zombie checkpoint: %v, want ErrHeadExists", err)
			}
			if err := a.Retain(ctx, 5); err != nil {
				t.Fatal(err)
			}
			after, err := store.List(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range before {
				if !slices.Contains(after, k) {
					t.Errorf("the zombie deleted %s", k)
				}
			}
			if slices.Contains(after, "clicks/units/0/0/HEAD-7") {
				t.Errorf("the zombie wrote a HEAD: %q", after)
			}
		})
	}
}
