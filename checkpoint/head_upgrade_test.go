package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestClaimUpgrade: a HEAD written for another graph fingerprint is
// refused by Claim and by ClaimUpgrade when restores refuses it (wrapped
// with the unit and the HEAD, nothing written); ClaimUpgrade claims it
// when restores accepts it, its claim recording the new graph; restores
// is not asked about a HEAD of the claimer's own graph.
func TestClaimUpgrade(t *testing.T) {
	ctx := context.Background()
	ns := Namespace{Store: FileStore{Root: t.TempDir()}, Prefix: UnitPrefix("clicks", 1, 0)}
	if _, _, err := Claim(ctx, ns, "a", "old", 2, 3); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Claim(ctx, ns, "b", "new", 2, 3); err == nil || err.Error() != "checkpoint: unit clicks/units/1/0/: HEAD-1 was written for graph old, this daemon runs graph new" {
		t.Errorf("Claim of another graph's HEAD: %v", err)
	}
	refused := errors.New("operator \"count\": type changed")
	var asked []string
	_, _, err := ClaimUpgrade(ctx, ns, "b", "new", 2, 3, func(prev Head) error {
		asked = append(asked, fmt.Sprintf("%s@%d", prev.Fingerprint, prev.Seq))
		return refused
	})
	if !errors.Is(err, refused) || err.Error() != "checkpoint: unit clicks/units/1/0/: HEAD-1: operator \"count\": type changed" {
		t.Errorf("refused upgrade: %v", err)
	}
	if hd, err := ns.Heads().Latest(ctx); err != nil || hd.Seq != 1 {
		t.Errorf("after the refusal the newest HEAD is %+v (%v), want HEAD-1 only", hd, err)
	}
	_, prev, err := ClaimUpgrade(ctx, ns, "b", "new", 2, 3, func(prev Head) error {
		asked = append(asked, fmt.Sprintf("%s@%d", prev.Fingerprint, prev.Seq))
		return nil
	})
	if err != nil || prev.Seq != 1 || prev.Fingerprint != "old" {
		t.Fatalf("accepted upgrade: prev %+v, %v", prev, err)
	}
	hd, err := ns.Heads().Latest(ctx)
	if err != nil || hd.Seq != 2 || !hd.Claim || hd.Fingerprint != "new" || hd.Owner != "b" {
		t.Errorf("the upgrade's claim: %+v (%v), want HEAD-2, a claim by b recording graph new", hd, err)
	}
	if _, _, err := ClaimUpgrade(ctx, ns, "c", "new", 2, 3, func(prev Head) error {
		asked = append(asked, fmt.Sprintf("%s@%d", prev.Fingerprint, prev.Seq))
		return refused
	}); err != nil {
		t.Errorf("a claim of its own graph's HEAD: %v", err)
	}
	if fmt.Sprint(asked) != "[old@1 old@1]" {
		t.Errorf("restores asked about %v, want [old@1 old@1]", asked)
	}
}

// TestClaimAfterFailedUpgrade: an upgrade's claims (HEAD-2, HEAD-3: its
// restore failed at every restart) name the old graph's checkpoint and
// hold no state of the new graph. The old graph claims the unit back
// (restores is not asked: the state is its own) and a third graph's
// restores is asked about the checkpoint's writer, HEAD-1; once the new
// graph wrote a checkpoint, a claim after it counts as the new graph's.
func TestClaimAfterFailedUpgrade(t *testing.T) {
	ctx := context.Background()
	ns := Namespace{Store: FileStore{Root: t.TempDir()}, Prefix: UnitPrefix("clicks", 0, 1)}
	heads := ns.Heads()
	for _, hd := range []Head{
		{Seq: 1, CheckpointID: 3, Owner: "a", Fingerprint: "old", Units: 2},
		{Seq: 2, CheckpointID: 3, Owner: "b", Claim: true, Fingerprint: "new", Units: 2},
		{Seq: 3, CheckpointID: 3, Owner: "b", Claim: true, Fingerprint: "new", Units: 2},
	} {
		if err := heads.Create(ctx, hd); err != nil {
			t.Fatal(err)
		}
	}
	var asked []string
	ask := func(prev Head) error {
		asked = append(asked, fmt.Sprintf("%s@%d", prev.Fingerprint, prev.Seq))
		return nil
	}
	if _, _, err := ClaimUpgrade(ctx, ns, "c", "third", 2, 3, ask); err != nil {
		t.Fatalf("a third graph's claim: %v", err)
	}
	if _, prev, err := ClaimUpgrade(ctx, ns, "a", "old", 2, 3, func(prev Head) error {
		return fmt.Errorf("asked about %s@%d", prev.Fingerprint, prev.Seq)
	}); err != nil || prev.Seq != 4 || prev.CheckpointID != 3 {
		t.Fatalf("the old graph claiming its checkpoint back: prev %+v, %v", prev, err)
	}
	if fmt.Sprint(asked) != "[old@1]" {
		t.Errorf("restores asked about %v, want [old@1] (the checkpoint's writer)", asked)
	}
	hd, err := heads.Latest(ctx)
	if err != nil || hd.Seq != 5 || hd.Fingerprint != "old" || hd.CheckpointID != 3 {
		t.Errorf("the old graph's claim: %+v (%v), want HEAD-5 recording graph old, checkpoint 3", hd, err)
	}
	for _, hd := range []Head{
		{Seq: 6, CheckpointID: 4, Owner: "b", Fingerprint: "new", Units: 2},
		{Seq: 7, CheckpointID: 4, Owner: "c", Claim: true, Fingerprint: "third", Units: 2},
	} {
		if err := heads.Create(ctx, hd); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := Claim(ctx, ns, "a", "old", 2, 3); err == nil || err.Error() != "checkpoint: unit clicks/units/0/1/: HEAD-6 was written for graph new, this daemon runs graph old" {
		t.Errorf("a claim after the new graph's checkpoint: %v, want refused naming HEAD-6", err)
	}
}
