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
