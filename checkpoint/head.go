package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrHeadExists is returned by Heads.Create when the HEAD it would create
// already exists: another owner took the unit (docs/scale-out.md,
// invariant 1). The caller must stop the unit at once and commit nothing.
var ErrHeadExists = errors.New("checkpoint: HEAD already exists: the unit has another owner")

// ErrCreateOnlyIgnored is returned by SelfTest when a store lets a second
// create-only write of one name succeed: it cannot fence a zombie.
var ErrCreateOnlyIgnored = errors.New("checkpoint: the store does not honour create-only writes")

// HeadPrefix starts every HEAD file name: HEAD-<k>, k >= 1.
const HeadPrefix = "HEAD-"

// Head is the content of HEAD-<k> (JSON): the checkpoint of the unit it
// names, who wrote it, and the graph fingerprint.
type Head struct {
	// Seq is k of HEAD-<k>.
	Seq int64 `json:"seq"`
	// CheckpointID names chk-<id> of the unit's namespace; 0: none yet (a
	// claim of a unit that never completed a checkpoint).
	CheckpointID int64 `json:"checkpoint_id"`
	// Owner is the writer's group member id; Claim says the HEAD is a
	// takeover claim, not a new checkpoint.
	Owner string `json:"owner"`
	Claim bool   `json:"claim,omitempty"`
	// Fingerprint is the graph fingerprint (graph.Fingerprint).
	Fingerprint string `json:"fingerprint"`
	// Units is the number of units of the unit's stage (cluster.units) the
	// writer ran with; 0 in a HEAD written before it was recorded.
	Units int `json:"units,omitempty"`
}

// Heads is the create-only HEAD chain of one unit's namespace on a
// filesystem every daemon mounts: HEAD-<k> files in Dir, never rewritten.
// The newest HEAD, and nothing else (no chk-n listing, no _metadata), says
// which checkpoint of the unit is latest. Safe for use by one goroutine.
type Heads struct {
	// Dir is the unit's namespace, <store>/<job>/units/<stage>/<unit>.
	Dir string
}

// Latest returns the newest HEAD, or a zero Head (Seq 0) when the chain is
// empty.
func (h Heads) Latest() (Head, error) {
	ents, err := os.ReadDir(h.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return Head{}, nil
	}
	if err != nil {
		return Head{}, fmt.Errorf("checkpoint: list HEADs of %s: %w", h.Dir, err)
	}
	var newest int64
	for _, e := range ents {
		if k, ok := headSeq(e.Name()); ok && k > newest {
			newest = k
		}
	}
	if newest == 0 {
		return Head{}, nil
	}
	b, err := os.ReadFile(filepath.Join(h.Dir, HeadPrefix+strconv.FormatInt(newest, 10)))
	if err != nil {
		return Head{}, fmt.Errorf("checkpoint: read HEAD-%d of %s: %w", newest, h.Dir, err)
	}
	var hd Head
	if err := json.Unmarshal(b, &hd); err != nil {
		return Head{}, fmt.Errorf("checkpoint: HEAD-%d of %s: %w", newest, h.Dir, err)
	}
	return hd, nil
}

func headSeq(name string) (int64, bool) {
	s, ok := strings.CutPrefix(name, HeadPrefix)
	if !ok {
		return 0, false
	}
	k, err := strconv.ParseInt(s, 10, 64)
	return k, err == nil && k > 0
}

