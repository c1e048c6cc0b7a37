package s3store_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kstreamd/kstreamd/checkpoint"
)

// failUpload is a Store whose Upload or Create of one key fails without
// writing (a checkpoint whose _metadata upload failed after its shared
// files; a _metadata carrying inline files is a Create).
type failUpload struct {
	checkpoint.Store
	key string
}

func (s failUpload) Create(ctx context.Context, key string, data []byte) error {
	if key == s.key {
		return errors.New("connection reset by peer")
	}
	return s.Store.Create(ctx, key, data)
}

func (s failUpload) Upload(ctx context.Context, key, path string) error {
	if key == s.key {
		return errors.New("connection reset by peer")
	}
	return s.Store.Upload(ctx, key, path)
}

// TestOwnerMarker, on the filesystem store and on S3: the owner marker
// chk-<n>/_claim of docs/scale-out.md. a writes checkpoint 1; b claims
// the unit and writes chk-2; a, a zombie that does not know yet, then
// checkpoints with the same id 2 and one file b's chk-2 does not have: it
// adds nothing to b's chk-2 (not even that file), writes no HEAD and is
// fenced. c claims next; b, now the zombie, marks chk-3 first and its
// upload into its own chk-3 (with a shared file no HEAD will ever name)
// fails at the HEAD; c's checkpoint 3 then fails on b's marker, writing
// nothing, and c moves on to id 4. A HEAD naming
// chk-3 as c's is refused: the marker is b's. c's checkpoint 5 fails
// after uploading its shared file; c's retention then deletes b's orphan
// chk-3 and shared file but keeps c's in-flight one, which c's checkpoint
// 6 names without uploading it again. d restores chk-6: exactly c's files.
// Every checkpoint here has a private file too large to go inline
// (big/blob), so each writes the owner marker (TestMetadataOwnerMarker
// has the checkpoints whose _metadata is the marker).
func TestOwnerMarker(t *testing.T) {
	for _, kind := range []string{"filesystem", "s3"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			var store checkpoint.Store = checkpoint.FileStore{Root: t.TempDir()}
			if kind == "s3" {
				store = newS3(t, true, "p/")
			}
			const p = "clicks/units/0/0/"
			owner := func(member string, st checkpoint.Store) (*checkpoint.Owner, checkpoint.Head, *checkpoint.Storage) {
				t.Helper()
				local := checkpoint.NewStorage(filepath.Join(t.TempDir(), "clicks", "units", "0"), "0", 2, nil)
				o, head, err := checkpoint.Claim(ctx, checkpoint.Namespace{Store: st, Prefix: checkpoint.UnitPrefix("clicks", 0, 0), Local: local}, member, "fp", 1, 2)
				if err != nil {
					t.Fatal(err)
				}
				return o, head, local
			}
			list := func(prefix string) []string {
				t.Helper()
				keys, err := store.List(ctx, p+prefix)
				if err != nil {
					t.Fatal(err)
				}
				for i := range keys {
					keys[i] = strings.TrimPrefix(keys[i], p)
				}
				return keys
			}
			read := func(key string) string {
				t.Helper()
				b, err := store.Read(ctx, p+key)
				if err != nil {
					t.Fatal(err)
				}
				return string(b)
			}
			a, _, localA := owner("a", store)
			writeBig(t, localA, 1, "a/1.sst")
			if err := a.Checkpoint(ctx, 1, checkpoint.UnitCommit{}); err != nil {
				t.Fatal(err)
			}
			if got, err := store.Read(ctx, p+"chk-1/_claim"); err != nil || string(got) != `{"claim":1,"owner":"a"}` {
				t.Errorf("chk-1/_claim holds %s (%v), want a's claim HEAD-1", got, err)
			}

			// b claims (HEAD-3) and writes chk-2 first.
			b, _, localB := owner("b", store)
			if id, err := b.Reserve(ctx, b.NextCheckpointID()); err != nil || id != 2 {
				t.Fatalf("b reserves %d (%v), want 2", id, err)
			}
			writeBig(t, localB, 2, "b/2.sst")
			if err := b.Checkpoint(ctx, 2, checkpoint.UnitCommit{}); err != nil {
				t.Fatal(err)
			}
			// The small state file is in the _metadata (inline_files).
			chk2 := []string{"chk-2/_claim", "chk-2/_metadata", "chk-2/big/blob"}
			if got := list("chk-2/"); !slices.Equal(got, chk2) {
				t.Errorf("b's chk-2 holds %q, want %q", got, chk2)
			}
			// a, the zombie, checkpoints with the same id and an extra file.
			writeBig(t, localA, 2, "a/2.sst")
			if err := os.MkdirAll(filepath.Join(localA.CheckpointDir(2), "extra"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(localA.CheckpointDir(2), "extra", "state"), []byte("zombie"), 0o644); err != nil {
				t.Fatal(err)
			}
			err := a.Checkpoint(ctx, 2, checkpoint.UnitCommit{})
			if want := "checkpoint: unit clicks/units/0/0/: chk-2 is marked by claim HEAD-3 (member b) and HEAD-4 is above this owner's HEAD-2: " + checkpoint.ErrHeadExists.Error(); !errors.Is(err, checkpoint.ErrHeadExists) || err.Error() != want {
				t.Errorf("zombie checkpoint on b's id:\n%v\nwant\n%s", err, want)
			}
			if a.Seq() != 0 {
				t.Errorf("the zombie holds HEAD-%d, want fenced (0)", a.Seq())
			}
			if got := list("chk-2/"); !slices.Equal(got, chk2) {
				t.Errorf("after the zombie b's chk-2 holds %q, want %q", got, chk2)
			}
			if got := inline(read("chk-2/_metadata"), "per_user-0/state"); got != "state 2" {
				t.Errorf("b's state reads %q", got)
			}
			if got := list("shared/"); !slices.Equal(got, []string{"shared/a/1.sst", "shared/b/2.sst"}) {
				t.Errorf("shared files %q, want a's 1 and b's 2 (none of the zombie's)", got)
			}
			if got := list("HEAD-"); !slices.Equal(got, []string{"HEAD-1", "HEAD-2", "HEAD-3", "HEAD-4"}) {
				t.Errorf("HEADs %q", got)
			}

			// c claims (HEAD-5); b, now the zombie, marks chk-3 first.
			c, head, localC := owner("c", failUpload{store, p + "chk-5/_metadata"})
			if want := (checkpoint.Head{Seq: 4, CheckpointID: 2, Owner: "b", Fingerprint: "fp", Units: 1, CheckpointClaim: 3}); noToken(head) != want {
				t.Errorf("c restores %+v, want %+v", head, want)
			}
			if id, err := b.Reserve(ctx, 3); err != nil || id != 3 {
				t.Fatalf("zombie b reserves %d (%v), want 3 (nobody marked it yet)", id, err)
			}
			writeBig(t, localB, 3, "b/3.sst")
			if err := b.Checkpoint(ctx, 3, checkpoint.UnitCommit{}); !errors.Is(err, checkpoint.ErrHeadExists) {
				t.Fatalf("zombie b's checkpoint 3: %v, want ErrHeadExists", err)
			}
			// c's checkpoint 3 meets the zombie's marker before it writes
			// anything (no shared c/3.sst either) and fails without
			// fencing c; c's next id is above it.
			if id, err := c.Reserve(ctx, c.NextCheckpointID()); err != nil || id != 3 {
				t.Fatalf("c reserves %d (%v), want 3 (it has not met the zombie's chk-3 yet)", id, err)
			}
			writeBig(t, localC, 3, "c/3.sst")
			err = c.Checkpoint(ctx, 3, checkpoint.UnitCommit{})
			if want := "checkpoint: unit clicks/units/0/0/: chk-3 is marked by claim HEAD-3 (member b), not this owner's claim HEAD-5: " + checkpoint.ErrForeignClaim.Error(); !errors.Is(err, checkpoint.ErrForeignClaim) || err.Error() != want {
				t.Errorf("c's checkpoint on the zombie's id:\n%v\nwant\n%s", err, want)
			}
			if id, err := c.Reserve(ctx, 3); err != nil || id != 4 {
				t.Fatalf("c reserves %d (%v) after its failed checkpoint 3, want 4", id, err)
			}
			// A HEAD naming the zombie's chk-3 as c's is refused.
			forged := checkpoint.Head{Seq: 9, CheckpointID: 3, Owner: "c", Fingerprint: "fp", Units: 1, CheckpointClaim: 5}
			_, _, err = c.Restore(ctx, forged)
			if want := "checkpoint: restore 3 of unit clicks/units/0/0/: HEAD-9 names chk-3 written under claim HEAD-5 by c, but its owner marker names claim HEAD-3 by b: refusing to restore another writer's files: " + checkpoint.ErrInconsistent.Error(); !errors.Is(err, checkpoint.ErrInconsistent) || err.Error() != want {
				t.Errorf("restore of a chk another claim marked:\n%v\nwant\n%s", err, want)
			}
			if _, err := os.Stat(localC.CheckpointDir(3)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the refused restore left %s (%v)", localC.CheckpointDir(3), err)
			}
			writeBig(t, localC, 4, "c/4.sst")
			if err := c.Checkpoint(ctx, 4, checkpoint.UnitCommit{}); err != nil {
				t.Fatal(err)
			}
			// c's checkpoint 5 fails after its shared upload: in flight.
			if id, err := c.Reserve(ctx, 5); err != nil || id != 5 {
				t.Fatalf("c reserves %d (%v), want 5", id, err)
			}
			writeBig(t, localC, 5, "c/4.sst", "c/5.sst")
			if err := c.Checkpoint(ctx, 5, checkpoint.UnitCommit{}); err == nil || errors.Is(err, checkpoint.ErrHeadExists) {
				t.Fatalf("c's checkpoint 5 with its _metadata upload failing: %v", err)
			}
			want := []string{"shared/a/1.sst", "shared/b/2.sst", "shared/b/3.sst", "shared/c/4.sst", "shared/c/5.sst"}
			if got := list("shared/"); !slices.Equal(got, want) {
				t.Errorf("shared files before c's retention %q, want %q", got, want)
			}
			// The retention of HEAD-6 (chk-4, whose commits finished late).
			if err := c.Retain(ctx, c.Seq()); err != nil {
				t.Fatal(err)
			}
			want = []string{"HEAD-4", "HEAD-5", "HEAD-6",
				"chk-2/_claim", "chk-2/_metadata", "chk-2/big/blob",
				"chk-4/_claim", "chk-4/_metadata", "chk-4/big/blob",
				"chk-5/_claim", "chk-5/big/blob",
				"shared/b/2.sst", "shared/c/4.sst", "shared/c/5.sst"}
			if got := list(""); !slices.Equal(got, want) {
				t.Errorf("after c's retention the unit holds\n%q\nwant\n%q", got, want)
			}
			if id, err := c.Reserve(ctx, 6); err != nil || id != 6 {
				t.Fatalf("c reserves %d (%v), want 6", id, err)
			}
			writeBig(t, localC, 6, "c/4.sst", "c/5.sst")
			if err := os.Remove(filepath.Join(localC.SharedDir(), "c", "5.sst")); err != nil {
				t.Fatal(err) // uploaded already: the next checkpoint does not read it again
			}
			if err := c.Checkpoint(ctx, 6, checkpoint.UnitCommit{}); err != nil {
				t.Fatal(err)
			}

			// d takes over and restores exactly c's chk-6.
			d, head, localD := owner("d", store)
			if want := (checkpoint.Head{Seq: 7, CheckpointID: 6, Owner: "c", Fingerprint: "fp", Units: 1, CheckpointClaim: 5}); noToken(head) != want {
				t.Fatalf("d restores %+v, want %+v", head, want)
			}
			if _, m, err := d.Restore(ctx, head); err != nil || m.CheckpointID != 6 {
				t.Fatalf("d's restore: %v", err)
			}
			wantLocal := []string{"clicks/units/0/0/chk-6/_metadata", "clicks/units/0/0/chk-6/big/blob", "clicks/units/0/0/chk-6/per_user-0/state",
				"clicks/units/0/0/shared/c/4.sst", "clicks/units/0/0/shared/c/5.sst"}
			root := filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(localD.JobDir()))))
			if got := localFiles(t, root); !slices.Equal(got, wantLocal) {
				t.Errorf("d's staging holds %q, want %q", got, wantLocal)
			}
		})
	}
}

