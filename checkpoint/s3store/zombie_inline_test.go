package s3store_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
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