// Create writes HEAD-<hd.Seq> with a create-only write: the content goes to
// a temporary file, fsynced, then hard-linked to its name (link(2) fails
// with EEXIST when the name exists, atomically, so a reader never sees a
// partial HEAD). It returns an error wrapping ErrHeadExists when the HEAD
// exists.
func (h Heads) Create(hd Head) error {
	if err := os.MkdirAll(h.Dir, 0o755); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	b, err := json.Marshal(hd)
	if err != nil {
		return err
	}
	name := filepath.Join(h.Dir, HeadPrefix+strconv.FormatInt(hd.Seq, 10))
	tmp, err := os.CreateTemp(h.Dir, ".head-*")
	if err != nil {
		return fmt.Errorf("checkpoint: create HEAD-%d: %w", hd.Seq, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("checkpoint: create HEAD-%d: %w", hd.Seq, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("checkpoint: create HEAD-%d: %w", hd.Seq, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("checkpoint: create HEAD-%d: %w", hd.Seq, err)
	}
	if err := os.Link(tmp.Name(), name); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("checkpoint: HEAD-%d of %s: %w", hd.Seq, h.Dir, ErrHeadExists)
		}
		return fmt.Errorf("checkpoint: create HEAD-%d: %w", hd.Seq, err)
	}
	return syncDir(h.Dir)
}

// Purge deletes the HEADs below keepFrom, inside Dir only.
func (h Heads) Purge(keepFrom int64) error {
	ents, err := os.ReadDir(h.Dir)
	if err != nil {
		return fmt.Errorf("checkpoint: purge HEADs of %s: %w", h.Dir, err)
	}
	for _, e := range ents {
		if k, ok := headSeq(e.Name()); ok && k < keepFrom {
			if err := os.Remove(filepath.Join(h.Dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("checkpoint: purge HEADs of %s: %w", h.Dir, err)
			}
		}
	}
	return nil
}

// SelfTest checks at start that the store under dir honours create-only
// writes: it creates one probe name twice with O_CREAT|O_EXCL and returns
// an error wrapping ErrCreateOnlyIgnored when the second create succeeds.
// The probe is removed afterwards.
func SelfTest(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("checkpoint: store self-test: %w", err)
	}
	return selfTest(dir, func(name string) error {
		f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		return f.Close()
	})
}

// selfTest runs the probe with create, the store's create-only write.
func selfTest(dir string, create func(name string) error) error {
	f, err := os.CreateTemp(dir, ".selftest-*")
	if err != nil {
		return fmt.Errorf("checkpoint: store self-test in %s: %w", dir, err)
	}
	probe := f.Name()
	f.Close()
	os.Remove(probe)
	defer os.Remove(probe)
	if err := create(probe); err != nil {
		return fmt.Errorf("checkpoint: store self-test in %s: first create: %w", dir, err)
	}
	err = create(probe)
	switch {
	case err == nil:
		return fmt.Errorf("checkpoint: store self-test in %s: a second create-only write of %s succeeded: %w", dir, filepath.Base(probe), ErrCreateOnlyIgnored)
	case errors.Is(err, os.ErrExist):
		return nil
	default:
		return fmt.Errorf("checkpoint: store self-test in %s: second create: %w", dir, err)
	}
}

// UnitCommit is what a unit's checkpoint does after every task acknowledged
// it, in the order of docs/scale-out.md invariant 1. Each step may be nil.
type UnitCommit struct {
	// PreCommit pre-commits every output transaction of the unit
	// (dead-letter writes included).
	PreCommit func() error
	// Upload writes the state and the chk-<n>/_metadata of the unit.
	Upload func() error
	// Commit commits the pre-committed Kafka transactions.
	Commit func() error
	// Purge applies retention inside the unit's namespace; keepFrom is the
	// oldest HEAD sequence kept.
	Purge func(keepFrom int64) error
}

// Owner is the current owner of one unit: it holds the HEAD sequence it
// claimed and advances it by one per checkpoint. Not safe for concurrent
// use.
type Owner struct {
	heads       Heads
	member      string
	fingerprint string
	units       int
	retained    int64
	seq         int64 // the last HEAD this owner created
}

// claimAttempts bounds how often Claim re-reads the chain after the
// previous owner's checkpoint HEAD beat its claim.
const claimAttempts = 50

// Claim takes the unit over (takeover steps 1 and 2 of docs/scale-out.md):
// it reads the newest HEAD and creates the next one naming the same
// checkpoint, so that a previous owner can no longer commit. It returns
// the owner and the HEAD read (whose CheckpointID is the checkpoint to
// restore, 0 for none). When the previous owner's next checkpoint HEAD
// takes the number first (it is still running until its revoke or its
// fencing takes effect), Claim reads the chain again and claims after
// it, up to claimAttempts times: the checkpoint restored is then that
// newer one. A concurrent claim by another member that wins returns an
// error wrapping ErrHeadExists. units is the stage's unit count, written
// into every HEAD: a HEAD written with another count is refused naming
// both. retained (>= 1) is how many HEADs Purge keeps.
func Claim(heads Heads, member, fingerprint string, units, retained int) (*Owner, Head, error) {
	return claim(heads, member, fingerprint, units, retained, nil)
}

// claim is Claim; raced, when not nil, runs between reading the chain and
// creating the claim (tests use it to let a previous owner's HEAD win).
func claim(heads Heads, member, fingerprint string, units, retained int, raced func(prev Head)) (*Owner, Head, error) {
	for attempt := 1; ; attempt++ {
		prev, err := heads.Latest()
		if err != nil {
			return nil, Head{}, err
		}
		if prev.Units != 0 && prev.Units != units {
			return nil, Head{}, fmt.Errorf("checkpoint: unit %s: HEAD-%d was written with %d units per stage, this daemon runs %d", heads.Dir, prev.Seq, prev.Units, units)
		}
		if prev.Seq > 0 && prev.Fingerprint != fingerprint {
			return nil, Head{}, fmt.Errorf("checkpoint: unit %s: HEAD-%d was written for graph %.12s, this daemon runs graph %.12s", heads.Dir, prev.Seq, prev.Fingerprint, fingerprint)
		}
		if attempt > 1 && prev.Claim && prev.Owner != member {
			return nil, Head{}, fmt.Errorf("checkpoint: unit %s: member %s claimed HEAD-%d first: %w", heads.Dir, prev.Owner, prev.Seq, ErrHeadExists)
		}
		if raced != nil {
			raced(prev)
		}
		o := &Owner{heads: heads, member: member, fingerprint: fingerprint, units: units, retained: int64(max(retained, 1))}
		claim := Head{Seq: prev.Seq + 1, CheckpointID: prev.CheckpointID, Owner: member, Claim: true, Fingerprint: fingerprint, Units: units}
		err = heads.Create(claim)
		if err == nil {
			o.seq = claim.Seq
			return o, prev, nil
		}
		if !errors.Is(err, ErrHeadExists) || attempt == claimAttempts {
			return nil, Head{}, err
		}
	}
}

// Checkpoint completes checkpoint id of the unit: pre-commit, upload,
// create HEAD-<seq+1> naming it, then commit, then purge. Every checkpoint
// writes its HEAD, even when every transaction is empty (franz-go's
// EndTransaction returns nil when nothing was produced, so an empty epoch
// would otherwise let a zombie commit unnoticed). When the HEAD exists the
// unit has another owner: Checkpoint returns an error wrapping
// ErrHeadExists without committing or purging anything; the owner is
// then dead for good.
func (o *Owner) Checkpoint(id int64, steps UnitCommit) error {
	if o.seq == 0 {
		return fmt.Errorf("checkpoint: unit %s: %w (fenced earlier)", o.heads.Dir, ErrHeadExists)
	}
	for _, f := range []func() error{steps.PreCommit, steps.Upload} {
		if f != nil {
			if err := f(); err != nil {
				return err
			}
		}
	}
	hd := Head{Seq: o.seq + 1, CheckpointID: id, Owner: o.member, Fingerprint: o.fingerprint, Units: o.units}
	if err := o.heads.Create(hd); err != nil {
		if errors.Is(err, ErrHeadExists) {
			o.seq = 0
		}
		return err
	}
	o.seq = hd.Seq
	if steps.Commit != nil {
		if err := steps.Commit(); err != nil {
			return err
		}
	}
	keep := max(o.seq-o.retained+1, 1)
	if err := o.heads.Purge(keep); err != nil {
		return err
	}
	if steps.Purge != nil {
		return steps.Purge(keep)
	}
	return nil
}

// Seq returns the last HEAD sequence this owner created, 0 once fenced.
func (o *Owner) Seq() int64 { return o.seq }
