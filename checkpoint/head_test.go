package checkpoint

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestZombieCannotCommitOrDelete: owner A holds the unit, B takes it over
// while A is paused; A's next checkpoint (an empty epoch: nothing to
// commit) creates no HEAD, commits nothing and deletes nothing; B's chain
// goes on.
func TestZombieCannotCommitOrDelete(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	ns := Namespace{Store: FileStore{Root: root}, Prefix: UnitPrefix("clicks", 1, 3)}
	heads := ns.Heads()
	dir := filepath.Join(root, "clicks", "units", "1", "3")
	var log []string
	steps := func(who string) UnitCommit {
		return UnitCommit{
			PreCommit: func() error { log = append(log, who+" pre-commit"); return nil },
			Upload:    func() error { log = append(log, who+" upload"); return nil },
			Commit:    func() error { log = append(log, who+" commit"); return nil },
		}
	}
	a, prev, err := Claim(ctx, ns, "a", "fp", 2)
	if err != nil || prev.Seq != 0 {
		t.Fatalf("claim a: %v %+v", err, prev)
	}
	if err := a.Checkpoint(ctx, 1, steps("a")); err != nil {
		t.Fatal(err)
	}
	b, prev, err := Claim(ctx, ns, "b", "fp", 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Head{Seq: 2, CheckpointID: 1, Owner: "a", Fingerprint: "fp"}); prev != want {
		t.Errorf("b restores %+v, want %+v", prev, want)
	}
	before := files(t, dir)
	log = nil
	err = a.Checkpoint(ctx, 2, steps("a"))
	if !errors.Is(err, ErrHeadExists) {
		t.Fatalf("zombie checkpoint: %v, want ErrHeadExists", err)
	}
	if want := []string{"a pre-commit", "a upload"}; !slices.Equal(log, want) {
		t.Errorf("zombie ran %q, want %q (no commit)", log, want)
	}
	if err := a.Retain(ctx, 2); err != nil {
		t.Errorf("a fenced owner's retention: %v, want nil (it deletes nothing)", err)
	}
	if got := files(t, dir); !slices.Equal(got, before) {
		t.Errorf("zombie changed the namespace: %v, want %v", got, before)
	}
	if err := a.Checkpoint(ctx, 3, steps("a")); !errors.Is(err, ErrHeadExists) || a.Seq() != 0 {
		t.Errorf("a fenced owner must stay fenced: %v seq %d", err, a.Seq())
	}
	log = nil
	if err := b.Checkpoint(ctx, 2, steps("b")); err != nil {
		t.Fatal(err)
	}
	if want := []string{"b pre-commit", "b upload", "b commit"}; !slices.Equal(log, want) {
		t.Errorf("owner ran %q, want %q", log, want)
	}
	if err := b.Retain(ctx, b.Seq()); err != nil {
		t.Fatal(err)
	}
	// HEAD-4 names chk-2, HEAD-3 and HEAD-2 chk-1: the 2 retained
	// checkpoints; HEAD-1 (a's claim, no checkpoint) goes.
	if got, want := files(t, dir), []string{"HEAD-2", "HEAD-3", "HEAD-4"}; !slices.Equal(got, want) {
		t.Errorf("after b's checkpoint: %v, want %v (2 retained)", got, want)
	}
	latest, err := heads.Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Head{Seq: 4, CheckpointID: 2, Owner: "b", Fingerprint: "fp"}); latest != want {
		t.Errorf("latest %+v, want %+v", latest, want)
	}
	// A claim with another graph is refused naming both fingerprints.
	if _, _, err := Claim(ctx, ns, "c", "other", 2); err == nil || err.Error() != "checkpoint: unit clicks/units/1/3/: HEAD-4 was written for graph fp, this daemon runs graph other" {
		t.Errorf("claim with another graph: %v", err)
	}
}

// overwriting is a FileStore whose create-only writes overwrite.
type overwriting struct{ FileStore }

func (s overwriting) Create(_ context.Context, key string, data []byte) error {
	name := filepath.Join(s.Root, filepath.FromSlash(key))
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	return os.WriteFile(name, data, 0o644)
}

// TestSelfTest: a filesystem honours create-only writes (a second create
// of a HEAD fails with ErrHeadExists); a store whose create-only write
// overwrites is refused naming it. Neither keeps the probe.
func TestSelfTest(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if err := SelfTest(ctx, FileStore{Root: dir}, "clicks/"); err != nil {
		t.Fatal(err)
	}
	heads := Heads{Store: FileStore{Root: dir}, Prefix: "clicks/units/0/0/"}
	if err := heads.Create(ctx, Head{Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if err := heads.Create(ctx, Head{Seq: 1, Owner: "b"}); !errors.Is(err, ErrHeadExists) {
		t.Errorf("second create of HEAD-1: %v, want ErrHeadExists", err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "clicks", "units")); err != nil {
		t.Fatal(err)
	}
	err := SelfTest(ctx, overwriting{FileStore{Root: dir}}, "clicks/")
	if !errors.Is(err, ErrCreateOnlyIgnored) {
		t.Fatalf("store ignoring create-only: %v, want ErrCreateOnlyIgnored", err)
	}
	if want := "checkpoint: store self-test of filesystem " + dir + ": a second create-only write of clicks/.selftest-"; len(err.Error()) < len(want) || err.Error()[:len(want)] != want {
		t.Errorf("refusal %q does not start with %q", err, want)
	}
	if got := files(t, filepath.Join(dir, "clicks")); len(got) != 0 {
		t.Errorf("self-test left %v", got)
	}
	if _, err := (FileStore{Root: dir}).Read(ctx, "clicks/none"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("read of a missing key: %v, want fs.ErrNotExist", err)
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