// TestRestoreWithoutMarker, on the filesystem store and on S3: a unit
// written before owner markers (no chk-<n>/_claim, HEADs without
// checkpoint_claim) restores as before: the new owner downloads exactly
// that checkpoint and its shared file, and its own first checkpoint is
// marked with its claim (by its _metadata: its files are all inline) and
// recorded in its HEAD.
func TestRestoreWithoutMarker(t *testing.T) {
	for _, kind := range []string{"filesystem", "s3"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			var store checkpoint.Store = checkpoint.FileStore{Root: t.TempDir()}
			if kind == "s3" {
				store = newS3(t, true, "")
			}
			const p = "clicks/units/0/0/"
			old := map[string]string{
				p + "HEAD-1": `{"seq":1,"checkpoint_id":0,"owner":"a","claim":true,"fingerprint":"fp","units":1}`,
				p + "HEAD-2": `{"seq":2,"checkpoint_id":1,"owner":"a","fingerprint":"fp","units":1}`,
				p + "chk-1/_metadata": `{"version":2,"job":"clicks","checkpoint_id":1,"max_parallelism":16,"operators":{},` +
					`"shared_files":["a/1.sst"],"shared_dir":"../shared"}`,
				p + "chk-1/per_user-0/state": "state 1",
				p + "shared/a/1.sst":         "a/1.sst",
			}
			for k, v := range old {
				if err := store.Create(ctx, k, []byte(v)); err != nil {
					t.Fatal(err)
				}
			}
			stage := t.TempDir()
			local := checkpoint.NewStorage(filepath.Join(stage, "clicks", "units", "0"), "0", 2, nil)
			b, head, err := checkpoint.Claim(ctx, checkpoint.Namespace{Store: store, Prefix: p, Local: local}, "b", "fp", 1, 2)
			if err != nil {
				t.Fatal(err)
			}
			if want := (checkpoint.Head{Seq: 2, CheckpointID: 1, Owner: "a", Fingerprint: "fp", Units: 1}); head != want {
				t.Fatalf("b restores %+v, want %+v", head, want)
			}
			if _, m, err := b.Restore(ctx, head); err != nil || m.CheckpointID != 1 {
				t.Fatalf("restore of an unmarked checkpoint: %v", err)
			}
			want := []string{"clicks/units/0/0/chk-1/_metadata", "clicks/units/0/0/chk-1/per_user-0/state", "clicks/units/0/0/shared/a/1.sst"}
			if got := localFiles(t, stage); !slices.Equal(got, want) {
				t.Errorf("b's staging holds %q, want %q", got, want)
			}
			id, err := b.Reserve(ctx, b.NextCheckpointID())
			if err != nil || id != 2 {
				t.Fatalf("b reserves %d (%v), want 2", id, err)
			}
			writeLocal(t, local, 2, "a/1.sst")
			if err := b.Checkpoint(ctx, 2, checkpoint.UnitCommit{}); err != nil {
				t.Fatal(err)
			}
			// Its files are all inline: the _metadata is its owner marker.
			if got := metaClaim(t, store, p+"chk-2/_metadata"); got != `{"claim":3,"owner":"b"}` {
				t.Errorf("chk-2/_metadata names the claim %s, want b's claim HEAD-3", got)
			}
			if got, err := store.List(ctx, p+"chk-2/"); err != nil || !slices.Equal(got, []string{p + "chk-2/_metadata"}) {
				t.Errorf("chk-2 holds %q (%v), want only its _metadata", got, err)
			}
			h, err := checkpoint.Heads{Store: store, Prefix: p}.Read(ctx, 4)
			if want := (checkpoint.Head{Seq: 4, CheckpointID: 2, Owner: "b", Fingerprint: "fp", Units: 1, MetadataClaim: 3}); err != nil || noToken(h) != want {
				t.Errorf("HEAD-4 %+v (%v), want %+v", h, err, want)
			}
		})
	}
}

