package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync"
	"testing"
)

// withoutToken is hd with its random Token cleared, for comparing HEADs
// with expected values.
func withoutToken(hd Head) Head {
	hd.Token = ""
	return hd
}

// unsure is a FileStore whose HEAD creates and reads misbehave as a store
// whose answers get lost: lose[name] makes the create of HEAD name write
// the object and then fail with that error (fs.ErrExist: an S3 client's
// retry of a PUT whose answer was lost gets 412); unreadable[name] makes
// that many reads of it fail; before[name] runs before its create (a rival
// writes first).
type unsure struct {
	FileStore
	mu         sync.Mutex
	lose       map[string]error
	unreadable map[string]int
	before     map[string]func()
}

func (s *unsure) Create(ctx context.Context, key string, data []byte) error {
	name := filepath.Base(key)
	s.mu.Lock()
	lose, before := s.lose[name], s.before[name]
	delete(s.lose, name)
	delete(s.before, name)
	s.mu.Unlock()
	if before != nil {
		before()
	}
	if err := s.FileStore.Create(ctx, key, data); err != nil {
		return err
	}
	if lose != nil {
		return fmt.Errorf("create %s: %w", key, lose)
	}
	return nil
}

func (s *unsure) Read(ctx context.Context, key string) ([]byte, error) {
	name := filepath.Base(key)
	s.mu.Lock()
	n := s.unreadable[name]
	if n > 0 {
		s.unreadable[name] = n - 1
	}
	s.mu.Unlock()
	if n > 0 {
		return nil, errors.New("read timed out")
	}
	return s.FileStore.Read(ctx, key)
}

