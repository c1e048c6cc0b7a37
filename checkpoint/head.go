package checkpoint

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2/objstorage/remote"

	"github.com/kstreamd/kstreamd/internal/atomicfile"
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
	// CheckpointClaim is the claim under which chk-<CheckpointID> was
	// written: the k of the HEAD-<k> its writer claimed, which the
	// checkpoint's owner marker (chk-<id>/_claim, ClaimMarker) must name.
	// A claim HEAD copies it from the HEAD it read. 0: no marker to check
	// (a HEAD written before markers, one naming no checkpoint, or one of
	// an Owner without a staging Storage).
	CheckpointClaim int64 `json:"checkpoint_claim,omitempty"`
	// MetadataClaim is the claim under which chk-<CheckpointID> was
	// written when that checkpoint has no owner marker because its
	// _metadata is the only object in chk-<id> and names the claim itself
	// (Metadata.Claim; Owner.upload): a restore then checks the _metadata's
	// claim and downloads nothing else from chk-<id>. CheckpointClaim is
	// then 0, so a binary older than this field restores the directory as
	// one written before markers. A claim HEAD copies it from the HEAD it
	// read. 0: the checkpoint has an owner marker, or none at all.
	MetadataClaim int64 `json:"metadata_claim,omitempty"`
	// Token is a random id of the claim (Owner) that wrote the HEAD, the
	// same in its claim and in each of its checkpoint HEADs: a writer
	// whose create's outcome is unknown (its answer lost, a retry's
	// "exists") reads HEAD-<k> back and takes it for its own only when
	// the token is its own, never by the member id, which an earlier
	// instance of the same daemon shares. Empty in a HEAD written before
	// tokens.
	Token string `json:"token,omitempty"`
}

// ClaimFile is the owner marker of a unit's checkpoint directory in the
// store: chk-<id>/_claim, created create-only before anything else is
// written into chk-<id> (docs/scale-out.md, "Commit"). Its content is a
// ClaimMarker. A writer that finds another claim's marker writes nothing
// into that directory.
const ClaimFile = "_claim"

// ClaimMarker is the content of chk-<id>/_claim (JSON): the claim whose
// owner writes chk-<id>. Claim alone identifies it (HEAD-<k> is created
// once); Owner names the member for people reading the store.
type ClaimMarker struct {
	// Claim is the k of the HEAD-<k> the writer claimed the unit with.
	Claim int64 `json:"claim"`
	// Owner is the writer's group member id.
	Owner string `json:"owner"`
}

// ErrForeignClaim is wrapped by the error Checkpoint returns when chk-<id>
// carries another claim's owner marker or _metadata while this owner
// still holds the newest HEAD (a zombie took the id first): nothing was
// written into chk-<id>; the next checkpoint uses a higher id (Reserve
// returns one).
var ErrForeignClaim = errors.New("checkpoint: the checkpoint directory belongs to another claim")

// UnitPrefix returns the key prefix of a unit's namespace in a Store:
// "<job>/units/<stage>/<unit>/".
func UnitPrefix(job string, stage, unit int) string {
	return job + "/units/" + strconv.Itoa(stage) + "/" + strconv.Itoa(unit) + "/"
}

// Heads is the create-only HEAD chain of one unit's namespace in a Store:
// the objects Prefix+"HEAD-<k>", never rewritten. The newest HEAD, and
// nothing else (no chk-n listing, no _metadata), says which checkpoint of
// the unit is latest.
type Heads struct {
	Store Store
	// Prefix is the unit's namespace, UnitPrefix(job, stage, unit).
	Prefix string
}

func (h Heads) key(k int64) string { return h.Prefix + HeadPrefix + strconv.FormatInt(k, 10) }