// noToken is hd with its random Token cleared, for comparing HEADs with
// expected values.
func noToken(hd checkpoint.Head) checkpoint.Head {
	hd.Token = ""
	return hd
}

// inline returns the inline file rel of the store _metadata meta
// (checkpoint.Metadata.InlineFiles), or "" when it has none such.
func inline(meta, rel string) string {
	var m checkpoint.Metadata
	if err := json.Unmarshal([]byte(meta), &m); err != nil {
		return ""
	}
	return string(m.InlineFiles[rel])
}

// writeBig is writeLocal plus the private file big/blob, too large for
// Owner.upload to put inline into the _metadata: the checkpoint then
// writes its owner marker chk-<id>/_claim.
func writeBig(t *testing.T, local *checkpoint.Storage, id int64, shared ...string) {
	t.Helper()
	writeLocal(t, local, id, shared...)
	dir := filepath.Join(local.CheckpointDir(id), "big")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "blob"), make([]byte, 100<<10), 0o644); err != nil {
		t.Fatal(err)
	}
}

// metaClaim returns the claim (JSON) the store _metadata at key names
// (checkpoint.Metadata.Claim), "" when none.
func metaClaim(t *testing.T, store checkpoint.Store, key string) string {
	t.Helper()
	b, err := store.Read(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	var m checkpoint.Metadata
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Claim == nil {
		return ""
	}
	c, err := json.Marshal(m.Claim)
	if err != nil {
		t.Fatal(err)
	}
	return string(c)
}

// TestMetadataOwnerMarker, on the filesystem store and on S3: a
// checkpoint whose private files all go inline writes no chk-<n>/_claim;
// its _metadata, create-only and naming its claim, is the owner marker
// (HEAD metadata_claim). a writes chk-1: only its _metadata. b claims and
// writes chk-2; the zombie a's checkpoint 2 meets b's _metadata, adds
// nothing to chk-2 and is fenced. c claims; the zombie b has marked chk-3
// and put a private file there (a checkpoint with a large file, cut off
// before its _metadata) when c's inline checkpoint 3 takes the _metadata:
// c's HEAD names chk-3, and d's restore of it downloads c's files only,
// not b's marker or file. A HEAD naming chk-3 as b's is refused.
func TestMetadataOwnerMarker(t *testing.T) {
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
			list := func(prefix string) []string {
				t.Helper()
				keys, err := store.List(ctx, p+prefix)
				if err != nil {
					t.Fatal(err)
				}
				for i := range keys {
					keys[i] = strings.TrimPrefix(keys[i], p)
				}
				return keys
			}
			heads := checkpoint.Heads{Store: store, Prefix: p}
			a, _, localA := owner("a")
			writeLocal(t, localA, 1, "a/1.sst")
			if err := a.Checkpoint(ctx, 1, checkpoint.UnitCommit{}); err != nil {
				t.Fatal(err)
			}
			if got := list("chk-1/"); !slices.Equal(got, []string{"chk-1/_metadata"}) {
				t.Errorf("a's chk-1 holds %q, want only its _metadata", got)
			}
			if got := metaClaim(t, store, p+"chk-1/_metadata"); got != `{"claim":1,"owner":"a"}` {
				t.Errorf("chk-1/_metadata names the claim %s, want a's claim HEAD-1", got)
			}
			if h, err := heads.Read(ctx, 2); err != nil || noToken(h) != (checkpoint.Head{Seq: 2, CheckpointID: 1, Owner: "a", Fingerprint: "fp", Units: 1, MetadataClaim: 1}) {
				t.Errorf("HEAD-2 %+v (%v), want a's naming chk-1 with metadata_claim 1", h, err)
			}

			// b claims (HEAD-3) and writes chk-2 first; the zombie a's
			// checkpoint 2 meets b's _metadata.
			b, head, localB := owner("b")
			if want := (checkpoint.Head{Seq: 2, CheckpointID: 1, Owner: "a", Fingerprint: "fp", Units: 1, MetadataClaim: 1}); noToken(head) != want {
				t.Errorf("b restores %+v, want %+v", head, want)
			}
			writeLocal(t, localB, 2, "b/2.sst")
			if err := b.Checkpoint(ctx, 2, checkpoint.UnitCommit{}); err != nil {
				t.Fatal(err)
			}
			bMeta, err := store.Read(ctx, p+"chk-2/_metadata")
			if err != nil {
				t.Fatal(err)
			}
			writeLocal(t, localA, 2, "a/2.sst")
			err = a.Checkpoint(ctx, 2, checkpoint.UnitCommit{})
			if want := "chk-2 has the _metadata of claim HEAD-3 (member b) and HEAD-4 is above this owner's HEAD-2: " + checkpoint.ErrHeadExists.Error(); !errors.Is(err, checkpoint.ErrHeadExists) || !strings.HasSuffix(err.Error(), want) {
				t.Errorf("zombie checkpoint on b's id:\n%v\nwant it to end in\n%s", err, want)
			}
			if a.Seq() != 0 {
				t.Errorf("the zombie holds HEAD-%d, want fenced (0)", a.Seq())
			}
			if got, err := store.Read(ctx, p+"chk-2/_metadata"); err != nil || string(got) != string(bMeta) || !slices.Equal(list("chk-2/"), []string{"chk-2/_metadata"}) {
				t.Errorf("after the zombie chk-2 holds %q, _metadata %s (%v); want b's _metadata only", list("chk-2/"), got, err)
			}
			if got := list("HEAD-"); !slices.Equal(got, []string{"HEAD-1", "HEAD-2", "HEAD-3", "HEAD-4"}) {
				t.Errorf("HEADs %q", got)
			}

			// c claims (HEAD-5); the zombie b marked chk-3 and uploaded a
			// private file into it, then stopped before its _metadata.
			c, _, localC := owner("c")
			for k, v := range map[string]string{"chk-3/_claim": `{"claim":3,"owner":"b"}`, "chk-3/big/blob": "the zombie's"} {
				if err := store.Create(ctx, p+k, []byte(v)); err != nil {
					t.Fatal(err)
				}
			}
			if id, err := c.Reserve(ctx, c.NextCheckpointID()); err != nil || id != 3 {
				t.Fatalf("c reserves %d (%v), want 3", id, err)
			}
			writeLocal(t, localC, 3, "c/3.sst")
			if err := c.Checkpoint(ctx, 3, checkpoint.UnitCommit{}); err != nil {
				t.Fatalf("c's inline checkpoint 3 beside the zombie's marker: %v", err)
			}
			if got, want := list("chk-3/"), []string{"chk-3/_claim", "chk-3/_metadata", "chk-3/big/blob"}; !slices.Equal(got, want) {
				t.Errorf("chk-3 holds %q, want %q", got, want)
			}
			if h, err := heads.Read(ctx, 6); err != nil || noToken(h) != (checkpoint.Head{Seq: 6, CheckpointID: 3, Owner: "c", Fingerprint: "fp", Units: 1, MetadataClaim: 5}) {
				t.Errorf("HEAD-6 %+v (%v), want c's naming chk-3 with metadata_claim 5", h, err)
			}

			// d restores c's chk-3: c's state and shared file, nothing of b's.
			d, head, localD := owner("d")
			if want := (checkpoint.Head{Seq: 6, CheckpointID: 3, Owner: "c", Fingerprint: "fp", Units: 1, MetadataClaim: 5}); noToken(head) != want {
				t.Fatalf("d restores %+v, want %+v", head, want)
			}
			dir, m, err := d.Restore(ctx, head)
			if err != nil || m.CheckpointID != 3 || m.Claim != nil || m.Version != checkpoint.MetadataVersion {
				t.Fatalf("d's restore: %v (metadata %+v)", err, m)
			}
			if b, err := os.ReadFile(filepath.Join(dir, "per_user-0", "state")); err != nil || string(b) != "state 3" {
				t.Errorf("restored state %q (%v), want c's %q", b, err, "state 3")
			}
			wantLocal := []string{"clicks/units/0/0/chk-3/_metadata", "clicks/units/0/0/chk-3/per_user-0/state", "clicks/units/0/0/shared/c/3.sst"}
			root := filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(localD.JobDir()))))
			if got := localFiles(t, root); !slices.Equal(got, wantLocal) {
				t.Errorf("d's staging holds %q, want %q", got, wantLocal)
			}
			// A HEAD naming chk-3 as the zombie b's is refused.
			forged := checkpoint.Head{Seq: 9, CheckpointID: 3, Owner: "b", Fingerprint: "fp", Units: 1, MetadataClaim: 3}
			_, _, err = d.Restore(ctx, forged)
			if want := `checkpoint: restore 3 of unit clicks/units/0/0/: HEAD-9 names chk-3 written under claim HEAD-3 by b, but its _metadata names claim HEAD-5 by "c": refusing to restore another writer's checkpoint: ` + checkpoint.ErrInconsistent.Error(); !errors.Is(err, checkpoint.ErrInconsistent) || err.Error() != want {
				t.Errorf("restore of chk-3 as b's:\n%v\nwant\n%s", err, want)
			}
		})
	}
}
