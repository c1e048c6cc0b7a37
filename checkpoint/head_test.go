package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// TestZombieCannotCommitOrDelete: owner A holds the unit, B takes it over
// while A is paused; A's next checkpoint (an empty epoch: nothing to
// commit) creates no HEAD, commits nothing and deletes nothing; B's chain
// goes on.
func TestZombieCannotCommitOrDelete(t *testing.T) {
	heads := Heads{Dir: filepath.Join(t.TempDir(), "clicks", "units", "1", "3")}
	var log []string
	steps := func(who string) UnitCommit {
		return UnitCommit{
			PreCommit: func() error { log = append(log, who+" pre-commit"); return nil },
			Upload:    func() error { log = append(log, who+" upload"); return nil },
			Commit:    func() error { log = append(log, who+" commit"); return nil },
			Purge:     func(k int64) error { log = append(log, who+" purge"); return nil },
		}
	}
	a, prev, err := Claim(heads, "a", "fp", 4, 2)
	if err != nil || prev.Seq != 0 {
		t.Fatalf("claim a: %v %+v", err, prev)
	}
	if err := a.Checkpoint(1, steps("a")); err != nil {
		t.Fatal(err)
	}
	b, prev, err := Claim(heads, "b", "fp", 4, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Head{Seq: 2, CheckpointID: 1, Owner: "a", Fingerprint: "fp", Units: 4}); prev != want {
		t.Errorf("b restores %+v, want %+v", prev, want)
	}
	before := files(t, heads.Dir)
	log = nil
	err = a.Checkpoint(2, steps("a"))
	if !errors.Is(err, ErrHeadExists) {
		t.Fatalf("zombie checkpoint: %v, want ErrHeadExists", err)
	}
	if want := []string{"a pre-commit", "a upload"}; !slices.Equal(log, want) {
		t.Errorf("zombie ran %q, want %q (no commit, no purge)", log, want)
	}
	if got := files(t, heads.Dir); !slices.Equal(got, before) {
		t.Errorf("zombie changed the namespace: %v, want %v", got, before)
	}
	if err := a.Checkpoint(3, steps("a")); !errors.Is(err, ErrHeadExists) || a.Seq() != 0 {
		t.Errorf("a fenced owner must stay fenced: %v seq %d", err, a.Seq())
	}
	log = nil
	if err := b.Checkpoint(2, steps("b")); err != nil {
		t.Fatal(err)
	}
	if want := []string{"b pre-commit", "b upload", "b commit", "b purge"}; !slices.Equal(log, want) {
		t.Errorf("owner ran %q, want %q", log, want)
	}
	if got, want := files(t, heads.Dir), []string{"HEAD-3", "HEAD-4"}; !slices.Equal(got, want) {
		t.Errorf("after b's checkpoint: %v, want %v (2 retained)", got, want)
	}
	latest, err := heads.Latest()
	if err != nil {
		t.Fatal(err)
	}
	if want := (Head{Seq: 4, CheckpointID: 2, Owner: "b", Fingerprint: "fp", Units: 4}); latest != want {
		t.Errorf("latest %+v, want %+v", latest, want)
	}
	// A claim with another graph is refused naming both fingerprints.
	if _, _, err := Claim(heads, "c", "other", 4, 2); err == nil || err.Error() != "checkpoint: unit "+heads.Dir+": HEAD-4 was written for graph fp, this daemon runs graph other" {
		t.Errorf("claim with another graph: %v", err)
	}
	// A claim with another unit count is refused naming both counts.
	if _, _, err := Claim(heads, "c", "fp", 6, 2); err == nil || err.Error() != "checkpoint: unit "+heads.Dir+": HEAD-4 was written with 4 units per stage, this daemon runs 6" {
		t.Errorf("claim with another unit count: %v", err)
	}
}

// TestSelfTest: a filesystem honours O_EXCL; a store whose create-only
// write overwrites is refused.
func TestSelfTest(t *testing.T) {
	dir := t.TempDir()
	if err := SelfTest(dir); err != nil {
		t.Fatal(err)
	}
	overwrite := func(name string) error { return os.WriteFile(name, nil, 0o644) }
	if err := selfTest(dir, overwrite); !errors.Is(err, ErrCreateOnlyIgnored) {
		t.Errorf("store ignoring create-only: %v, want ErrCreateOnlyIgnored", err)
	}
	if got := files(t, dir); len(got) != 0 {
		t.Errorf("self-test left %v", got)
	}
}