// seqs returns the k of every HEAD-<k> in the namespace, ascending.
func (h Heads) seqs(ctx context.Context) ([]int64, error) {
	keys, err := h.Store.List(ctx, h.Prefix+HeadPrefix)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: list HEADs of %s in %s: %w", h.Prefix, h.Store, err)
	}
	var out []int64
	for _, k := range keys {
		if seq, ok := headSeq(strings.TrimPrefix(k, h.Prefix)); ok {
			out = append(out, seq)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Latest returns the newest HEAD, or a zero Head (Seq 0) when the chain is
// empty. A HEAD listed and then deleted by the owner's retention before it
// is read (a newer one was created meanwhile) makes it list again, up to
// latestAttempts times; the last such error wraps fs.ErrNotExist.
func (h Heads) Latest(ctx context.Context) (Head, error) {
	var err error
	for range latestAttempts {
		var seqs []int64
		seqs, err = h.seqs(ctx)
		if err != nil || len(seqs) == 0 {
			return Head{}, err
		}
		var hd Head
		hd, err = h.Read(ctx, seqs[len(seqs)-1])
		if !errors.Is(err, fs.ErrNotExist) {
			return hd, err
		}
	}
	return Head{}, err
}

// latestAttempts bounds Latest's listings: each retry needs a newer HEAD
// created between its list and its read, which a chain gains at most once
// per checkpoint interval.
const latestAttempts = 5

// Read returns HEAD-<k>; an error wrapping fs.ErrNotExist when it is not
// there.
func (h Heads) Read(ctx context.Context, k int64) (Head, error) {
	b, err := h.Store.Read(ctx, h.key(k))
	if err != nil {
		return Head{}, fmt.Errorf("checkpoint: HEAD-%d of %s: %w", k, h.Prefix, err)
	}
	var hd Head
	if err := json.Unmarshal(b, &hd); err != nil {
		return Head{}, fmt.Errorf("checkpoint: HEAD-%d of %s: %w", k, h.Prefix, err)
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

// Create writes HEAD-<hd.Seq> with the store's create-only write. It
// returns an error wrapping ErrHeadExists when the HEAD exists.
func (h Heads) Create(ctx context.Context, hd Head) error {
	b, err := json.Marshal(hd)
	if err != nil {
		return err
	}
	if err := h.Store.Create(ctx, h.key(hd.Seq), b); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("checkpoint: HEAD-%d of %s in %s: %w", hd.Seq, h.Prefix, h.Store, ErrHeadExists)
		}
		return fmt.Errorf("checkpoint: create HEAD-%d of %s: %w", hd.Seq, h.Prefix, err)
	}
	return nil
}

// Purge deletes the HEADs below keepFrom, inside the namespace only.
func (h Heads) Purge(ctx context.Context, keepFrom int64) error {
	seqs, err := h.seqs(ctx)
	if err != nil {
		return err
	}
	return h.purgeListed(ctx, seqs, keepFrom)
}

// purgeListed is Purge with the HEADs already listed (seqs, ascending):
// Owner.Retain's own listing, taken after the namespace's. A HEAD created
// since is above the owner's (retention returned before) or its own newer
// one, never below keepFrom, so the listing holds every HEAD Purge would
// delete.
func (h Heads) purgeListed(ctx context.Context, seqs []int64, keepFrom int64) error {
	var del []string
	for _, k := range seqs {
		if k < keepFrom {
			del = append(del, h.key(k))
		}
	}
	if len(del) == 0 {
		return nil
	}
	return h.Store.Delete(ctx, del...)
}

// SelfTest checks at start that store honours create-only writes: it
// creates one probe object, prefix+".selftest-<random>", twice and returns
// an error naming the store and wrapping ErrCreateOnlyIgnored when the
// second create succeeds (an S3 clone ignoring If-None-Match, a filesystem
// without atomic link(2) semantics). The probe is deleted afterwards.
func SelfTest(ctx context.Context, store Store, prefix string) error {
	var r [8]byte
	_, _ = rand.Read(r[:])
	probe := prefix + ".selftest-" + hex.EncodeToString(r[:])
	defer store.Delete(context.WithoutCancel(ctx), probe)
	if err := store.Create(ctx, probe, []byte("probe")); err != nil {
		return fmt.Errorf("checkpoint: store self-test of %s: first create of %s: %w", store, probe, err)
	}
	err := store.Create(ctx, probe, []byte("probe"))
	switch {
	case err == nil:
		return fmt.Errorf("checkpoint: store self-test of %s: a second create-only write of %s succeeded (it overwrote the object): %w", store, probe, ErrCreateOnlyIgnored)
	case errors.Is(err, fs.ErrExist):
		return nil
	default:
		return fmt.Errorf("checkpoint: store self-test of %s: second create of %s: %w", store, probe, err)
	}
}

// UnitCommit is what a unit's checkpoint does besides its HEAD, in the
// order of docs/scale-out.md invariant 1. Each step may be nil.
type UnitCommit struct {
	// PreCommit pre-commits every output transaction of the unit
	// (dead-letter writes included).
	PreCommit func() error
	// Upload runs after the Owner uploaded the checkpoint (when its
	// Namespace has a Local storage) and before the HEAD.
	Upload func() error
	// Commit commits the pre-committed Kafka transactions.
	Commit func() error
}

// Namespace is one unit's namespace: its objects in a Store under Prefix
// and, when Local is not nil, the local staging storage its checkpoints
// are written to first (the coordinator's Storage) and uploaded from.
type Namespace struct {
	Store Store
	// Prefix is UnitPrefix(job, stage, unit).
	Prefix string
	// Local is the unit's checkpoint storage on this daemon's disk; nil:
	// the Owner only keeps the HEAD chain (tests).
	Local *Storage
	// Resolved, if not nil, is told how each HEAD create whose outcome
	// was unknown (an error or "exists") resolved once read back: HeadOwn,
	// HeadAdopted, HeadOther or HeadUnknown (the job's
	// kstreamd_cluster_head_unknown_outcomes_total).
	Resolved func(outcome string)
	// Remote, if not nil, is the unit's remote state store: the objects
	// of its disaggregated Pebble backends (state.RemoteConfig.Store),
	// which its checkpoints name as shared files "../remote/<object>".
	// Those are referred to, never uploaded or downloaded, and Retain
	// collects the store's objects no marker and no kept checkpoint
	// refers to (the store is the unit's alone: docs/scale-out.md).
	Remote remote.Storage
}

// How a HEAD create whose outcome was unknown resolved (Namespace.Resolved).
const (
	// HeadOwn: HEAD-<k> read back as exactly what this owner wrote: it
	// was created, only the store's answer was lost.
	HeadOwn = "own"
	// HeadAdopted: HEAD-<k> is an earlier checkpoint HEAD of this owner
	// whose create it had taken for failed; the owner moves past it.
	HeadAdopted = "adopted"
	// HeadOther: HEAD-<k> is another claim's: the unit was taken over.
	HeadOther = "other"
	// HeadUnknown: HEAD-<k> could not be read back; the checkpoint
	// fails and the owner stays where it was.
	HeadUnknown = "unknown"
)

func (n Namespace) resolved(outcome string) {
	if n.Resolved != nil {
		n.Resolved(outcome)
	}
}

// Heads returns the namespace's HEAD chain.
func (n Namespace) Heads() Heads { return Heads{Store: n.Store, Prefix: n.Prefix} }

// chkKey returns the key of file rel (slash-separated) of checkpoint id.
func (n Namespace) chkKey(id int64, rel string) string {
	return n.Prefix + "chk-" + strconv.FormatInt(id, 10) + "/" + rel
}

// sharedKey returns the key of shared file f (as Metadata.SharedFiles
// names it).
func (n Namespace) sharedKey(f string) string { return n.Prefix + "shared/" + f }

// Owner is the current owner of one unit: it holds the HEAD sequence it
// claimed and advances it by one per checkpoint; it uploads the unit's
// checkpoints, downloads the one it restores and applies retention. Not
// safe for concurrent use (the unit's coordinator goroutine owns it).
type Owner struct {
	ns          Namespace
	member      string
	fingerprint string
	units       int
	retained    int
	token       string          // Head.Token of every HEAD this owner writes
	seq         int64           // the last HEAD this owner created; 0 once fenced
	claimSeq    int64           // the HEAD this owner claimed the unit with
	chain       map[int64]int64 // checkpoint id named by each HEAD seen (seq -> id)
	known       map[string]bool // shared files (Metadata.SharedFiles names) in the store
	inflight    map[string]bool // shared files uploaded since this owner's last HEAD
	// sharedOf caches the SharedFiles of chk-<id>/_metadata in the store
	// (create-only, so immutable) for Retain; metaReads counts the reads
	// (tests).
	sharedOf  map[int64][]string
	metaReads int
	maxChk    int64 // highest chk-<id> in the store at the claim, or reserved since
	marked    int64 // the chk-<id> whose owner marker is this owner's (0: none yet)
}

// claimAttempts bounds how often Claim re-reads the chain after the
// previous owner's checkpoint HEAD beat its claim.
const claimAttempts = 50

// Claim takes the unit over (takeover steps 1 and 2 of docs/scale-out.md):
// it reads the newest HEAD and creates the next one naming the same
// checkpoint, so that a previous owner can no longer commit. It returns
// the owner and the HEAD read (whose CheckpointID is the checkpoint to
// restore with Restore, 0 for none). When the previous owner's next
// checkpoint HEAD takes the number first (it is still running until its
// revoke or its fencing takes effect), Claim reads the chain again and
// claims after it, up to claimAttempts times: the checkpoint restored is
// then that newer one. A concurrent claim by another member that wins
// returns an error wrapping ErrHeadExists. units is the stage's unit
// count, written into every HEAD: a HEAD written with another count, or
// for another graph fingerprint, is refused naming both. retained (>= 1)
// is how many checkpoints Retain keeps.
func Claim(ctx context.Context, ns Namespace, member, fingerprint string, units, retained int) (*Owner, Head, error) {
	return claimWith(ctx, ns, member, fingerprint, units, retained, nil, nil)
}

// claim is Claim; raced, when not nil, runs between reading the chain and
// creating the claim (tests use it to let a previous owner's HEAD win).
func claim(ctx context.Context, ns Namespace, member, fingerprint string, units, retained int, raced func(prev Head)) (*Owner, Head, error) {
	return claimWith(ctx, ns, member, fingerprint, units, retained, raced, nil)
}

// claimWith is claim; restores, when not nil, accepts (nil) or refuses a
// HEAD written for another graph fingerprint (ClaimUpgrade).
func claimWith(ctx context.Context, ns Namespace, member, fingerprint string, units, retained int, raced func(prev Head), restores func(Head) error) (*Owner, Head, error) {
	heads := ns.Heads()
	token := newToken()
	for attempt := 1; ; attempt++ {
		prev, err := heads.Latest(ctx)
		if err != nil {
			return nil, Head{}, err
		}
		if prev.Units != 0 && prev.Units != units {
			return nil, Head{}, fmt.Errorf("checkpoint: unit %s: HEAD-%d was written with %d units per stage, this daemon runs %d", ns.Prefix, prev.Seq, prev.Units, units)
		}
		state := prev // the HEAD whose graph wrote the state prev names
		if prev.Seq > 0 && prev.Fingerprint != fingerprint {
			if state, err = heads.Writer(ctx, prev); err != nil {
				return nil, Head{}, err
			}
		}
		if state.Seq > 0 && state.Fingerprint != fingerprint && restores != nil {
			if err := restores(state); err != nil {
				return nil, Head{}, fmt.Errorf("checkpoint: unit %s: HEAD-%d: %w", ns.Prefix, state.Seq, err)
			}
		} else if state.Seq > 0 && state.Fingerprint != fingerprint {
			return nil, Head{}, fmt.Errorf("checkpoint: unit %s: HEAD-%d was written for graph %.12s, this daemon runs graph %.12s", ns.Prefix, state.Seq, state.Fingerprint, fingerprint)
		}
		if attempt > 1 && prev.Claim && prev.Token != token {
			// Another claim won (this claim's own HEAD, created while its
			// read-back failed, is claimed after like any other).
			return nil, Head{}, fmt.Errorf("checkpoint: unit %s: member %s claimed HEAD-%d first: %w", ns.Prefix, prev.Owner, prev.Seq, ErrHeadExists)
		}
		o := &Owner{ns: ns, member: member, fingerprint: fingerprint, units: units, retained: max(retained, 1), token: token,
			chain: map[int64]int64{}, known: map[string]bool{}, inflight: map[string]bool{}, sharedOf: map[int64][]string{}}
		// Listed at every attempt: the previous owner's HEAD that beat the
		// last one may name a checkpoint it uploaded since.
		if ns.Local != nil {
			keys, err := ns.Store.List(ctx, ns.Prefix)
			if err != nil {
				return nil, Head{}, fmt.Errorf("checkpoint: unit %s: %w", ns.Prefix, err)
			}
			for _, k := range keys {
				rel := strings.TrimPrefix(k, ns.Prefix)
				if f, ok := strings.CutPrefix(rel, "shared/"); ok {
					o.known[f] = true
				} else if dir, _, ok := strings.Cut(rel, "/"); ok {
					if id, ok := parseChkName(dir); ok {
						o.maxChk = max(o.maxChk, id)
					}
				}
			}
		}
		if raced != nil {
			raced(prev)
		}
		claim := Head{Seq: prev.Seq + 1, CheckpointID: prev.CheckpointID, Owner: member, Claim: true, Fingerprint: fingerprint, Units: units,
			CheckpointClaim: prev.CheckpointClaim, MetadataClaim: prev.MetadataClaim, Token: token}
		if err := heads.Create(ctx, claim); err != nil {
			// The outcome is unknown (an answer lost, a retry's "exists"):
			// read HEAD-<k> back. Only this claim's token makes it ours.
			got, rerr := heads.Read(ctx, claim.Seq)
			switch {
			case rerr == nil && got == claim:
				ns.resolved(HeadOwn) // created: the store's answer was lost
			case rerr == nil && got.Claim:
				ns.resolved(HeadOther)
				return nil, Head{}, fmt.Errorf("checkpoint: unit %s: member %s claimed HEAD-%d first: %w", ns.Prefix, got.Owner, got.Seq, ErrHeadExists)
			case (rerr == nil || errors.Is(err, ErrHeadExists)) && attempt < claimAttempts:
				continue // the previous owner's checkpoint HEAD took the number
			default:
				if rerr != nil {
					ns.resolved(HeadUnknown)
				}
				return nil, Head{}, err
			}
		}
		o.seq, o.claimSeq = claim.Seq, claim.Seq
		if prev.Seq > 0 {
			o.chain[prev.Seq] = prev.CheckpointID
		}
		o.chain[claim.Seq] = claim.CheckpointID
		return o, prev, nil
	}
}

// NextCheckpointID returns an id above every checkpoint in the unit's
// namespace at the claim (the coordinator's FirstID), so this owner never
// writes into a chk-<id> a previous owner left.
func (o *Owner) NextCheckpointID() int64 { return o.maxChk + 1 }

// Reserve returns the id under which the checkpoint the coordinator
// triggers as id is written into the store: id, or one above every
// chk-<n> this owner has seen in the namespace when another claim's
// checkpoint took an id at or above it (upload found another claim's
// owner marker or _metadata in chk-<n>: a zombie took the id first, and
// the checkpoint that found it failed). It writes nothing: upload makes
// chk-<id> this owner's, with the owner marker chk-<id>/_claim when the
// checkpoint has a private object besides its _metadata, else with the
// _metadata's own create-only write naming the claim (Metadata.Claim). A
// fenced owner gets an error wrapping ErrHeadExists. Without a staging
// Storage (Namespace.Local nil) nothing is uploaded and id is returned as
// is.
//
// Until session 45 Reserve created the marker at every trigger; a
// checkpoint whose _metadata is its only object in chk-<id> (every unit
// whose private files are all inline: a stateless stage, a small keyed
// one) now saves that create, its directory sync and its file. The
// safety argument is in upload's doc.
func (o *Owner) Reserve(_ context.Context, id int64) (int64, error) {
	if o.seq == 0 {
		return 0, fmt.Errorf("checkpoint: unit %s: %w (fenced earlier)", o.ns.Prefix, ErrHeadExists)
	}
	if o.ns.Local == nil {
		return id, nil
	}
	return max(id, o.maxChk+1), nil
}

// mark creates the owner marker chk-<id>/_claim of this owner's claim
// (create-only). A marker that exists and names this claim (a create
// whose answer was lost) is this owner's as well. Another claim's marker
// leaves chk-<id> alone (taken).
func (o *Owner) mark(ctx context.Context, id int64) error {
	if o.marked == id {
		return nil
	}
	mine := ClaimMarker{Claim: o.claimSeq, Owner: o.member}
	b, err := json.Marshal(mine)
	if err != nil {
		return err
	}
	cerr := o.ns.Store.Create(ctx, o.ns.chkKey(id, ClaimFile), b)
	if cerr == nil {
		o.marked, o.maxChk = id, max(o.maxChk, id)
		return nil
	}
	got, rerr := o.readMarker(ctx, id)
	if rerr == nil && got == mine {
		o.marked, o.maxChk = id, max(o.maxChk, id)
		return nil
	}
	if !errors.Is(cerr, fs.ErrExist) {
		return fmt.Errorf("checkpoint: unit %s: owner marker of chk-%d: %w", o.ns.Prefix, id, cerr)
	}
	if rerr != nil {
		return fmt.Errorf("checkpoint: unit %s: owner marker of chk-%d: %w", o.ns.Prefix, id, rerr)
	}
	return o.taken(ctx, id, "is marked by", got)
}

// taken is the outcome of finding chk-<id> another writer's (what it
// holds: its owner marker, or its _metadata; got names the claim that
// wrote it, zero for a _metadata that names none). When a HEAD above
// this owner's exists the owner is a zombie: the error wraps
// ErrHeadExists and the owner is fenced. Else a zombie took the id
// first: the error wraps ErrForeignClaim, and the owner moves maxChk up
// to the highest chk-<n> in the namespace, so that the next Reserve
// returns an id above it.
func (o *Owner) taken(ctx context.Context, id int64, what string, got ClaimMarker) error {
	seqs, err := o.ns.Heads().seqs(ctx)
	if err != nil {
		return err
	}
	if n := len(seqs); n > 0 && seqs[n-1] > o.seq {
		own := o.seq
		o.seq = 0
		return fmt.Errorf("checkpoint: unit %s: chk-%d %s claim HEAD-%d (member %s) and HEAD-%d is above this owner's HEAD-%d: %w",
			o.ns.Prefix, id, what, got.Claim, got.Owner, seqs[n-1], own, ErrHeadExists)
	}
	keys, err := o.ns.Store.List(ctx, o.ns.Prefix+"chk-")
	if err != nil {
		return fmt.Errorf("checkpoint: unit %s: %w", o.ns.Prefix, err)
	}
	o.maxChk = max(o.maxChk, id)
	for _, k := range keys {
		dir, _, _ := strings.Cut(strings.TrimPrefix(k, o.ns.Prefix), "/")
		if n, ok := parseChkName(dir); ok {
			o.maxChk = max(o.maxChk, n)
		}
	}
	return fmt.Errorf("checkpoint: unit %s: chk-%d %s claim HEAD-%d (member %s), not this owner's claim HEAD-%d: %w",
		o.ns.Prefix, id, what, got.Claim, got.Owner, o.claimSeq, ErrForeignClaim)
}

// storedAs reports whether the store's object key holds exactly want
// (nil: the file at path), read back after its create-only write said it
// exists. Under this owner's own marker an object of chk-<id> that exists
// with this owner's bytes is its own write whose answer was lost (an S3
// retry meeting its first PUT: 412); other bytes, or a failed read, are
// not.
func (o *Owner) storedAs(ctx context.Context, key, path string, want []byte) bool {
	if want == nil {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		want = b
	}
	got, err := o.ns.Store.Read(ctx, key)
	return err == nil && bytes.Equal(got, want)
}

// readStoreMetadata reads chk-<id>/_metadata from the store.
func (o *Owner) readStoreMetadata(ctx context.Context, id int64) (*Metadata, error) {
	key := o.ns.chkKey(id, MetadataFile)
	b, err := o.ns.Store.Read(ctx, key)
	if err != nil {
		return nil, err
	}
	var m Metadata
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorruptMetadata, key, err)
	}
	return &m, nil
}

