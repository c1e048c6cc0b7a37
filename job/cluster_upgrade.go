package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/graph"
)

// ErrIncompatibleUpgrade is wrapped by the error (an *UpgradeError) that
// refuses to restore a cluster-mode job's HEADs written by another graph
// whose state this graph cannot restore (docs/scale-out.md, "Upgrades").
// It is an ErrIncompatibleState too: no restart cures it.
var ErrIncompatibleUpgrade = errors.New("job: the graph cannot restore the state the store's HEADs record")

// ElectedByUpgrade is the GraphElection.By of a graph elected as a
// state-compatible upgrade of the graph the store's HEADs record: every
// member reporting it (unitsJoin.Upgrades) read the store's graph and
// checked that its own graph restores that state.
const ElectedByUpgrade = "upgrade"

// GraphRecord is the content of GraphRecordKey(job, fingerprint) in a
// cluster's store (JSON): the state layout of a graph that ran the job and
// when a daemon first ran it. A daemon creates its graph's record
// (create-only, never rewritten) before it joins, so that a later daemon
// with another graph can check, per vertex uid, whether it restores the
// HEADs this one writes, and name what changed when it does not.
type GraphRecord struct {
	Fingerprint string            `json:"fingerprint"`
	RecordedAt  time.Time         `json:"recorded_at"`
	Layout      graph.StateLayout `json:"layout"`
}

// GraphRecordKey returns the store key of a graph's record:
// "<job>/graphs/<fingerprint>.json".
func GraphRecordKey(job, fingerprint string) string {
	return job + "/graphs/" + fingerprint + ".json"
}

// RecordGraph returns the record of st's graph in store, creating it
// (RecordedAt now) when the store has none yet. A create whose outcome is
// unknown (an error) is read back: a record there is the answer.
func RecordGraph(ctx context.Context, store checkpoint.Store, st *graph.Stages) (GraphRecord, error) {
	if rec, ok, err := ReadGraphRecord(ctx, store, st.Job, st.Fingerprint); err != nil || ok {
		return rec, err
	}
	rec := GraphRecord{Fingerprint: st.Fingerprint, RecordedAt: time.Now().UTC(), Layout: graph.LayoutOf(st)}
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return GraphRecord{}, fmt.Errorf("job: graph record: %w", err)
	}
	cerr := store.Create(ctx, GraphRecordKey(st.Job, st.Fingerprint), data)
	// Created, or another daemon of this graph created it first, or the
	// create's answer was lost (an S3 retry's 412): read it back.
	rec, ok, err := ReadGraphRecord(ctx, store, st.Job, st.Fingerprint)
	switch {
	case err == nil && ok:
		return rec, nil
	case cerr != nil && !errors.Is(cerr, fs.ErrExist):
		return GraphRecord{}, fmt.Errorf("job: record graph %.12s in %s: %w", st.Fingerprint, store, cerr)
	case err == nil:
		err = fmt.Errorf("job: graph record %s in %s: missing right after its create", GraphRecordKey(st.Job, st.Fingerprint), store)
	}
	return GraphRecord{}, err
}

// ReadGraphRecord reads the record of graph fingerprint of job; ok false
// when the store has none (a graph that ran before records were written).
func ReadGraphRecord(ctx context.Context, store checkpoint.Store, job, fingerprint string) (rec GraphRecord, ok bool, err error) {
	key := GraphRecordKey(job, fingerprint)
	data, err := store.Read(ctx, key)
	if errors.Is(err, fs.ErrNotExist) {
		return GraphRecord{}, false, nil
	}
	if err != nil {
		return GraphRecord{}, false, fmt.Errorf("job: read graph record %s in %s: %w", key, store, err)
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		return GraphRecord{}, false, fmt.Errorf("job: graph record %s in %s: %w", key, store, err)
	}
	return rec, true, nil
}

// UpgradeError refuses to restore HEADs written by graph From with graph To
// (ErrIncompatibleUpgrade): the state-incompatible changes (Problems), or
// why none could be checked (Why: From was never recorded, or To is an
// earlier graph of the job than From).
type UpgradeError struct {
	From, To string
	Problems []graph.UpgradeProblem
	Why      string
}

// Error names both graphs, every change (the vertex and what about it) and
// the way forward: a savepoint.
func (e *UpgradeError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the store's HEADs were written by graph %.12s, whose state graph %.12s cannot restore: ", e.From, e.To)
	if e.Why != "" {
		b.WriteString(e.Why)
	}
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(p.String())
	}
	b.WriteString("; to change the graph anyway, take a savepoint of the running job (kstreamd savepoint, or stop with savepoint) and start the new graph from it (kstreamd run --from-savepoint DIR): docs/scale-out.md, \"Upgrades\"")
	return b.String()
}

// Is reports whether target is ErrIncompatibleUpgrade or
// ErrIncompatibleState.
func (e *UpgradeError) Is(target error) bool {
	return target == ErrIncompatibleUpgrade || target == ErrIncompatibleState
}

