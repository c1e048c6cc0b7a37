package s3store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kstreamd/kstreamd/checkpoint"
)

// TestMarkedCheckpointAfterZombieInlineCheckpoint, on the filesystem store
// and on S3: a writes checkpoint 1 (all inline) and b claims the unit. a,
// now a zombie, checkpoints 2 with every file inline and is fenced at its
// HEAD. b's checkpoint 2 has a private file too large to go inline (its
// owner marker path) and meets whatever a left in chk-2: the coordinator
// counts no failure for it (it either succeeds elsewhere or fails with
// ErrForeignClaim, which Coordinator.abort does not count), and b's next
// checkpoint lands at an id above chk-2 with HEAD-4. c restores it:
// exactly b's files. Until the fix, b's checkpoint 2 failed with a plain
// "exists" on its _metadata (the zombie's, naming the zombie's claim), a
// failure counted against tolerable_failures (with the default 0, fatal)
// where the zombie had done nothing wrong that the protocol had not
// promised to absorb.
func TestMarkedCheckpointAfterZombieInlineCheckpoint(t *testing.T) {
	for _, kind := range []string{"filesystem", "s3"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			var store checkpoint.Store = checkpoint.FileStore{Root: t.TempDir()}
			if kind == "s3" {
				store = newS3(t, true, "p/")
			}
			const p = "clicks/units/0/0/"
			owner := func(member string) (*checkpoint.Owner, checkpoint.Head, *checkpoint.Storage) {
				t.Helper()
				local := checkpoint.NewStorage(filepath.Join(t.TempDir(), "clicks", "units", "0"), "0", 2, nil)
				o, head, err := checkpoint.Claim(ctx, checkpoint.Namespace{Store: store, Prefix: p, Local: local}, member, "fp", 1, 2)
				if err != nil {
					t.Fatal(err)
				}
				return o, head, local
			}
			blob := bytes.Repeat([]byte("b's blob "), 20<<10) // 180 KiB: never inline
			big := func(local *checkpoint.Storage, id int64) {
				t.Helper()
				writeLocal(t, local, id)
				dir := filepath.Join(local.CheckpointDir(id), "big")
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, "blob"), blob, 0o644); err != nil {
					t.Fatal(err)
				}
			}

			a, _, localA := owner("a")
			writeLocal(t, localA, 1)
			if err := a.Checkpoint(ctx, 1, checkpoint.UnitCommit{}); err != nil {
				t.Fatal(err)
			}
			b, _, localB := owner("b") // HEAD-3
			if next := b.NextCheckpointID(); next != 2 {
				t.Fatalf("b's next checkpoint id %d, want 2", next)
			}

			// The zombie a checkpoints 2, all inline, before b does.
			writeLocal(t, localA, 2)
			if id, err := a.Reserve(ctx, 2); err == nil {
				err = a.Checkpoint(ctx, id, checkpoint.UnitCommit{})
				if !errors.Is(err, checkpoint.ErrHeadExists) {
					t.Fatalf("zombie checkpoint %d: %v, want ErrHeadExists", id, err)
				}
			} else if !errors.Is(err, checkpoint.ErrHeadExists) {
				t.Fatalf("zombie reserve: %v, want ErrHeadExists", err)
			}
			if a.Seq() != 0 {
				t.Fatalf("the zombie holds HEAD-%d, want fenced (0)", a.Seq())
			}

			// b checkpoints as its coordinator does: an ErrForeignClaim
			// failure is not counted and the next trigger moves on; any
			// other failure is counted (tolerable_failures 0: fatal).
			next, failures := int64(2), 0
			for b.Seq() == 3 && failures == 0 {
				id, err := b.Reserve(ctx, next)
				if err != nil {
					t.Fatalf("b reserves %d: %v", next, err)
				}
				big(localB, id)
				err = b.Checkpoint(ctx, id, checkpoint.UnitCommit{})
				switch {
				case err == nil:
				case errors.Is(err, checkpoint.ErrForeignClaim):
					if id != 2 {
						t.Errorf("b's checkpoint %d met another claim: %v", id, err)
					}
				default:
					t.Errorf("b's checkpoint %d failed, a counted failure: %v", id, err)
					failures++
				}
				next = id + 1
			}
			if failures != 0 {
				return
			}
			hd, err := checkpoint.Heads{Store: store, Prefix: p}.Latest(ctx)
			if err != nil || hd.Seq != 4 || hd.CheckpointID != 3 || hd.Owner != "b" || hd.Claim {
				t.Fatalf("newest HEAD %+v (%v), want HEAD-4 of b naming chk-3", hd, err)
			}

			c, head, _ := owner("c")
			if head.Seq != 4 || head.CheckpointID != 3 {
				t.Fatalf("c restores %+v, want HEAD-4 naming chk-3", head)
			}
			dir, m, err := c.Restore(ctx, head)
			if err != nil || m.CheckpointID != 3 {
				t.Fatalf("c's restore: %v (metadata %+v)", err, m)
			}
			if got, err := os.ReadFile(filepath.Join(dir, "per_user-0", "state")); err != nil || string(got) != "state 3" {
				t.Errorf("restored state %q (%v), want b's %q", got, err, "state 3")
			}
			if got, err := os.ReadFile(filepath.Join(dir, "big", "blob")); err != nil || !bytes.Equal(got, blob) {
				t.Errorf("restored big/blob: %d bytes (%v), want b's %d", len(got), err, len(blob))
			}
		})
	}
}