// readMarker reads chk-<id>/_claim.
func (o *Owner) readMarker(ctx context.Context, id int64) (ClaimMarker, error) {
	b, err := o.ns.Store.Read(ctx, o.ns.chkKey(id, ClaimFile))
	if err != nil {
		return ClaimMarker{}, err
	}
	var m ClaimMarker
	if err := json.Unmarshal(b, &m); err != nil {
		return ClaimMarker{}, fmt.Errorf("checkpoint: unit %s: chk-%d/%s: %w", o.ns.Prefix, id, ClaimFile, err)
	}
	return m, nil
}

// Restore downloads the checkpoint HEAD hd names (hd.CheckpointID) into
// the local staging storage (replacing whatever the local directory held)
// together with every shared file it refers to, and returns the local
// directory and its metadata: takeover step 5. When hd records the claim
// that wrote the checkpoint (CheckpointClaim), chk-<id>/_claim must name
// that claim (and, for a HEAD that is not a claim, its owner): a missing
// or another claim's marker is refused with an error wrapping
// ErrInconsistent, and nothing is downloaded. When hd records the claim
// in MetadataClaim instead, the store's chk-<id>/_metadata must name that
// claim (and owner) the same way, and nothing of chk-<id> but the
// _metadata (with its inline files) is restored. A HEAD written before
// markers restores its directory as it is. The marker itself is never
// downloaded. It needs a Namespace with Local.
func (o *Owner) Restore(ctx context.Context, hd Head) (string, *Metadata, error) {
	id := hd.CheckpointID
	local := o.ns.Local
	dir := local.CheckpointDir(id)
	if err := os.RemoveAll(dir); err != nil {
		return "", nil, fmt.Errorf("checkpoint: restore %d of unit %s: %w", id, o.ns.Prefix, err)
	}
	prefix := o.ns.chkKey(id, "")
	keys, err := o.ns.Store.List(ctx, prefix)
	if err != nil {
		return "", nil, fmt.Errorf("checkpoint: restore %d of unit %s: %w", id, o.ns.Prefix, err)
	}
	if !slices.Contains(keys, prefix+MetadataFile) {
		return "", nil, fmt.Errorf("checkpoint: restore %d of unit %s: %s has no %s in %s: %w", id, o.ns.Prefix, strings.TrimSuffix(prefix, "/"), MetadataFile, o.ns.Store, fs.ErrNotExist)
	}
	if hd.MetadataClaim != 0 {
		// The _metadata is the checkpoint's owner marker and its only
		// object: it must name the claim, and anything else in chk-<id>
		// (an owner marker, files) is another writer's, never downloaded.
		m, err := o.readStoreMetadata(ctx, id)
		if err != nil {
			return "", nil, fmt.Errorf("checkpoint: restore %d of unit %s: %w", id, o.ns.Prefix, err)
		}
		if m.Claim == nil || m.Claim.Claim != hd.MetadataClaim || (!hd.Claim && m.Claim.Owner != hd.Owner) {
			var got ClaimMarker
			if m.Claim != nil {
				got = *m.Claim
			}
			return "", nil, fmt.Errorf("checkpoint: restore %d of unit %s: HEAD-%d names chk-%d written under claim HEAD-%d by %s, but its _metadata names claim HEAD-%d by %q: refusing to restore another writer's checkpoint: %w",
				id, o.ns.Prefix, hd.Seq, id, hd.MetadataClaim, hd.Owner, got.Claim, got.Owner, ErrInconsistent)
		}
		keys = nil
	} else if hd.CheckpointClaim != 0 {
		want := ClaimMarker{Claim: hd.CheckpointClaim, Owner: hd.Owner}
		got, err := o.readMarker(ctx, id)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return "", nil, fmt.Errorf("checkpoint: restore %d of unit %s: HEAD-%d names chk-%d written under claim HEAD-%d, but chk-%d has no owner marker %s: refusing to restore it: %w",
				id, o.ns.Prefix, hd.Seq, id, hd.CheckpointClaim, id, ClaimFile, ErrInconsistent)
		case err != nil:
			return "", nil, fmt.Errorf("checkpoint: restore %d of unit %s: %w", id, o.ns.Prefix, err)
		case got.Claim != want.Claim || (!hd.Claim && got.Owner != want.Owner):
			return "", nil, fmt.Errorf("checkpoint: restore %d of unit %s: HEAD-%d names chk-%d written under claim HEAD-%d by %s, but its owner marker names claim HEAD-%d by %s: refusing to restore another writer's files: %w",
				id, o.ns.Prefix, hd.Seq, id, hd.CheckpointClaim, hd.Owner, got.Claim, got.Owner, ErrInconsistent)
		}
	}
	for _, k := range keys {
		if k == prefix+MetadataFile || k == prefix+ClaimFile {
			continue // _metadata last: its presence says the download is whole
		}
		if err := o.ns.Store.Download(ctx, k, filepath.Join(dir, filepath.FromSlash(strings.TrimPrefix(k, prefix)))); err != nil {
			return "", nil, err
		}
	}
	if err := o.downloadMetadata(ctx, id, dir); err != nil {
		return "", nil, err
	}
	m, err := ReadMetadata(dir)
	if err != nil {
		return "", nil, err
	}
	for _, f := range m.SharedFiles {
		if _, ok := remoteObject(f); ok {
			continue // an object of the remote state store: restored by reference
		}
		dst := filepath.Join(local.SharedDir(), filepath.FromSlash(f))
		if _, err := os.Stat(dst); err == nil {
			continue // shared files are immutable and uniquely named
		}
		if err := o.ns.Store.Download(ctx, o.ns.sharedKey(f), dst); err != nil {
			return "", nil, fmt.Errorf("checkpoint: restore %d of unit %s: shared file %s: %w", id, o.ns.Prefix, f, err)
		}
	}
	return dir, m, nil
}

