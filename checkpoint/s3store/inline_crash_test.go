package s3store_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kstreamd/kstreamd/checkpoint"
)

// failNth is a store whose nth write (Create or Upload, counted from 1)
// fails as a crash between two writes would leave the store: every write
// before it done, it and every later one not.
type failNth struct {
	checkpoint.Store
	n, writes *atomic.Int64
}

func (s failNth) fail(key string) error {
	if s.writes.Add(1) >= s.n.Load() {
		return fmt.Errorf("crash before the write of %s", key)
	}
	return nil
}

func (s failNth) Create(ctx context.Context, key string, data []byte) error {
	if err := s.fail(key); err != nil {
		return err
	}
	return s.Store.Create(ctx, key, data)
}

func (s failNth) Upload(ctx context.Context, key, path string) error {
	if err := s.fail(key); err != nil {
		return err
	}
	return s.Store.Upload(ctx, key, path)
}

// stageMixed writes checkpoint id into local: files (relative path ->
// bytes), the shared files named (content: their name) and a version 3
// _metadata naming the shared files.
func stageMixed(t *testing.T, local *checkpoint.Storage, id int64, files map[string][]byte, shared ...string) {
	t.Helper()
	dir := local.CheckpointDir(id)
	for rel, b := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
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

// treeOf returns the files under dir but _metadata (slash path -> bytes).
func treeOf(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == checkpoint.MetadataFile {
			return nil
		}
		b, err := os.ReadFile(p)
		out[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameTree(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

// TestInlineCheckpointCrashAtEachWrite, on the filesystem store and on S3:
// a writes checkpoint 1 of a stage-1 unit whose private files straddle the
// inline limits (a MANIFEST of 64 KiB + 1 byte and a file past the 256 KiB
// total stay objects; a 64 KiB OPTIONS, three more 64 KiB files and the
// empty markers go into the _metadata), then crashes at the nth write of
// checkpoint 2 for every n until checkpoint 2 completes. Each time b takes
// the unit over: it restores chk-1 byte for byte (the inline files and the
// objects), checkpoints 3, and its retention leaves exactly chk-1, chk-3
// and the shared files they name: nothing of the crashed chk-2 (neither
// its objects nor its new shared file), and none of chk-1's files.
func TestInlineCheckpointCrashAtEachWrite(t *testing.T) {
	const kib = 1 << 10
	fill := func(n int, c byte) []byte { return bytes.Repeat([]byte{c}, n) }
	chk1 := map[string][]byte{
		"out/0/MANIFEST-000001":                        fill(64*kib+1, 'm'), // just above the per-file limit: an object
		"out/0/OPTIONS-000003":                         fill(64*kib, 'o'),   // just at it: inline
		"out/0/marker.format-version.000001.024":       {},
		"out/0/marker.manifest.000001.MANIFEST-000001": {},
		"src/0/p1": fill(64*kib, '1'),
		"src/0/p2": fill(64*kib, '2'),
		"src/0/p3": fill(64*kib-1, '3'), // 256 KiB - 1 byte inline so far
		"src/0/p4": fill(2, '4'),        // past 256 KiB in all: an object
		"src/0/p5": fill(1, '5'),        // still fits: inline
	}
	chk2 := map[string][]byte{
		"out/0/MANIFEST-000002":                        fill(64*kib+1, 'n'),
		"out/0/OPTIONS-000003":                         fill(64*kib, 'o'),
		"out/0/marker.manifest.000002.MANIFEST-000002": {},
	}
	chk3 := map[string][]byte{"out/0/MANIFEST-000003": fill(100, 'x')}
	for _, kind := range []string{"filesystem", "s3"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			completed := false
			for n := int64(1); !completed; n++ {
				if n > 20 {
					t.Fatal("checkpoint 2 never completed")
				}
				var store checkpoint.Store = checkpoint.FileStore{Root: t.TempDir()}
				if kind == "s3" {
					store = newS3(t, true, "p/")
				}
				const p = "clicks/units/1/0/"
				owner := func(member string, st checkpoint.Store) (*checkpoint.Owner, checkpoint.Head, *checkpoint.Storage) {
					t.Helper()
					local := checkpoint.NewStorage(filepath.Join(t.TempDir(), "clicks", "units", "1"), "0", 2, nil)
					o, hd, err := checkpoint.Claim(ctx, checkpoint.Namespace{Store: st, Prefix: checkpoint.UnitPrefix("clicks", 1, 0), Local: local}, member, "fp", 1, 2)
					if err != nil {
						t.Fatal(err)
					}
					return o, hd, local
				}
				writes, limit := &atomic.Int64{}, &atomic.Int64{}
				limit.Store(1 << 30)
				a, _, localA := owner("a", failNth{Store: store, n: limit, writes: writes})
				stageMixed(t, localA, 1, chk1, "a/1.sst")
				if err := a.Checkpoint(ctx, 1, checkpoint.UnitCommit{}); err != nil {
					t.Fatal(err)
				}
				keys, err := store.List(ctx, p+"chk-1/")
				if err != nil {
					t.Fatal(err)
				}
				if want := []string{p + "chk-1/_claim", p + "chk-1/_metadata", p + "chk-1/out/0/MANIFEST-000001", p + "chk-1/src/0/p4"}; !slices.Equal(keys, want) {
					t.Fatalf("chk-1 holds %q, want %q", keys, want)
				}
				// The crash: the nth write of checkpoint 2 (its owner marker
				// the first) fails, and so does every later one.
				stageMixed(t, localA, 2, chk2, "a/1.sst", "a/2.sst")
				writes.Store(0)
				limit.Store(n)
				err = a.Checkpoint(ctx, 2, checkpoint.UnitCommit{})
				if errors.Is(err, checkpoint.ErrHeadExists) {
					t.Fatalf("n=%d: checkpoint 2: %v", n, err)
				}
				completed = err == nil
				b, hd, localB := owner("b", store)
				wantID, wantTree := int64(1), chk1
				if completed {
					wantID, wantTree = 2, chk2
				}
				if hd.CheckpointID != wantID {
					t.Fatalf("n=%d: b restores chk-%d, want chk-%d", n, hd.CheckpointID, wantID)
				}
				dir, m, err := b.Restore(ctx, hd)
				if err != nil {
					t.Fatalf("n=%d: restore: %v", n, err)
				}
				if got := treeOf(t, dir); !sameTree(got, wantTree) {
					t.Errorf("n=%d: restored chk-%d holds %d files, want the %d staged with their bytes", n, wantID, len(got), len(wantTree))
				}
				if m.Version != checkpoint.MetadataVersion || m.InlineFiles != nil || m.CheckpointID != wantID {
					t.Errorf("n=%d: restored metadata version %d, %d inline files, chk %d; want 3, none, %d", n, m.Version, len(m.InlineFiles), m.CheckpointID, wantID)
				}
				if completed {
					// Five writes: the owner marker, the MANIFEST object,
					// a/2.sst, the _metadata with OPTIONS and the marker
					// inline, the HEAD.
					if n != 6 {
						t.Errorf("checkpoint 2 completed with the write %d failing, want 6 (five writes)", n)
					}
					return
				}
				// b's id: 2 when the crash came before a's owner marker of
				// chk-2, else 3 (chk-2 is a's).
				id, err := b.Reserve(ctx, b.NextCheckpointID())
				if wantB := 2 + min(n-1, 1); err != nil || id != wantB {
					t.Fatalf("n=%d: b reserves %d (%v), want %d", n, id, err, wantB)
				}
				stageMixed(t, localB, id, chk3, "a/1.sst", "b/3.sst")
				if err := b.Checkpoint(ctx, id, checkpoint.UnitCommit{}); err != nil {
					t.Fatalf("n=%d: b's checkpoint 3: %v", n, err)
				}
				if err := b.Retain(ctx, b.Seq()); err != nil {
					t.Fatalf("n=%d: retention: %v", n, err)
				}
				all, err := store.List(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				chkB := fmt.Sprintf("chk-%d/", id)
				var got []string
				for _, k := range all {
					if k = strings.TrimPrefix(k, p); !strings.HasPrefix(k, "HEAD-") {
						got = append(got, k)
					}
				}
				want := []string{"chk-1/_claim", "chk-1/_metadata", "chk-1/out/0/MANIFEST-000001", "chk-1/src/0/p4",
					chkB + "_metadata", "shared/a/1.sst", "shared/b/3.sst"} // b's files are all inline: its _metadata is its owner marker
				if !slices.Equal(got, want) {
					t.Errorf("n=%d: after b's retention the unit holds\n%q\nwant\n%q", n, got, want)
				}
				// A third owner restores b's checkpoint and, by the retained
				// HEAD naming it, chk-1 too: both whole.
				c, hd, _ := owner("c", store)
				if hd.CheckpointID != id {
					t.Fatalf("n=%d: c restores chk-%d, want %d", n, hd.CheckpointID, id)
				}
				dir, _, err = c.Restore(ctx, hd)
				if err != nil || !sameTree(treeOf(t, dir), chk3) {
					t.Errorf("n=%d: c's restore of b's chk-%d: %v", n, id, err)
				}
				var old checkpoint.Head
				for seq := hd.Seq; seq >= 1; seq-- {
					h, err := checkpoint.Heads{Store: store, Prefix: p}.Read(ctx, seq)
					if err == nil && h.CheckpointID == 1 {
						old = h
						break
					}
				}
				if old.CheckpointID != 1 {
					t.Fatalf("n=%d: no retained HEAD names chk-1", n)
				}
				dir, _, err = c.Restore(ctx, old)
				if err != nil || !sameTree(treeOf(t, dir), chk1) {
					t.Errorf("n=%d: c's restore of the retained chk-1: %v", n, err)
				}
			}
		})
	}
}
