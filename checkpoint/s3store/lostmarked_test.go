package s3store_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/checkpoint/s3store"
	"github.com/kstreamd/kstreamd/internal/testkit"
)

// TestS3MarkedCheckpointAnswersLost: an S3 server loses the answer of
// every second PUT into a chk-<n> (owner marker, private file, _metadata;
// retries counted) after writing it; the client retries and meets its own
// object (412, "exists"). Every checkpoint has a private file too large to
// go inline, so it writes its owner marker: under its own marker every
// object of chk-<n> is the owner's, so an "exists" is its own lost
// answer. 6 checkpoints with retention all succeed, the chain ends at
// HEAD-7 naming chk-6, and a takeover restores chk-6 with its file.
func TestS3MarkedCheckpointAnswersLost(t *testing.T) {
	ctx := context.Background()
	loss := &testkit.AnswerLoss{Every: 2, Match: func(r *http.Request) bool { return strings.Contains(r.URL.Path, "/chk-") }}
	addr := testkit.S3ServerWith(t, "kstreamd", true, loss.Wrap)
	store, err := s3store.New(s3store.Config{Endpoint: addr, Bucket: "kstreamd", Region: "us-east-1",
		PathStyle: true, AccessKey: testkit.S3AccessKey, SecretKey: testkit.S3SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	prefix := checkpoint.UnitPrefix("clicks", 0, 0)
	local := checkpoint.NewStorage(filepath.Join(t.TempDir(), "clicks", "units", "0"), "0", 2, nil)
	a, _, err := checkpoint.Claim(ctx, checkpoint.Namespace{Store: store, Prefix: prefix, Local: local}, "a", "fp", 1, 2)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	blob := func(id int64) []byte { return bytes.Repeat([]byte{byte('a' + id)}, 100<<10) }
	for id := int64(1); id <= 6; id++ {
		writeLocal(t, local, id)
		dir := filepath.Join(local.CheckpointDir(id), "big")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "blob"), blob(id), 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := a.Reserve(ctx, id); err != nil || got != id {
			t.Fatalf("reserve %d: %d, %v", id, got, err)
		}
		if err := a.Checkpoint(ctx, id, checkpoint.UnitCommit{}); err != nil {
			t.Fatalf("checkpoint %d: %v", id, err)
		}
		if err := a.Retain(ctx, a.Seq()); err != nil {
			t.Fatalf("retention after checkpoint %d: %v", id, err)
		}
	}
	if loss.Lost() < 6 {
		t.Errorf("%d answers lost, want at least 6", loss.Lost())
	}
	hd, err := checkpoint.Heads{Store: store, Prefix: prefix}.Latest(ctx)
	if err != nil || hd.Seq != 7 || hd.CheckpointID != 6 || hd.Owner != "a" || hd.CheckpointClaim != 1 {
		t.Fatalf("newest HEAD %+v (%v), want HEAD-7 of a naming chk-6 with checkpoint_claim 1", hd, err)
	}
	local2 := checkpoint.NewStorage(filepath.Join(t.TempDir(), "clicks", "units", "0"), "0", 2, nil)
	b, head, err := checkpoint.Claim(ctx, checkpoint.Namespace{Store: store, Prefix: prefix, Local: local2}, "b", "fp", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	dir, m, err := b.Restore(ctx, head)
	if err != nil || m.CheckpointID != 6 {
		t.Fatalf("b's restore of %+v: %v (%+v)", head, err, m)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "per_user-0", "state")); err != nil || string(got) != "state 6" {
		t.Errorf("restored state %q (%v), want %q", got, err, "state 6")
	}
	if got, err := os.ReadFile(filepath.Join(dir, "big", "blob")); err != nil || !bytes.Equal(got, blob(6)) {
		t.Errorf("restored big/blob %d bytes (%v), want chk-6's", len(got), err)
	}
}