// TestMixedMarkerHistory, on the filesystem store and on S3: one unit's
// history mixes checkpoints with an owner marker (a private file too
// large to go inline) and checkpoints whose _metadata is the marker, over
// takeovers and claims of no checkpoint, with 2 retained. After each
// step the namespace holds exactly the expected objects, and every
// restore (of a checkpoint HEAD and of claim HEADs copying
// checkpoint_claim or metadata_claim) holds exactly its writer's files.
func TestMixedMarkerHistory(t *testing.T) {
	for _, kind := range []string{"filesystem", "s3"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			var store checkpoint.Store = checkpoint.FileStore{Root: t.TempDir()}
			if kind == "s3" {
				store = newS3(t, true, "p/")
			}
			const p = "clicks/units/0/0/"
			type member struct {
				o     *checkpoint.Owner
				head  checkpoint.Head
				local *checkpoint.Storage
				root  string
			}
			claim := func(name string) member {
				t.Helper()
				root := t.TempDir()
				local := checkpoint.NewStorage(filepath.Join(root, "clicks", "units", "0"), "0", 2, nil)
				o, head, err := checkpoint.Claim(ctx, checkpoint.Namespace{Store: store, Prefix: p, Local: local}, name, "fp", 1, 2)
				if err != nil {
					t.Fatal(err)
				}
				return member{o, head, local, root}
			}
			list := func() []string {
				t.Helper()
				keys, err := store.List(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				for i := range keys {
					keys[i] = keys[i][len(p):]
				}
				slices.Sort(keys)
				return keys
			}
			blobOf := func(id int64) []byte { return bytes.Repeat([]byte{byte('a' + id)}, 100<<10) }
			checkpointAs := func(m member, id int64, big bool, shared ...string) {
				t.Helper()
				writeLocal(t, m.local, id, shared...)
				if big {
					dir := filepath.Join(m.local.CheckpointDir(id), "big")
					if err := os.MkdirAll(dir, 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(filepath.Join(dir, "blob"), blobOf(id), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				if err := m.o.Checkpoint(ctx, id, checkpoint.UnitCommit{}); err != nil {
					t.Fatalf("checkpoint %d: %v", id, err)
				}
				if err := m.o.Retain(ctx, m.o.Seq()); err != nil {
					t.Fatalf("retention after checkpoint %d: %v", id, err)
				}
			}
			restore := func(m member, want checkpoint.Head, wantFiles ...string) {
				t.Helper()
				if noToken(m.head) != want {
					t.Fatalf("%s restores %+v, want %+v", m.head.Owner, noToken(m.head), want)
				}
				dir, meta, err := m.o.Restore(ctx, m.head)
				if err != nil || meta.CheckpointID != want.CheckpointID || meta.Claim != nil {
					t.Fatalf("restore of %+v: %v (metadata %+v)", want, err, meta)
				}
				id := want.CheckpointID
				if got, err := os.ReadFile(filepath.Join(dir, "per_user-0", "state")); err != nil || string(got) != fmt.Sprintf("state %d", id) {
					t.Errorf("restored state %q (%v), want %q", got, err, fmt.Sprintf("state %d", id))
				}
				if got := localFiles(t, m.root); !slices.Equal(got, wantFiles) {
					t.Errorf("restore of chk-%d holds %q, want %q", id, got, wantFiles)
				}
				if slices.Contains(wantFiles, fmt.Sprintf("clicks/units/0/0/chk-%d/big/blob", id)) {
					if got, err := os.ReadFile(filepath.Join(dir, "big", "blob")); err != nil || !bytes.Equal(got, blobOf(id)) {
						t.Errorf("restored big/blob of chk-%d: %d bytes (%v), want its writer's", id, len(got), err)
					}
				}
			}

			a := claim("a")                      // HEAD-1
			checkpointAs(a, 1, true, "a/1.sst")  // HEAD-2, marked
			checkpointAs(a, 2, false, "a/2.sst") // HEAD-3, _metadata marker
			checkpointAs(a, 3, true, "a/3.sst")  // HEAD-4, marked
			if got, want := list(), []string{"HEAD-3", "HEAD-4",
				"chk-2/_metadata", "chk-3/_claim", "chk-3/_metadata", "chk-3/big/blob",
				"shared/a/2.sst", "shared/a/3.sst"}; !slices.Equal(got, want) {
				t.Errorf("after a's 3 checkpoints the store holds\n%q\nwant\n%q", got, want)
			}

			b := claim("b") // HEAD-5, a claim of a's marked chk-3; b dies at once
			restore(b, checkpoint.Head{Seq: 4, CheckpointID: 3, Owner: "a", Fingerprint: "fp", Units: 1, CheckpointClaim: 1},
				"clicks/units/0/0/chk-3/_metadata", "clicks/units/0/0/chk-3/big/blob", "clicks/units/0/0/chk-3/per_user-0/state",
				"clicks/units/0/0/shared/a/3.sst")
			c := claim("c") // HEAD-6
			restore(c, checkpoint.Head{Seq: 5, CheckpointID: 3, Owner: "b", Fingerprint: "fp", Units: 1, Claim: true, CheckpointClaim: 1},
				"clicks/units/0/0/chk-3/_metadata", "clicks/units/0/0/chk-3/big/blob", "clicks/units/0/0/chk-3/per_user-0/state",
				"clicks/units/0/0/shared/a/3.sst")
			if next := c.o.NextCheckpointID(); next != 4 {
				t.Fatalf("c's next id %d, want 4", next)
			}
			checkpointAs(c, 4, false, "c/4.sst") // HEAD-7, _metadata marker
			if got, want := list(), []string{"HEAD-4", "HEAD-5", "HEAD-6", "HEAD-7",
				"chk-3/_claim", "chk-3/_metadata", "chk-3/big/blob", "chk-4/_metadata",
				"shared/a/3.sst", "shared/c/4.sst"}; !slices.Equal(got, want) {
				t.Errorf("after c's checkpoint 4 the store holds\n%q\nwant\n%q", got, want)
			}

			d := claim("d") // HEAD-8, a claim of c's chk-4; d dies at once
			restore(d, checkpoint.Head{Seq: 7, CheckpointID: 4, Owner: "c", Fingerprint: "fp", Units: 1, MetadataClaim: 6},
				"clicks/units/0/0/chk-4/_metadata", "clicks/units/0/0/chk-4/per_user-0/state", "clicks/units/0/0/shared/c/4.sst")
			// c, a zombie now, writes its inline checkpoint 5; fenced at its HEAD.
			writeLocal(t, c.local, 5)
			if err := c.o.Checkpoint(ctx, 5, checkpoint.UnitCommit{}); !errors.Is(err, checkpoint.ErrHeadExists) {
				t.Fatalf("zombie c's checkpoint 5: %v, want ErrHeadExists", err)
			}
			e := claim("e") // HEAD-9
			restore(e, checkpoint.Head{Seq: 8, CheckpointID: 4, Owner: "d", Fingerprint: "fp", Units: 1, Claim: true, MetadataClaim: 6},
				"clicks/units/0/0/chk-4/_metadata", "clicks/units/0/0/chk-4/per_user-0/state", "clicks/units/0/0/shared/c/4.sst")
			if next := e.o.NextCheckpointID(); next != 6 {
				t.Fatalf("e's next id %d, want 6 (above the zombie's chk-5)", next)
			}
			checkpointAs(e, 6, true, "e/6.sst") // HEAD-10, marked
			checkpointAs(e, 7, false)           // HEAD-11, _metadata marker
			if got, want := list(), []string{"HEAD-10", "HEAD-11",
				"chk-6/_claim", "chk-6/_metadata", "chk-6/big/blob", "chk-7/_metadata",
				"shared/e/6.sst"}; !slices.Equal(got, want) {
				t.Errorf("after e's checkpoints 6 and 7 the store holds\n%q\nwant\n%q", got, want)
			}
			f := claim("f") // HEAD-12
			restore(f, checkpoint.Head{Seq: 11, CheckpointID: 7, Owner: "e", Fingerprint: "fp", Units: 1, MetadataClaim: 9},
				"clicks/units/0/0/chk-7/_metadata", "clicks/units/0/0/chk-7/per_user-0/state")
		})
	}
}
