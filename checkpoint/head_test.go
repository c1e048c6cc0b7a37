package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/runtime"
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
	a, prev, err := Claim(ctx, ns, "a", "fp", 4, 2)
	if err != nil || prev.Seq != 0 {
		t.Fatalf("claim a: %v %+v", err, prev)
	}
	if err := a.Checkpoint(ctx, 1, steps("a")); err != nil {
		t.Fatal(err)
	}
	b, prev, err := Claim(ctx, ns, "b", "fp", 4, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Head{Seq: 2, CheckpointID: 1, Owner: "a", Fingerprint: "fp", Units: 4}); withoutToken(prev) != want {
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
	if want := (Head{Seq: 4, CheckpointID: 2, Owner: "b", Fingerprint: "fp", Units: 4}); withoutToken(latest) != want {
		t.Errorf("latest %+v, want %+v", latest, want)
	}
	// A claim with another graph is refused naming both fingerprints.
	if _, _, err := Claim(ctx, ns, "c", "other", 4, 2); err == nil || err.Error() != "checkpoint: unit clicks/units/1/3/: HEAD-4 was written for graph fp, this daemon runs graph other" {
		t.Errorf("claim with another graph: %v", err)
	}
	// A claim with another unit count is refused naming both counts.
	if _, _, err := Claim(ctx, ns, "c", "fp", 6, 2); err == nil || err.Error() != "checkpoint: unit clicks/units/1/3/: HEAD-4 was written with 4 units per stage, this daemon runs 6" {
		t.Errorf("claim with another unit count: %v", err)
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

// TestClaimAfterPreviousOwnersHead: the previous owner is still running
// while the new owner claims, and its next two checkpoint HEADs (each
// uploaded first) take the number the claim read; the claim reads the
// chain again and lands after them, restoring the newest checkpoint, and
// its first checkpoint id is above the checkpoints uploaded meanwhile. A
// claim beaten by another member's claim is refused with ErrHeadExists.
func TestClaimAfterPreviousOwnersHead(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	store := FileStore{Root: filepath.Join(root, "store")}
	staging := func(who string) Namespace {
		return Namespace{Store: store, Prefix: UnitPrefix("clicks", 0, 0),
			Local: NewStorage(filepath.Join(root, who, "clicks", "units", "0"), "0", 3, nil)}
	}
	nsA := staging("a")
	// stage writes a checkpoint of a into its staging storage.
	stage := func(id int64) {
		dir := nsA.Local.CheckpointDir(id)
		if err := os.MkdirAll(filepath.Join(dir, "op"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "op", "state"), []byte("a"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := writeMetadata(dir, &Metadata{Version: MetadataVersion, Job: "clicks", CheckpointID: id, Operators: map[string]OperatorMetadata{}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	a, _, err := Claim(ctx, nsA, "a", "fp", 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	stage(1)
	if err := a.Checkpoint(ctx, 1, UnitCommit{}); err != nil {
		t.Fatal(err)
	}
	next := int64(2)
	b, prev, err := claim(ctx, staging("b"), "b", "fp", 1, 3, func(Head) {
		if next <= 3 {
			stage(next)
			if err := a.Checkpoint(ctx, next, UnitCommit{}); err != nil {
				t.Fatal(err)
			}
			next++
		}
	})
	if err != nil {
		t.Fatalf("claim racing the previous owner's checkpoints: %v", err)
	}
	if want := (Head{Seq: 4, CheckpointID: 3, Owner: "a", Fingerprint: "fp", Units: 1, MetadataClaim: 1}); withoutToken(prev) != want {
		t.Errorf("b restores %+v, want %+v", prev, want)
	}
	if b.Seq() != 5 {
		t.Errorf("b's claim is HEAD-%d, want HEAD-5", b.Seq())
	}
	if got := b.NextCheckpointID(); got != 4 {
		t.Errorf("b's first checkpoint id %d, want 4 (above a's chk-3)", got)
	}
	stage(4)
	if err := a.Checkpoint(ctx, 4, UnitCommit{}); !errors.Is(err, ErrHeadExists) {
		t.Errorf("previous owner after the claim: %v, want ErrHeadExists", err)
	}

	// c's claim is beaten by d's claim: c stops.
	ns := Namespace{Store: store, Prefix: UnitPrefix("clicks", 0, 0)}
	_, _, err = claim(ctx, ns, "c", "fp", 1, 3, func(Head) {
		if _, _, err := Claim(ctx, ns, "d", "fp", 1, 3); err != nil {
			t.Fatal(err)
		}
	})
	if !errors.Is(err, ErrHeadExists) || err.Error() != "checkpoint: unit clicks/units/0/0/: member d claimed HEAD-6 first: "+ErrHeadExists.Error() {
		t.Errorf("claim beaten by another claim: %v", err)
	}
}

// TestUnitCheckpointDirCreateOnly: a unit's coordinator whose next
// checkpoint id already has objects in the unit's store (uploaded by the
// unit's other owner after the claim listed the namespace: a zombie and a
// new owner may count the same ids) overwrites none of them: the upload's
// create-only write of the same key fails that checkpoint, the other
// owner's object is untouched and no metadata of this owner lands in
// chk-1, and the next checkpoint completes under the next id; the owner's
// retention then deletes the stale chk-1 as a whole.
func TestUnitCheckpointDirCreateOnly(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	store := FileStore{Root: filepath.Join(root, "store")}
	local := NewStorage(filepath.Join(root, "staging", "clicks", "units", "1"), "0", 3, nil)
	ns := Namespace{Store: store, Prefix: UnitPrefix("clicks", 1, 0), Local: local}
	o, _, err := Claim(ctx, ns, "a", "fp", 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	if got := o.NextCheckpointID(); got != 1 {
		t.Fatalf("first id %d, want 1 (an empty namespace)", got)
	}
	// The other owner's commit of chk-1 (written without an owner marker,
	// as before markers): the tasks' small files go into the _metadata,
	// so its create is the one that meets it.
	const theirs = "clicks/units/1/0/chk-1/" + MetadataFile
	if err := store.Create(ctx, theirs, []byte("the other owner's")); err != nil {
		t.Fatal(err)
	}
	j := newFakeJob(1, func(b *runtime.Barrier, _ runtime.TaskID) answer {
		if b.CheckpointID > 2 {
			return silent // nothing completes after checkpoint 2
		}
		return ack
	})
	c := j.coordinator(t, CoordinatorConfig{Job: "clicks", MaxParallelism: 24, Storage: local, Owner: o, FirstID: o.NextCheckpointID(),
		Interval: 5 * time.Millisecond, Timeout: time.Hour, TolerableFailures: 1})
	r := runCoordinator(c)
	defer r.stop()
	if !testkit.Poll(time.Minute, func() bool { id, _ := c.LastCompleted(); return id >= 2 }) {
		t.Fatal("checkpoint 2 never completed")
	}
	if id, _ := c.LastCompleted(); id != 2 {
		t.Errorf("LastCompleted = %d, want 2 (checkpoint 1 fails on the other owner's object)", id)
	}
	if h, err := ns.Heads().Latest(ctx); err != nil || h.CheckpointID != 2 || h.Owner != "a" || h.Units != 2 {
		t.Errorf("newest HEAD %+v (%v), want a's naming checkpoint 2 with 2 units", h, err)
	}
	// Every file of a's checkpoints is inline: chk-2's _metadata is its
	// owner marker (no _claim), and chk-3, triggered and never completed,
	// has nothing in the store.
	want := []string{"clicks/units/1/0/HEAD-1", "clicks/units/1/0/HEAD-2",
		"clicks/units/1/0/chk-2/_metadata"}
	var got []string
	if !testkit.Poll(time.Minute, func() bool {
		if got, err = store.List(ctx, ""); err != nil {
			t.Fatal(err)
		}
		return slices.Equal(got, want)
	}) {
		t.Errorf("after checkpoint 2's retention the store holds\n%q\nwant\n%q", got, want)
	}
}

// committingTask is a fakeTask whose completion notices finish only when
// the test releases them (a sink still committing its transactions).
type committingTask struct {
	*fakeTask
	mu    sync.Mutex
	dones []func()
}

func (c *committingTask) NotifyCheckpointCompleteThen(id int64, done func()) {
	c.NotifyCheckpointComplete(id)
	c.mu.Lock()
	c.dones = append(c.dones, done)
	c.mu.Unlock()
}

func (c *committingTask) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.dones)
}

func (c *committingTask) release() int {
	c.mu.Lock()
	d := c.dones
	c.dones = nil
	c.mu.Unlock()
	for _, f := range d {
		f()
	}
	return len(d)
}

// TestUnitRetentionAfterCommits: a unit's coordinator uploads each
// checkpoint and creates its HEAD, but applies retention in the store
// only once every task's commit of the checkpoint finished: while the
// sink's commits of checkpoints 1..3 are pending the store holds every
// HEAD and checkpoint; once they finish it holds exactly the newest (1
// retained) and the HEAD naming it. CommitsDone (a unit's purge) waits the
// same way: not called while the commits are pending, then once for each
// of checkpoints 1..3.
func TestUnitRetentionAfterCommits(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	store := FileStore{Root: filepath.Join(root, "store")}
	local := NewStorage(filepath.Join(root, "staging", "clicks", "units", "0"), "0", 1, nil)
	ns := Namespace{Store: store, Prefix: UnitPrefix("clicks", 0, 0), Local: local}
	o, _, err := Claim(ctx, ns, "a", "fp", 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	j := newFakeJob(1, func(b *runtime.Barrier, _ runtime.TaskID) answer {
		if b.CheckpointID > 3 {
			return silent // nothing completes after checkpoint 3
		}
		return ack
	})
	sink := &committingTask{fakeTask: j.tasks[1]}
	var doneMu sync.Mutex
	var commitsDone []int64
	done := func() []int64 {
		doneMu.Lock()
		defer doneMu.Unlock()
		return slices.Clone(commitsDone)
	}
	c, err := NewCoordinator(CoordinatorConfig{Job: "clicks", MaxParallelism: 8, Storage: local, Owner: o,
		Interval: 5 * time.Millisecond, Timeout: time.Hour, FirstID: o.NextCheckpointID(),
		CommitsDone: func(id int64, m *Metadata) {
			doneMu.Lock()
			commitsDone = append(commitsDone, id)
			doneMu.Unlock()
		}},
		[]runtime.SourceTask{j.tasks[0]}, []runtime.CheckpointTarget{j.tasks[0], sink})
	if err != nil {
		t.Fatal(err)
	}
	j.c = c
	c.SourceCaughtUp(j.tasks[0].id)
	r := runCoordinator(c)
	defer r.stop()
	if !testkit.Poll(time.Minute, func() bool { return sink.pending() == 3 }) {
		t.Fatalf("the sink got %d completion notices, want 3", sink.pending())
	}
	list := func() []string {
		keys, err := store.List(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		return keys
	}
	chk := func(id int) []string {
		// The tasks' small state files are in the _metadata (InlineFiles),
		// which is then the checkpoint's owner marker too (no _claim).
		return []string{fmt.Sprintf("clicks/units/0/0/chk-%d/_metadata", id)}
	}
	// Checkpoint 4 is triggered and never completes: nothing of it is in
	// the store (its owner marker would be its _metadata). Nothing is
	// deleted meanwhile.
	var all []string
	all = append(append(append(all, "clicks/units/0/0/HEAD-1", "clicks/units/0/0/HEAD-2", "clicks/units/0/0/HEAD-3", "clicks/units/0/0/HEAD-4"), chk(1)...), chk(2)...)
	all = append(all, chk(3)...)
	slices.Sort(all)
	var pendingList []string
	if !testkit.Poll(time.Minute, func() bool { pendingList = list(); return slices.Equal(pendingList, all) }) {
		t.Errorf("with the commits pending the store holds\n%q\nwant\n%q", pendingList, all)
	}
	if d := done(); len(d) != 0 {
		t.Errorf("with the commits pending CommitsDone saw %v, want none", d)
	}
	if n := sink.release(); n != 3 {
		t.Errorf("%d completion notices, want 3", n)
	}
	want := append([]string{"clicks/units/0/0/HEAD-4"}, chk(3)...)
	var got []string
	if !testkit.Poll(time.Minute, func() bool { got = list(); return slices.Equal(got, want) }) {
		t.Errorf("after the commits the store holds\n%q\nwant\n%q", got, want)
	}
	if !testkit.Poll(time.Minute, func() bool { return slices.Equal(done(), []int64{1, 2, 3}) }) {
		t.Errorf("after the commits CommitsDone saw %v, want [1 2 3]", done())
	}
}

// lostAnswer is a FileStore whose Create of HEAD-<seq> writes the object
// and then fails, as a PUT whose answer never arrived.
type lostAnswer struct {
	FileStore
	seq string
}

func (s lostAnswer) Create(ctx context.Context, key string, data []byte) error {
	if err := s.FileStore.Create(ctx, key, data); err != nil {
		return err
	}
	if filepath.Base(key) == HeadPrefix+s.seq {
		return errors.New("connection reset by peer")
	}
	return nil
}

// TestHeadCreateAnswerLost: a HEAD create whose answer is lost after the
// store wrote it counts as created (read back), so the owner's next
// checkpoint goes on; a create that really failed does not advance the
// owner.
func TestHeadCreateAnswerLost(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	ns := Namespace{Store: lostAnswer{FileStore{Root: root}, "2"}, Prefix: UnitPrefix("clicks", 0, 0)}
	o, _, err := Claim(ctx, ns, "a", "fp", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Checkpoint(ctx, 1, UnitCommit{}); err != nil || o.Seq() != 2 {
		t.Fatalf("checkpoint with the answer lost: %v, seq %d; want nil, 2", err, o.Seq())
	}
	if err := o.Checkpoint(ctx, 2, UnitCommit{}); err != nil || o.Seq() != 3 {
		t.Fatalf("next checkpoint: %v, seq %d; want nil, 3", err, o.Seq())
	}
	// A create that fails without writing leaves the owner where it was.
	broken := Namespace{Store: failing{FileStore{Root: root}}, Prefix: ns.Prefix}
	o2, _, err := Claim(ctx, Namespace{Store: FileStore{Root: root}, Prefix: ns.Prefix}, "b", "fp", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	o2.ns = broken
	if err := o2.Checkpoint(ctx, 3, UnitCommit{}); err == nil || errors.Is(err, ErrHeadExists) || o2.Seq() != 4 {
		t.Errorf("failed create: %v, seq %d; want an error other than ErrHeadExists, seq 4", err, o2.Seq())
	}
}

// failing is a FileStore whose creates fail without writing.
type failing struct{ FileStore }

func (failing) Create(context.Context, string, []byte) error { return errors.New("store unreachable") }

// TestUnitCoordinatorOwnerMarker: a unit whose files are all inline
// writes no chk-<id>/_claim; its _metadata, create-only and naming its
// claim, is the owner marker. The zombie a, whose checkpoint 1 meets the
// _metadata the new owner b wrote into chk-1 first, stops there: its Run
// returns ErrHeadExists and the store holds nothing of a's beyond its
// claim. The owner c, whose first id 2 a zombie's _metadata took, fails
// checkpoint 2 without counting it (it tolerates no failure), triggers 3
// next and completes it, naming its claim as the HEAD's MetadataClaim.
func TestUnitCoordinatorOwnerMarker(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	store := FileStore{Root: filepath.Join(root, "store")}
	ns := func(who string) Namespace {
		return Namespace{Store: store, Prefix: UnitPrefix("clicks", 0, 0),
			Local: NewStorage(filepath.Join(root, who, "clicks", "units", "0"), "0", 3, nil)}
	}
	nsA := ns("a")
	a, _, err := Claim(ctx, nsA, "a", "fp", 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := Claim(ctx, ns("b"), "b", "fp", 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := b.Reserve(ctx, b.NextCheckpointID()); err != nil || id != 1 {
		t.Fatalf("b reserves %d (%v), want 1", id, err)
	}
	// b's _metadata of chk-1 (what b's upload writes: its claim HEAD-2).
	bMeta := func(id int64) []byte {
		m, err := json.Marshal(Metadata{Version: InlineMetadataVersion, Job: "clicks", CheckpointID: id, Claim: &ClaimMarker{Claim: 2, Owner: "b"}})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if err := store.Create(ctx, "clicks/units/0/0/chk-1/_metadata", bMeta(1)); err != nil {
		t.Fatal(err)
	}
	j := newFakeJob(1, func(*runtime.Barrier, runtime.TaskID) answer { return ack })
	ca := j.coordinator(t, CoordinatorConfig{Job: "clicks", MaxParallelism: 8, Storage: nsA.Local, Owner: a, FirstID: a.NextCheckpointID(),
		Interval: 5 * time.Millisecond, Timeout: time.Hour})
	r := runCoordinator(ca)
	<-r.done
	if want := "chk-1 has the _metadata of claim HEAD-2 (member b) and HEAD-2 is above this owner's HEAD-1: " + ErrHeadExists.Error(); !errors.Is(r.err, ErrHeadExists) || !strings.HasSuffix(r.err.Error(), want) {
		t.Errorf("zombie coordinator returned\n%v\nwant it to end in\n%s", r.err, want)
	}
	list := func() []string {
		keys, err := store.List(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		return keys
	}
	if got, want := list(), []string{"clicks/units/0/0/HEAD-1", "clicks/units/0/0/HEAD-2", "clicks/units/0/0/chk-1/_metadata"}; !slices.Equal(got, want) {
		t.Errorf("after the zombie the store holds %q, want %q", got, want)
	}
	if got, err := store.Read(ctx, "clicks/units/0/0/chk-1/_metadata"); err != nil || string(got) != string(bMeta(1)) {
		t.Errorf("chk-1/_metadata %s (%v), want b's", got, err)
	}

	// c claims; b, now a zombie, writes the _metadata of chk-2 (c's first
	// id) first.
	nsC := ns("c")
	c, _, err := Claim(ctx, nsC, "c", "fp", 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.NextCheckpointID(); got != 2 {
		t.Fatalf("c's first id %d, want 2", got)
	}
	if err := store.Create(ctx, "clicks/units/0/0/chk-2/_metadata", bMeta(2)); err != nil {
		t.Fatal(err)
	}
	j2 := newFakeJob(1, func(bar *runtime.Barrier, _ runtime.TaskID) answer {
		if bar.CheckpointID > 3 {
			return silent
		}
		return ack
	})
	cc := j2.coordinator(t, CoordinatorConfig{Job: "clicks", MaxParallelism: 8, Storage: nsC.Local, Owner: c, FirstID: c.NextCheckpointID(),
		Interval: 5 * time.Millisecond, Timeout: time.Hour})
	r2 := runCoordinator(cc)
	defer r2.stop()
	if !testkit.Poll(time.Minute, func() bool { id, _ := cc.LastCompleted(); return id >= 3 }) {
		t.Fatal("c's checkpoint 3 never completed")
	}
	if got := j2.triggeredIDs(); len(got) < 2 || got[0] != 2 || got[1] != 3 {
		t.Errorf("c triggered %v, want 2 (failing on the zombie's _metadata) then 3", got)
	}
	if h, err := nsC.Heads().Latest(ctx); err != nil || withoutToken(h) != (Head{Seq: 4, CheckpointID: 3, Owner: "c", Fingerprint: "fp", Units: 1, MetadataClaim: 3}) {
		t.Errorf("newest HEAD %+v (%v), want c's naming chk-3 under its claim HEAD-3", h, err)
	}
	// c's retention deletes the zombie's chk-2, which no HEAD names.
	want := []string{"clicks/units/0/0/HEAD-1", "clicks/units/0/0/HEAD-2", "clicks/units/0/0/HEAD-3", "clicks/units/0/0/HEAD-4", "clicks/units/0/0/chk-3/_metadata"}
	var got []string
	if !testkit.Poll(time.Minute, func() bool { got = list(); return slices.Equal(got, want) }) {
		t.Errorf("after c's checkpoint 3 the store holds %q, want %q", got, want)
	}
}

// retiring is a FileStore whose reads of one HEAD key act as the owner's
// retention racing a reader: before the first read of that key it creates
// the next HEAD and deletes the key, as an owner that commits a newer
// checkpoint between the reader's list and its read does.
type retiring struct {
	FileStore
	heads Heads
	next  Head
	key   string
	done  bool
}

func (s *retiring) Read(ctx context.Context, key string) ([]byte, error) {
	if key == s.key && !s.done {
		s.done = true
		if err := s.heads.Create(ctx, s.next); err != nil {
			return nil, err
		}
		if err := s.FileStore.Delete(ctx, key); err != nil {
			return nil, err
		}
	}
	return s.FileStore.Read(ctx, key)
}

// TestLatestHeadRetiredWhileRead: Latest lists HEAD-2 as the newest, which
// retention deletes before the read (HEAD-3 was created meanwhile); Latest
// lists again and returns HEAD-3 instead of failing with "no such file".
func TestLatestHeadRetiredWhileRead(t *testing.T) {
	ctx := context.Background()
	fsStore := FileStore{Root: t.TempDir()}
	prefix := UnitPrefix("clicks", 0, 7)
	plain := Heads{Store: fsStore, Prefix: prefix}
	for seq := int64(1); seq <= 2; seq++ {
		if err := plain.Create(ctx, Head{Seq: seq, CheckpointID: seq, Owner: "a"}); err != nil {
			t.Fatal(err)
		}
	}
	store := &retiring{FileStore: fsStore, heads: plain, next: Head{Seq: 3, CheckpointID: 3, Owner: "b"}, key: prefix + HeadPrefix + "2"}
	hd, err := Heads{Store: store, Prefix: prefix}.Latest(ctx)
	if err != nil {
		t.Fatalf("Latest: %v", err)
	}
	if hd.Seq != 3 || hd.CheckpointID != 3 || hd.Owner != "b" {
		t.Fatalf("Latest = %+v, want HEAD-3 of owner b", hd)
	}
	if !store.done {
		t.Fatal("the store never retired HEAD-2: the test did not race")
	}
}