// downloadMetadata writes chk-<id>/_metadata of the store into dir, the
// restore's working directory, without fsyncs (a crash makes the
// directory worthless anyway, as Download's copies). A version
// InlineMetadataVersion _metadata (uploadMetadata) has its InlineFiles
// written into dir first and is written as the version 3 it was staged
// as, without them: the restored directory is then what the staging
// directory was. Older _metadata is copied as it is.
func (o *Owner) downloadMetadata(ctx context.Context, id int64, dir string) error {
	key := o.ns.chkKey(id, MetadataFile)
	b, err := o.ns.Store.Read(ctx, key)
	if err != nil {
		return err
	}
	var m Metadata
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrCorruptMetadata, key, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if m.Version != InlineMetadataVersion {
		return atomicfile.WriteFile(filepath.Join(dir, MetadataFile), b, atomicfile.Options{TempName: MetadataFile + ".tmp", NoSync: true})
	}
	if err := WriteInlineFiles(dir, m.InlineFiles); err != nil {
		return fmt.Errorf("checkpoint: %s: %w", key, err)
	}
	m.Version, m.InlineFiles, m.Claim = MetadataVersion, nil, nil
	return writeMetadataSync(dir, &m, nil, true, nil)
}

// WriteInlineFiles writes a unit checkpoint's inline files
// (Metadata.InlineFiles) into dir, the checkpoint's directory, creating
// directories as needed, without fsyncs (a restore's or a gather's working
// copy). A path that is not a clean slash-separated path local to dir (so
// absolute, with "..", ".", an empty or trailing element, or a NUL), or is
// _metadata itself, is refused with an error wrapping ErrCorruptMetadata
// before anything is written: Owner.upload writes only clean paths, so a
// name that would alias another file is a corrupt _metadata. The writes go
// through an os.Root of dir, so a symlink in dir cannot lead one outside.
func WriteInlineFiles(dir string, files map[string][]byte) error {
	for rel := range files {
		if !filepath.IsLocal(filepath.FromSlash(rel)) || path.Clean(rel) != rel || strings.ContainsRune(rel, 0) || rel == MetadataFile {
			return fmt.Errorf("%w: inline file %q is not a file of the checkpoint's directory", ErrCorruptMetadata, rel)
		}
	}
	if len(files) == 0 {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	for rel, b := range files {
		if d := path.Dir(rel); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		if err := root.WriteFile(rel, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// upload writes checkpoint id from the local staging storage into the
// store: the owner marker (mark) when chk-<id> gets an object besides its
// _metadata, then every file of chk-<id>/ but _metadata and the small ones
// (see inlineFileMax), then the shared files it refers to that the store
// does not hold yet, then _metadata, which carries the small files
// (uploadMetadata). Every write is create-only: a chk-<id> another owner
// wrote fails the checkpoint instead of being overwritten, and one another
// claim marked gets nothing at all. A private object that exists with
// this owner's bytes, under its own marker, is its own write whose answer
// was lost (storedAs). It reports whether the _metadata is
// the owner marker (metadataClaim: the HEAD records the claim as
// MetadataClaim, else as CheckpointClaim).
//
// When every private file is inline, the _metadata is the only object
// written into chk-<id>, and it names this owner's claim (Metadata.Claim):
// its create-only write is the fence, and no _claim is written (one
// create, its file and directory syncs fewer per checkpoint). Why a HEAD
// still names a directory whose restored files are its writer's only:
//   - Two writers of chk-<id> (a zombie and the new owner, whose ids meet
//     after a takeover) each write one _metadata, create-only: one wins.
//     The loser reads the winner's back (taken): a HEAD above its own
//     makes it a zombie, fenced before its HEAD; else it moves its next
//     id above the namespace's chk-<n>. It wrote nothing else into
//     chk-<id> when it had no marker, and only its marker and private
//     files when it had one.
//   - A HEAD names chk-<id> only after its writer's _metadata was
//     created. With MetadataClaim, the restore checks the _metadata names
//     the claim and downloads nothing else of chk-<id> (a losing marked
//     writer's marker and files may lie beside it, never read). With
//     CheckpointClaim, the writer's marker was there before its first
//     private object and a writer without a marker wrote only a
//     _metadata, which lost: every other object is the marked writer's,
//     as before.
//   - Shared files are uniquely named and create-only as before, and
//     retention deletes a chk-<id> whole.
func (o *Owner) upload(ctx context.Context, id int64) (metadataClaim bool, err error) {
	dir := o.ns.Local.CheckpointDir(id)
	sum, err := o.ns.Local.summary(dir) // cached by the staging commit
	if err != nil {
		return false, fmt.Errorf("checkpoint: upload %d of unit %s: %w", id, o.ns.Prefix, err)
	}
	var files []string
	inline := map[string][]byte{}
	inlined := 0
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == MetadataFile || strings.HasSuffix(rel, ".tmp") {
			return err
		}
		rel = filepath.ToSlash(rel)
		if fi, err := d.Info(); err == nil && fi.Size() <= inlineFileMax && inlined+int(fi.Size()) <= inlineTotalMax {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			inline[rel] = b
			inlined += len(b)
			return nil
		}
		files = append(files, rel)
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("checkpoint: upload %d of unit %s: %w", id, o.ns.Prefix, err)
	}
	metadataClaim = len(files) == 0
	if !metadataClaim {
		if err := o.mark(ctx, id); err != nil {
			return false, err
		}
	}
	// A FileStore fsyncs each directory once after its last file
	// (batchStore) instead of once per file; the _metadata comes after.
	put := o.ns.Store.Upload
	var batch *FileBatch
	if bs, ok := o.ns.Store.(batchStore); ok {
		batch = bs.Batch()
		put = batch.Upload
	}
	var uploaded []string
	for _, rel := range files {
		key, path := o.ns.chkKey(id, rel), filepath.Join(dir, filepath.FromSlash(rel))
		if err := put(ctx, key, path); err != nil && !(errors.Is(err, fs.ErrExist) && o.storedAs(ctx, key, path, nil)) {
			return false, fmt.Errorf("checkpoint: upload %d of unit %s: %w", id, o.ns.Prefix, err)
		}
	}
	for _, f := range sum.sharedFiles {
		if _, ok := remoteObject(f); ok || o.known[f] {
			continue // already uploaded, or an object of the remote state store
		}
		err := put(ctx, o.ns.sharedKey(f), filepath.Join(o.ns.Local.SharedDir(), filepath.FromSlash(f)))
		if err != nil && !errors.Is(err, fs.ErrExist) { // exists: immutable and uniquely named, the same file
			return false, fmt.Errorf("checkpoint: upload %d of unit %s: %w", id, o.ns.Prefix, err)
		}
		uploaded = append(uploaded, f)
	}
	if batch != nil {
		if err := batch.Sync(ctx); err != nil {
			return false, fmt.Errorf("checkpoint: upload %d of unit %s: %w", id, o.ns.Prefix, err)
		}
	}
	// Known only once durable: a later checkpoint skips known files.
	for _, f := range uploaded {
		o.known[f], o.inflight[f] = true, true
	}
	if err := o.uploadMetadata(ctx, id, dir, inline, metadataClaim); err != nil {
		return false, fmt.Errorf("checkpoint: upload %d of unit %s: %w", id, o.ns.Prefix, err)
	}
	o.maxChk = max(o.maxChk, id)
	o.sharedOf[id] = slices.Clone(sum.sharedFiles) // what the store's chk-<id>/_metadata now holds
	return metadataClaim, nil
}

// inlineFileMax and inlineTotalMax bound what Owner.upload puts into a
// unit checkpoint's _metadata instead of an object each (InlineFiles): a
// private file of at most inlineFileMax bytes, while the inlined files
// total at most inlineTotalMax. A stage-1 unit's Pebble checkpoint has
// four such files (MANIFEST, OPTIONS and two markers, under 10 KiB
// together); its SSTs are shared files and larger ones stay objects.
const (
	inlineFileMax  = 64 << 10
	inlineTotalMax = 256 << 10
)

// uploadMetadata writes chk-<id>/_metadata of the staged checkpoint in dir
// into the store, create-only. With inline files (upload's small private
// files, by their path relative to dir) it is the staged metadata with
// InlineFiles set, as version InlineMetadataVersion; without, the staged
// file as it is. Inlined files cost no object of their own: no create, no
// fsync of theirs, no directories (a Pebble checkpoint's op/<subtask>/),
// and being in the _metadata they are as durable, and as fenced by its
// create-only write, as the commit of the checkpoint itself. With claim
// (upload wrote no owner marker) it is version InlineMetadataVersion with
// Claim naming this owner's claim, and a create whose outcome is unknown
// (an error, or "exists": an S3 retry whose first answer was lost) is
// read back: this claim's _metadata means created; another writer's is
// taken's outcome (ErrHeadExists or ErrForeignClaim). Without claim
// (upload marked chk-<id>) an "exists" is read back too: a _metadata
// naming a claim is an unmarked writer's (a zombie's all-inline
// checkpoint of the same id, or the new owner's when this owner is the
// zombie), which took chk-<id> before this owner's marker made it its
// own: taken's outcome as well; one holding this owner's bytes is its own
// create whose answer was lost (storedAs).
func (o *Owner) uploadMetadata(ctx context.Context, id int64, dir string, inline map[string][]byte, claim bool) error {
	key := o.ns.chkKey(id, MetadataFile)
	mine := ClaimMarker{Claim: o.claimSeq, Owner: o.member}
	var cerr error
	var sent []byte // the _metadata created, nil when uploaded from dir
	if len(inline) == 0 && !claim {
		cerr = o.ns.Store.Upload(ctx, key, filepath.Join(dir, MetadataFile))
	} else {
		m, err := ReadMetadata(dir)
		if err != nil {
			return err
		}
		m.Version, m.InlineFiles = InlineMetadataVersion, inline
		if claim {
			m.Claim = &mine
		}
		b, err := json.Marshal(m)
		if err != nil {
			return err
		}
		cerr, sent = o.ns.Store.Create(ctx, key, b), b
	}
	if cerr == nil {
		return nil
	}
	if !claim {
		if !errors.Is(cerr, fs.ErrExist) {
			return cerr
		}
		got, rerr := o.readStoreMetadata(ctx, id)
		switch {
		case rerr == nil && got.Claim != nil && *got.Claim != mine:
			return o.taken(ctx, id, "has the _metadata of", *got.Claim)
		case o.storedAs(ctx, key, filepath.Join(dir, MetadataFile), sent):
			return nil // created: the store's answer was lost
		}
		return cerr
	}
	got, rerr := o.readStoreMetadata(ctx, id)
	switch {
	case rerr == nil && got.Claim != nil && *got.Claim == mine:
		return nil // created: the store's answer was lost
	case !errors.Is(cerr, fs.ErrExist):
		return cerr
	case rerr != nil:
		return fmt.Errorf("checkpoint: unit %s: chk-%d/%s exists and cannot be read back: %w", o.ns.Prefix, id, MetadataFile, rerr)
	}
	var other ClaimMarker
	if got.Claim != nil {
		other = *got.Claim
	}
	return o.taken(ctx, id, "has the _metadata of", other)
}

// Checkpoint completes checkpoint id of the unit: pre-commit, upload
// (when the Namespace has Local: the owner marker first when one is
// needed, see upload), create HEAD-<seq+1> naming it (and, with Local,
// this owner's claim as CheckpointClaim, or as MetadataClaim when the
// _metadata is the marker), then commit. A chk-<id> another claim marked
// (or wrote the _metadata of) fails it before anything else is written
// into it: with an error wrapping ErrHeadExists
// when a HEAD above this owner's exists (a zombie; fenced from then on),
// else ErrForeignClaim. Every checkpoint writes its HEAD, even when every transaction is
// empty (franz-go's EndTransaction returns nil when nothing was produced,
// so an empty epoch would otherwise let a zombie commit unnoticed). When
// the HEAD exists the unit has another owner: Checkpoint returns an error
// wrapping ErrHeadExists without committing anything; the owner is then
// dead for good (Retain deletes nothing). When the HEAD's create fails
// otherwise, Checkpoint reads the HEAD back: one that holds exactly what
// it wrote counts as created (the store's answer was lost). Retention is
// not part of it: the caller runs Retain once the commits finished.
func (o *Owner) Checkpoint(ctx context.Context, id int64, steps UnitCommit) error {
	if o.seq == 0 {
		return fmt.Errorf("checkpoint: unit %s: %w (fenced earlier)", o.ns.Prefix, ErrHeadExists)
	}
	if steps.PreCommit != nil {
		if err := steps.PreCommit(); err != nil {
			return err
		}
	}
	metadataClaim := false
	if o.ns.Local != nil {
		var err error
		if metadataClaim, err = o.upload(ctx, id); err != nil {
			return err
		}
	}
	if steps.Upload != nil {
		if err := steps.Upload(); err != nil {
			return err
		}
	}
	hd := Head{Seq: o.seq + 1, CheckpointID: id, Owner: o.member, Fingerprint: o.fingerprint, Units: o.units, Token: o.token}
	switch {
	case metadataClaim:
		hd.MetadataClaim = o.claimSeq // chk-<id>/_metadata names it
	case o.ns.Local != nil:
		hd.CheckpointClaim = o.claimSeq // upload marked chk-<id> with it
	}
	if err := o.createHead(ctx, &hd); err != nil {
		return err
	}
	o.seq = hd.Seq
	o.chain[hd.Seq] = id
	clear(o.inflight) // named by this HEAD now, or orphans of a failed attempt for retention
	if steps.Commit != nil {
		return steps.Commit()
	}
	return nil
}

// createHead creates the checkpoint HEAD hd (hd.Seq is o.seq+1). When the
// outcome of the create is unknown (an error, and "exists" too: an S3
// client's retry of a PUT whose answer was lost gets 412) it reads
// HEAD-<k> back: exactly hd means created; another HEAD of this owner (its
// token: an earlier checkpoint whose create this owner took for failed,
// which names a checkpoint it uploaded whole and whose transactions the
// next commit commits with this one's) is adopted into the chain and hd
// moves to the next number; only a HEAD of another claim means takeover:
// an error wrapping ErrHeadExists, and the owner is fenced. A HEAD that
// cannot be read back leaves the outcome unknown: the create's error is
// returned and the owner stays where it was (the next checkpoint finds
// out).
func (o *Owner) createHead(ctx context.Context, hd *Head) error {
	heads := o.ns.Heads()
	for {
		err := heads.Create(ctx, *hd)
		if err == nil {
			return nil
		}
		got, rerr := heads.Read(ctx, hd.Seq)
		switch {
		case rerr == nil && got == *hd:
			o.ns.resolved(HeadOwn)
			return nil
		case rerr == nil && o.own(got):
			o.ns.resolved(HeadAdopted)
			o.seq = got.Seq
			o.chain[got.Seq] = got.CheckpointID
			hd.Seq = got.Seq + 1
			continue
		case rerr == nil:
			o.ns.resolved(HeadOther)
			o.seq = 0
			return fmt.Errorf("checkpoint: unit %s: HEAD-%d is member %s's (claim %t, checkpoint %d), not this owner's (claim HEAD-%d): %w",
				o.ns.Prefix, got.Seq, got.Owner, got.Claim, got.CheckpointID, o.claimSeq, ErrHeadExists)
		default:
			o.ns.resolved(HeadUnknown)
			return err
		}
	}
}

// stages reports whether the owner's checkpoints are staged in a local
// Storage (Namespace.Local) and uploaded to the store: the staging copy is
// then no durable copy (the unit's start wipes it; a restore downloads
// from the store), so its files are written without fsync
// (runtime.Barrier.Staging).
func (o *Owner) stages() bool { return o.ns.Local != nil }

// own reports whether hd was written by this owner: a checkpoint HEAD
// carrying this owner's token.
func (o *Owner) own(hd Head) bool { return o.token != "" && hd.Token == o.token && !hd.Claim }

// newToken returns a random Head.Token (16 hex digits).
func newToken() string {
	var r [8]byte
	_, _ = rand.Read(r[:])
	return hex.EncodeToString(r[:])
}

// Retain applies retention inside the unit's namespace only, once the
// Kafka commits of the checkpoint of HEAD-<from> (one this owner created)
// finished (step 5 of invariant 1): walking the HEADs down from HEAD-<from>, it keeps
// the newest `retained` distinct checkpoints they name and the HEADs from
// the oldest one naming a kept checkpoint on; it deletes the older HEADs,
// every chk-<id> older than the newest kept one and not kept (an
// unfinished or another owner's chk-<id> newer than it stays), and every
// shared file in the namespace that no kept checkpoint refers to, nor a
// checkpoint of a HEAD above HEAD-<from> (this owner's newer ones), nor
// this owner's uploads since its last HEAD (a checkpoint in flight that
// failed after its shared uploads: the next one may name them without
// uploading them again). So a zombie's uploads after the claim, which no
// HEAD ever names, are deleted too. The namespace is listed before the
// HEAD chain is checked, so a new owner that claims after the check
// uploads nothing this retention deletes. A fenced owner, or one that
// finds a HEAD newer than its own, deletes nothing; the latter returns an
// error wrapping ErrHeadExists and is fenced from then on.
func (o *Owner) Retain(ctx context.Context, from int64) error {
	if o.seq == 0 || from <= 0 || from > o.seq {
		return nil
	}
	var listed []string
	if o.ns.Local != nil {
		keys, err := o.ns.Store.List(ctx, o.ns.Prefix)
		if err != nil {
			return err
		}
		listed = keys
	}
	remoteListed, err := o.listRemote()
	if err != nil {
		return err
	}
	heads := o.ns.Heads()
	seqs, err := heads.seqs(ctx)
	if err != nil {
		return err
	}
	if n := len(seqs); n == 0 || seqs[n-1] != o.seq {
		newest := int64(0)
		if n > 0 {
			newest = seqs[n-1]
		}
		if newest > o.seq {
			// This owner's own HEADs whose create it took for failed
			// (answers lost) are no takeover: the next checkpoint adopts
			// them; retention waits for it.
			mine := true
			for _, k := range seqs {
				if k > o.seq {
					hd, err := heads.Read(ctx, k)
					if err != nil {
						return err
					}
					mine = mine && o.own(hd)
				}
			}
			if mine {
				return nil
			}
		}
		o.seq = 0
		return fmt.Errorf("checkpoint: unit %s: retention found HEAD-%d above this owner's: %w", o.ns.Prefix, newest, ErrHeadExists)
	}
	kept := map[int64]bool{}
	keepFrom := from
	for k := from; k >= 1; k-- {
		id, ok := o.chain[k]
		if !ok {
			if !slices.Contains(seqs, k) {
				break // the chain below was purged earlier
			}
			hd, err := heads.Read(ctx, k)
			if err != nil {
				return err
			}
			id, o.chain[k] = hd.CheckpointID, hd.CheckpointID
		}
		if !kept[id] && len(kept) == o.retained { // id 0: a claim of no checkpoint
			break
		}
		if id > 0 {
			kept[id] = true
		}
		keepFrom = k
	}
	for k := range o.chain {
		if k < keepFrom {
			delete(o.chain, k)
		}
	}
	if err := heads.purgeListed(ctx, seqs, keepFrom); err != nil { // no second listing of the HEADs
		return err
	}
	if o.ns.Local == nil || len(kept) == 0 {
		return nil
	}
	newestKept := slices.Max(slices.Collect(maps.Keys(kept)))
	// Checkpoints whose shared files stay: the kept ones and those of this
	// owner's HEADs above HEAD-<from> (their commits may still run).
	named := maps.Clone(kept)
	for k, id := range o.chain {
		if k > from && id > 0 {
			named[id] = true
		}
	}
	referenced := map[string]bool{}
	for id := range o.sharedOf {
		if !named[id] {
			delete(o.sharedOf, id)
		}
	}
	for id := range named {
		files, ok := o.sharedOf[id]
		if !ok {
			o.metaReads++
			b, err := o.ns.Store.Read(ctx, o.ns.chkKey(id, MetadataFile))
			if err != nil {
				return err // never delete shared files on a partial view
			}
			var m Metadata
			if err := json.Unmarshal(b, &m); err != nil {
				return fmt.Errorf("checkpoint: unit %s: chk-%d/%s: %w", o.ns.Prefix, id, MetadataFile, err)
			}
			files = m.SharedFiles
			o.sharedOf[id] = files // immutable: written create-only
		}
		for _, f := range files {
			referenced[f] = true
		}
	}
	if err := o.collectRemote(remoteListed, referenced); err != nil {
		return err
	}
	var del []string
	inStore := map[string]bool{}
	for _, k := range listed {
		rel := strings.TrimPrefix(k, o.ns.Prefix)
		if f, ok := strings.CutPrefix(rel, "shared/"); ok {
			inStore[f] = true
			if !referenced[f] && !o.inflight[f] {
				del = append(del, k)
				delete(o.known, f)
			}
			continue
		}
		dir, _, _ := strings.Cut(rel, "/")
		if id, ok := parseChkName(dir); ok && id < newestKept && !kept[id] {
			del = append(del, k)
		}
	}
	for f := range o.known {
		if !inStore[f] && !o.inflight[f] {
			delete(o.known, f) // gone from the store: upload it again when named
		}
	}
	if len(del) == 0 {
		return nil
	}
	slices.Sort(del)
	return o.ns.Store.Delete(ctx, del...)
}

// Seq returns the last HEAD sequence this owner created, 0 once fenced.
func (o *Owner) Seq() int64 { return o.seq }