// TestHeadCreateOutcomeUnknown: a HEAD create whose outcome is unknown is
// read back, and only another claim's HEAD fences the owner.
//   - "exists" on a retry of a create that wrote (the S3 client's retry
//     after a lost answer gets 412): the claim and the checkpoint HEAD are
//     the owner's own: created (Resolved "own"), the owner goes on;
//   - a create that wrote while its read-back failed leaves the owner
//     where it was (an error other than ErrHeadExists, Resolved
//     "unknown"); retention finding that HEAD above the owner's deletes
//     nothing and does not fence; the next checkpoint adopts it (it names
//     its checkpoint, Resolved "adopted") and lands on the next number;
//   - another claim's HEAD at the number, met with any error, fences
//     (ErrHeadExists naming the member, Resolved "other"), also when that
//     claim has this owner's member id (a second instance of the daemon):
//     a claim never takes another claim's HEAD for its own.
func TestHeadCreateOutcomeUnknown(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	var outcomes []string
	store := &unsure{FileStore: FileStore{Root: t.TempDir()}, lose: map[string]error{}, unreadable: map[string]int{}, before: map[string]func(){}}
	ns := Namespace{Store: store, Prefix: UnitPrefix("clicks", 0, 0), Resolved: func(o string) {
		mu.Lock()
		outcomes = append(outcomes, o)
		mu.Unlock()
	}}
	took := func(want ...string) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if fmt.Sprint(outcomes) != fmt.Sprint(want) {
			t.Errorf("outcomes %v, want %v", outcomes, want)
		}
		outcomes = nil
	}
	exists := fmt.Errorf("412 Precondition Failed: %w", fs.ErrExist)
	store.lose["HEAD-1"] = exists
	a, _, err := Claim(ctx, ns, "a", "fp", 1, 2)
	if err != nil || a.Seq() != 1 {
		t.Fatalf("claim whose retry met its own HEAD: %v, seq %d; want nil, 1", err, a.Seq())
	}
	took(HeadOwn)
	store.lose["HEAD-2"] = exists
	if err := a.Checkpoint(ctx, 1, UnitCommit{}); err != nil || a.Seq() != 2 {
		t.Fatalf("checkpoint whose retry met its own HEAD: %v, seq %d; want nil, 2", err, a.Seq())
	}
	took(HeadOwn)

	// HEAD-3 is written, but neither the answer nor the read-back arrive.
	store.lose["HEAD-3"], store.unreadable["HEAD-3"] = errors.New("connection reset by peer"), 1
	committed := false
	err = a.Checkpoint(ctx, 2, UnitCommit{Commit: func() error { committed = true; return nil }})
	if err == nil || errors.Is(err, ErrHeadExists) || a.Seq() != 2 || committed {
		t.Fatalf("checkpoint of unknown outcome: %v, seq %d, committed %t; want an error other than ErrHeadExists, seq 2, no commit", err, a.Seq(), committed)
	}
	took(HeadUnknown)
	if err := a.Retain(ctx, 2); err != nil || a.Seq() != 2 {
		t.Fatalf("retention with the owner's own HEAD-3 above: %v, seq %d; want nil, 2", err, a.Seq())
	}
	if err := a.Checkpoint(ctx, 3, UnitCommit{Commit: func() error { committed = true; return nil }}); err != nil || a.Seq() != 4 || !committed {
		t.Fatalf("next checkpoint: %v, seq %d, committed %t; want nil, 4, true", err, a.Seq(), committed)
	}
	took(HeadAdopted)
	var chain []Head
	for k := int64(1); k <= 4; k++ {
		hd, err := ns.Heads().Read(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if hd.Token != a.token || a.token == "" {
			t.Errorf("HEAD-%d has token %q, want the owner's %q", k, hd.Token, a.token)
		}
		chain = append(chain, withoutToken(hd))
	}
	want := []Head{
		{Seq: 1, Owner: "a", Claim: true, Fingerprint: "fp", Units: 1},
		{Seq: 2, CheckpointID: 1, Owner: "a", Fingerprint: "fp", Units: 1},
		{Seq: 3, CheckpointID: 2, Owner: "a", Fingerprint: "fp", Units: 1},
		{Seq: 4, CheckpointID: 3, Owner: "a", Fingerprint: "fp", Units: 1},
	}
	if fmt.Sprint(chain) != fmt.Sprint(want) {
		t.Errorf("HEAD chain %+v, want %+v", chain, want)
	}
	if err := a.Retain(ctx, 4); err != nil {
		t.Fatalf("retention: %v", err)
	}
	if seqs, _ := ns.Heads().seqs(ctx); fmt.Sprint(seqs) != "[3 4]" {
		t.Errorf("HEADs after retention %v, want [3 4] (the two newest checkpoints)", seqs)
	}

	// A second instance of member a claims HEAD-5 while this one's create
	// of HEAD-5 fails: another claim's HEAD, same member id: fenced.
	store.before["HEAD-5"] = func() {
		if _, _, err := Claim(ctx, Namespace{Store: store.FileStore, Prefix: ns.Prefix}, "a", "fp", 1, 2); err != nil {
			t.Error(err)
		}
	}
	err = a.Checkpoint(ctx, 4, UnitCommit{})
	if wantErr := "checkpoint: unit clicks/units/0/0/: HEAD-5 is member a's (claim true, checkpoint 3), not this owner's (claim HEAD-1): " + ErrHeadExists.Error(); !errors.Is(err, ErrHeadExists) || err.Error() != wantErr || a.Seq() != 0 {
		t.Errorf("checkpoint beaten by another claim of the same member id: %v, seq %d; want %q, seq 0", err, a.Seq(), wantErr)
	}
	took(HeadOther)

	// A claim of member b beaten by a claim of another instance of b,
	// whose create's answer is "exists": not taken for its own.
	store.before["HEAD-6"] = func() {
		if _, _, err := Claim(ctx, Namespace{Store: store.FileStore, Prefix: ns.Prefix}, "b", "fp", 1, 2); err != nil {
			t.Error(err)
		}
	}
	_, _, err = Claim(ctx, ns, "b", "fp", 1, 2)
	if wantErr := "checkpoint: unit clicks/units/0/0/: member b claimed HEAD-6 first: " + ErrHeadExists.Error(); !errors.Is(err, ErrHeadExists) || err.Error() != wantErr {
		t.Errorf("claim beaten by another claim of the same member id: %v, want %q", err, wantErr)
	}
	took(HeadOther)
}