// upgradeCheck decides whether this daemon's graph restores the HEADs
// another graph wrote (its record in the store): same graph, or a
// compatible layout (graph.CheckUpgrade) of a graph recorded no later than
// this one. Verdicts are cached by fingerprint. Safe for concurrent use.
type upgradeCheck struct {
	store        checkpoint.Store
	own          GraphRecord
	allowRemoved bool
	mu           sync.Mutex
	verdicts     map[string]error
}

// newUpgradeCheck records st's graph in set.Store (RecordGraph) and
// returns its check.
func newUpgradeCheck(ctx context.Context, set Settings, st *graph.Stages) (*upgradeCheck, error) {
	own, err := RecordGraph(ctx, set.Store, st)
	if err != nil {
		return nil, err
	}
	return &upgradeCheck{store: set.Store, own: own, allowRemoved: set.AllowNonRestoredState, verdicts: map[string]error{}}, nil
}

// restores returns nil when this graph restores the state HEADs of graph
// fingerprint hold, else an *UpgradeError (or the store's error, not
// cached).
func (u *upgradeCheck) restores(ctx context.Context, fingerprint string) error {
	if fingerprint == "" || fingerprint == u.own.Fingerprint {
		return nil
	}
	u.mu.Lock()
	err, ok := u.verdicts[fingerprint]
	u.mu.Unlock()
	if ok {
		return err
	}
	rec, found, err := ReadGraphRecord(ctx, u.store, u.own.Layout.Job, fingerprint)
	if err != nil {
		return err
	}
	e := &UpgradeError{From: fingerprint, To: u.own.Fingerprint}
	switch {
	case !found:
		e.Why = fmt.Sprintf("graph %.12s has no record in %s (%s: it ran with a version that did not record graphs; starting the daemons once with this version and the old pipeline file records it)",
			fingerprint, u.store, GraphRecordKey(u.own.Layout.Job, fingerprint))
	case rec.RecordedAt.After(u.own.RecordedAt):
		e.Why = fmt.Sprintf("graph %.12s first ran at %s, after this daemon's graph (%s): going back to an earlier graph is not an upgrade",
			fingerprint, rec.RecordedAt.Format(time.RFC3339), u.own.RecordedAt.Format(time.RFC3339))
	default:
		e.Problems = graph.CheckUpgrade(rec.Layout, u.own.Layout, u.allowRemoved)
	}
	err = nil
	if e.Why != "" || len(e.Problems) > 0 {
		err = e
	}
	u.mu.Lock()
	u.verdicts[fingerprint] = err
	u.mu.Unlock()
	return err
}

// storedGraphVerdict checks this daemon's graph against the graph the
// store's HEADs record (stored, read before joining): it returns the
// fingerprint this graph is a compatible upgrade of (unitsJoin.Upgrades;
// "" when the graphs are equal or the store holds none) and, when it
// cannot restore them, why the member gets no units. An error is the
// store's.
func (u *upgradeCheck) storedGraphVerdict(ctx context.Context, stored storedGraph, store checkpoint.Store, logger *slog.Logger) (upgrades, excluded string, err error) {
	fp := stored.hd.Fingerprint
	if fp == "" || fp == u.own.Fingerprint {
		return "", "", nil
	}
	err = u.restores(ctx, fp)
	var ue *UpgradeError
	if errors.As(err, &ue) {
		return "", fmt.Sprintf("this daemon runs graph %.12s, the store's HEADs record graph %.12s (HEAD-%d of %s in %s): it gets no units: %s",
			u.own.Fingerprint, fp, stored.hd.Seq, stored.prefix, store, ue.Error()), nil
	}
	if err != nil {
		return "", "", err
	}
	logger.Info("upgrade: the store's HEADs record another graph whose state this graph restores", "store_graph", fp[:min(12, len(fp))],
		"graph", u.own.Fingerprint[:min(12, len(u.own.Fingerprint))], "head", stored.hd.Seq, "namespace", stored.prefix)
	return fp, "", nil
}

// upgradeElection is the election's upgrade rule (UnitBalancer): when the
// store's graph e was elected and members report a graph that is a
// compatible upgrade of it (unitsJoin.Upgrades), the upgrade wins, so that
// during a rolling upgrade the units run the new graph only (never the old
// one restoring the new one's HEADs): the upgrade reported by the most
// members, ties the leader's (leader), then the smallest fingerprint.
func upgradeElection(all []balanceMember, e GraphElection, leader string) GraphElection {
	votes := map[string]int{}
	for _, m := range all {
		if m.join.Upgrades == e.Fingerprint && m.join.Fingerprint != e.Fingerprint {
			votes[m.join.Fingerprint]++
		}
	}
	best := ""
	for fp, n := range votes {
		switch {
		case best == "", n > votes[best]:
			best = fp
		case n < votes[best]:
		case fp == leader, best != leader && fp < best:
			best = fp
		}
	}
	if best == "" {
		return e
	}
	return GraphElection{Fingerprint: best, By: ElectedByUpgrade}
}