func files(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestClaimAfterPreviousOwnersHead: the previous owner is still running
// while the new owner claims, and its next two checkpoint HEADs take the
// number the claim read; the claim reads the chain again and lands after
// them, restoring the newest checkpoint. A claim beaten by another
// member's claim is refused with ErrHeadExists.
func TestClaimAfterPreviousOwnersHead(t *testing.T) {
	heads := Heads{Dir: filepath.Join(t.TempDir(), "clicks", "units", "0", "0")}
	a, _, err := Claim(heads, "a", "fp", 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Checkpoint(1, UnitCommit{}); err != nil {
		t.Fatal(err)
	}
	next := int64(2)
	b, prev, err := claim(heads, "b", "fp", 1, 3, func(Head) {
		if next <= 3 {
			if err := a.Checkpoint(next, UnitCommit{}); err != nil {
				t.Fatal(err)
			}
			next++
		}
	})
	if err != nil {
		t.Fatalf("claim racing the previous owner's checkpoints: %v", err)
	}
	if want := (Head{Seq: 4, CheckpointID: 3, Owner: "a", Fingerprint: "fp", Units: 1}); prev != want {
		t.Errorf("b restores %+v, want %+v", prev, want)
	}
	if b.Seq() != 5 {
		t.Errorf("b's claim is HEAD-%d, want HEAD-5", b.Seq())
	}
	if err := a.Checkpoint(4, UnitCommit{}); !errors.Is(err, ErrHeadExists) {
		t.Errorf("previous owner after the claim: %v, want ErrHeadExists", err)
	}

	// c's claim is beaten by d's claim: c stops.
	_, _, err = claim(heads, "c", "fp", 1, 3, func(Head) {
		if _, _, err := Claim(heads, "d", "fp", 1, 3); err != nil {
			t.Fatal(err)
		}
	})
	if !errors.Is(err, ErrHeadExists) || err.Error() != "checkpoint: unit "+heads.Dir+": member d claimed HEAD-6 first: "+ErrHeadExists.Error() {
		t.Errorf("claim beaten by another claim: %v", err)
	}
}

// TestUnitCheckpointDirCreateOnly: a unit's coordinator whose next
// checkpoint id already has a directory in the namespace (written by the
// unit's other owner: a zombie and a new owner count the same ids) writes
// nothing into it: that checkpoint fails, the other owner's file is
// untouched and no metadata lands there, and the next checkpoint completes
// under the next id (its retention then deletes the stale directory, as
// the unit's owner).
func TestUnitCheckpointDirCreateOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		root := t.TempDir()
		s := NewStorage(filepath.Join(root, "clicks", "units", "1"), "0", 3, nil)
		o, _, err := Claim(Heads{Dir: s.JobDir()}, "a", "fp", 2, 3)
		if err != nil {
			t.Fatal(err)
		}
		theirs := filepath.Join(s.CheckpointDir(1), "state")
		if err := os.MkdirAll(filepath.Dir(theirs), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(theirs, []byte("the other owner's"), 0o644); err != nil {
			t.Fatal(err)
		}
		j := newFakeJob(1, nil)
		c := j.coordinator(t, CoordinatorConfig{Job: "clicks", MaxParallelism: 24, Storage: s, Owner: o, FirstID: 1, Interval: 100 * time.Millisecond, TolerableFailures: 1})
		r := runCoordinator(c)
		defer r.stop()
		time.Sleep(150 * time.Millisecond) // checkpoint 1 at 100 ms
		synctest.Wait()
		if id, _ := c.LastCompleted(); id != 0 {
			t.Errorf("LastCompleted = %d, want 0 (checkpoint 1 fails on the existing directory)", id)
		}
		if b, err := os.ReadFile(theirs); err != nil || string(b) != "the other owner's" {
			t.Errorf("the other owner's file: %q, %v", b, err)
		}
		if got := files(t, s.CheckpointDir(1)); !slices.Equal(got, []string{"state"}) {
			t.Errorf("chk-1 holds %v, want only the other owner's [state]", got)
		}
		time.Sleep(100 * time.Millisecond) // checkpoint 2 at 200 ms
		synctest.Wait()
		if id, _ := c.LastCompleted(); id != 2 {
			t.Errorf("LastCompleted = %d, want 2", id)
		}
		if h, err := (Heads{Dir: s.JobDir()}).Latest(); err != nil || h.CheckpointID != 2 || h.Owner != "a" {
			t.Errorf("newest HEAD %+v (%v), want a's naming checkpoint 2", h, err)
		}
	})
}
