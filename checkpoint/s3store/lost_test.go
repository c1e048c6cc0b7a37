package s3store_test

import (
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

// TestS3HeadAnswersLost: an S3 server loses the answer of every second
// HEAD PUT after writing it (alternately a 503 and a closed connection);
// the client retries and meets its own HEAD (412, "exists"). The claim
// and 8 checkpoints with retention all succeed, each read back as the
// owner's own (Resolved "own" once per lost answer), and the chain ends at
// HEAD-9 naming chk-8: no lost answer reads as a takeover.
func TestS3HeadAnswersLost(t *testing.T) {
	ctx := context.Background()
	loss := &testkit.AnswerLoss{Every: 2, Match: func(r *http.Request) bool { return strings.Contains(r.URL.Path, "/"+checkpoint.HeadPrefix) }}
	addr := testkit.S3ServerWith(t, "kstreamd", true, loss.Wrap)
	store, err := s3store.New(s3store.Config{Endpoint: addr, Bucket: "kstreamd", Region: "us-east-1",
		PathStyle: true, AccessKey: testkit.S3AccessKey, SecretKey: testkit.S3SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	own := 0
	local := checkpoint.NewStorage(filepath.Join(t.TempDir(), "clicks", "units", "0"), "0", 2, nil)
	ns := checkpoint.Namespace{Store: store, Prefix: checkpoint.UnitPrefix("clicks", 0, 0), Local: local, Resolved: func(o string) {
		if o != checkpoint.HeadOwn {
			t.Errorf("a lost answer resolved as %q, want %q", o, checkpoint.HeadOwn)
		}
		own++
	}}
	a, _, err := checkpoint.Claim(ctx, ns, "a", "fp", 1, 2)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	for id := int64(1); id <= 8; id++ {
		writeLocal(t, local, id)
		if err := a.Checkpoint(ctx, id, checkpoint.UnitCommit{}); err != nil {
			t.Fatalf("checkpoint %d: %v", id, err)
		}
		if err := a.Retain(ctx, a.Seq()); err != nil {
			t.Fatalf("retention after checkpoint %d: %v", id, err)
		}
	}
	if a.Seq() != 9 {
		t.Errorf("owner at HEAD-%d, want HEAD-9", a.Seq())
	}
	if loss.Lost() < 4 || int64(own) != loss.Lost() {
		t.Errorf("%d answers lost, %d read back as the owner's own; want >= 4 and equal", loss.Lost(), own)
	}
	hd, err := checkpoint.Heads{Store: store, Prefix: ns.Prefix}.Latest(ctx)
	if err != nil || hd.Seq != 9 || hd.CheckpointID != 8 || hd.Owner != "a" || hd.Claim {
		t.Errorf("newest HEAD %+v (%v), want HEAD-9 of a naming chk-8", hd, err)
	}
}

// TestS3MetadataAnswersLost: an S3 server loses the answer of every
// second _metadata PUT (retries counted) after writing it; the client retries and meets its
// own object (412, "exists"). Every checkpoint here is all inline, so its
// _metadata is its owner marker (metadata_claim): the upload reads it
// back, finds its own claim and goes on. 6 checkpoints with retention
// all succeed, the chain ends at HEAD-7 naming chk-6 with
// metadata_claim 1, and a takeover restores chk-6.
func TestS3MetadataAnswersLost(t *testing.T) {
	ctx := context.Background()
	loss := &testkit.AnswerLoss{Every: 2, Match: func(r *http.Request) bool { return strings.HasSuffix(r.URL.Path, "/"+checkpoint.MetadataFile) }}
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
	for id := int64(1); id <= 6; id++ {
		writeLocal(t, local, id)
		if err := a.Checkpoint(ctx, id, checkpoint.UnitCommit{}); err != nil {
			t.Fatalf("checkpoint %d: %v", id, err)
		}
		if err := a.Retain(ctx, a.Seq()); err != nil {
			t.Fatalf("retention after checkpoint %d: %v", id, err)
		}
	}
	if loss.Lost() < 3 {
		t.Errorf("%d answers lost, want at least 3", loss.Lost())
	}
	hd, err := checkpoint.Heads{Store: store, Prefix: prefix}.Latest(ctx)
	if err != nil || noToken(hd) != (checkpoint.Head{Seq: 7, CheckpointID: 6, Owner: "a", Fingerprint: "fp", Units: 1, MetadataClaim: 1}) {
		t.Fatalf("newest HEAD %+v (%v), want HEAD-7 of a naming chk-6 with metadata_claim 1", hd, err)
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
}
