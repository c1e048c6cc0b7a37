package state

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// ingestPiece is one clipped table of a restore: the external file to
// ingest and where the table was in its snapshot's LSM.
type ingestPiece struct {
	ef    pebble.ExternalFile
	level int
	seq   uint64
}

// ingestRemote ingests the tables of the snapshots into st's fresh DB by
// reference, each clipped to the key groups both cfg and its snapshot own
// (a snapshot is authoritative for its own key groups only: a local one's
// tables may hold range deletions of the others, which must not reach
// the state another snapshot restores), plus the metadata space.
//
// Every ingestion gets a sequence number above all earlier ones, so the
// order makes newer data shadow older: the key-group pieces of all
// snapshots level by level, deepest first, each level (L1-L6) in one
// ingestion (a level's tables do not overlap, and snapshots own disjoint
// key groups), then L0 oldest first, consecutive tables with disjoint
// keys together (l0Batches); then each
// snapshot's metadata pieces one at a time in the same order. Fewer
// ingestions mean fewer MANIFEST syncs: a restore costs about one per
// level instead of one per table. The instance's reference markers on
// the objects are written first (one reference list).
//
// sched, when not nil, holds the DB's compactions; it is released before
// the replay when the replay could wait for one (replayMayStall).
func ingestRemote(st *pebbleStore, cfg BackendConfig, handles []RestoreHandle, hs []keyedHandle, sched *restoreScheduler) (restorePhases, error) {
	var ph restorePhases
	t0 := time.Now()
	r := st.remote
	storeDir, err := filepath.Abs(r.dir)
	if err != nil {
		return ph, err
	}
	// The delta objects of delta checkpoints are resolved (referenced,
	// or copied into the store) with the tables: after them in each
	// snapshot's list.
	withDeltas := slices.Clone(hs)
	for i := range withDeltas {
		withDeltas[i].Files = append(slices.Clip(hs[i].Files), hs[i].Deltas...)
	}
	names, err := r.objectsFor(handles, withDeltas, storeDir)
	if err != nil {
		return ph, err
	}
	ph.markers = time.Since(t0)
	t0 = time.Now()
	for i, h := range hs {
		for j, f := range h.Files {
			r.knowSize(names[i][j], f.Size) // the next snapshot asks the store for none of them
		}
	}
	var data []ingestPiece
	meta := make([][]ingestPiece, len(hs))
	for i, h := range hs {
		own := cfg.KeyGroupRange.Intersect(h.KeyGroups)
		lo, hi := kgBound(own.Start), kgBound(own.End+1)
		if own.Len() <= 0 {
			lo, hi = keyGroupsStart, keyGroupsStart // the metadata only
		}
		// A single snapshot that is restored up to its last key group
		// has no key between its key-group pieces and the metadata space
		// (a state key starts with its key group, below the snapshot's
		// maximum parallelism): each table is one piece reaching into the
		// metadata space, in the same order as the metadata pieces would
		// be ingested, instead of a data piece plus a metadata piece
		// ingested on its own.
		joined := len(hs) == 1 && own.Len() > 0 && h.MaxParallelism > 0 && own.End+1 >= h.MaxParallelism
		if joined {
			hi = nil
		}
		for j, f := range h.Files {
			if ef, ok := clipExternal(f, lo, hi); ok {
				ef.ObjName = names[i][j]
				data = append(data, ingestPiece{ef: ef, level: f.Level, seq: f.Seq})
			}
			if joined {
				continue
			}
			if ef, ok := clipExternal(f, keyGroupsEnd, nil); ok {
				ef.ObjName = names[i][j]
				meta[i] = append(meta[i], ingestPiece{ef: ef, level: f.Level, seq: f.Seq})
			}
		}
	}
	known := map[uint64]bool{}
	ingest := func(batch []ingestPiece, into *time.Duration) error {
		ph.ingestions++
		ph.tables += len(batch)
		efs := make([]pebble.ExternalFile, len(batch))
		for k, p := range batch {
			efs[k] = p.ef
		}
		r.ingestions.Add(1)
		t := time.Now()
		if _, err := st.db.IngestExternalFiles(context.Background(), efs); err != nil {
			return fmt.Errorf("state: restore: ingest %s: %w", efs[0].ObjName, err)
		}
		d := time.Since(t)
		*into += d
		if d > ph.slowest {
			ph.slowest, ph.slowestLevel, ph.slowestPieces = d, batch[0].level, len(batch)
		}
		t = time.Now()
		err := r.learnExternal(st.db, known, efs)
		ph.learn += time.Since(t)
		return err
	}
	for _, batch := range ingestBatches(data) {
		into := &ph.ingestLevels
		if batch[0].level == 0 {
			into = &ph.ingestL0
		}
		if err := ingest(batch, into); err != nil {
			return ph, err
		}
	}
	for _, m := range meta {
		for _, p := range ingestOrder(m) {
			if err := ingest([]ingestPiece{p}, &ph.ingestMeta); err != nil {
				return ph, err
			}
		}
	}
	ph.ingest = time.Since(t0)
	t0 = time.Now()
	// Then each snapshot's deltas, oldest first, each once: committed
	// after every ingestion, they shadow the base's tables (and their
	// merge operands follow the base's), clipped to the key groups both
	// own plus the metadata space, as the tables are; all of them in one
	// batch (deltaReplay).
	var deltaBytes int64
	for _, h := range hs {
		for _, f := range h.Deltas {
			deltaBytes += f.Size
		}
	}
	if sched != nil && replayMayStall(ph.ingestions, deltaBytes, cfg.L0CompactionThreshold) {
		sched.release()
	}
	rp := newDeltaReplay(st.db, deltaBytes, &r.deltaCommits)
	for i, h := range hs {
		own := cfg.KeyGroupRange.Intersect(h.KeyGroups)
		lo, hi := kgBound(own.Start), kgBound(own.End+1)
		if own.Len() <= 0 {
			lo, hi = keyGroupsStart, keyGroupsStart
		}
		whole := own == h.KeyGroups
		for j, f := range h.Deltas {
			data, err := r.readDelta(names[i][len(h.Files)+j], f.Size)
			if err != nil {
				rp.abort()
				return ph, err
			}
			rp.objects++
			if err := rp.add(data, lo, hi, whole); err != nil {
				rp.abort()
				return ph, fmt.Errorf("state: restore: delta %s: %w", f.Name, err)
			}
		}
	}
	err = rp.close()
	ph.deltas, ph.deltaBytes, ph.replay = rp.objects, deltaBytes, time.Since(t0)
	return ph, err
}

// replayMayStall reports whether a replay of deltaBytes after ingestions
// ingestions could meet Pebble's L0 stop-writes threshold of a backend
// with L0 compaction threshold l0Threshold (BackendConfig's), and so wait
// for a compaction. Pebble checks it only before it rotates the memtable;
// a memtable starts at 256 KiB, so the replay rotates at most once per
// 256 KiB (and once more), each rotation's flush adds at most one L0
// sublevel, and each ingestion added at most one (its files do not
// overlap one another).
func replayMayStall(ingestions int, deltaBytes int64, l0Threshold int) bool {
	if deltaBytes <= 0 {
		return false // nothing to commit
	}
	var o pebble.Options
	setL0Thresholds(&o, l0Threshold)
	rotations := deltaBytes/(256<<10) + 2
	return int64(ingestions)+rotations >= int64(o.L0StopWritesThreshold)
}

// restorePhases is where a disaggregated restore's time went (logged by
// openRemoteRestored): the reference markers (objectsFor), the
// ingestions of the base tables by reference, the replay of the delta
// objects.
type restorePhases struct {
	markers, ingest, replay time.Duration
	// ingestions and tables count the ingestions and the pieces they
	// ingested; deltas and deltaBytes the delta objects replayed.
	ingestions, tables, deltas int
	deltaBytes                 int64
	// ingestLevels, ingestL0 and ingestMeta split the time inside
	// Pebble's IngestExternalFiles by what was ingested: the batches of
	// L1-L6 pieces, the L0 runs, the metadata pieces ingested on their
	// own; learn is the listing of the new external tables after each
	// ingestion (learnExternal). slowest is the longest single
	// ingestion, slowestLevel its pieces' level and slowestPieces their
	// count. Where a restore's time grows with the table count.
	ingestLevels, ingestL0, ingestMeta, learn, slowest time.Duration
	slowestLevel, slowestPieces                        int
}

// ingestOrder sorts pieces deepest level first, L0 (and any level) by
// sequence number.
func ingestOrder(ps []ingestPiece) []ingestPiece {
	ps = slices.Clone(ps)
	sort.SliceStable(ps, func(a, b int) bool {
		if ps[a].level != ps[b].level {
			return ps[a].level > ps[b].level
		}
		return ps[a].seq < ps[b].seq
	})
	return ps
}

// ingestBatches splits pieces into ingestions in ingestOrder: the pieces
// of one level above L0 together, sorted by start key, as long as they
// neither overlap nor repeat an object (else a new ingestion starts);
// L0 pieces in runs of disjoint ones (l0Batches).
func ingestBatches(ps []ingestPiece) [][]ingestPiece {
	var out [][]ingestPiece
	ordered := ingestOrder(ps)
	for i := 0; i < len(ordered); {
		lvl := ordered[i].level
		j := i + 1
		for j < len(ordered) && ordered[j].level == lvl {
			j++
		}
		level := ordered[i:j]
		i = j
		if lvl == 0 {
			out = append(out, l0Batches(level)...)
			continue
		}
		level = slices.Clone(level)
		sort.SliceStable(level, func(a, b int) bool { return bytes.Compare(level[a].ef.StartKey, level[b].ef.StartKey) < 0 })
		var cur []ingestPiece
		objs := map[string]bool{}
		for _, p := range level {
			if len(cur) > 0 && (objs[p.ef.ObjName] || overlaps(cur[len(cur)-1].ef, p.ef)) {
				out = append(out, cur)
				cur, objs = nil, map[string]bool{}
			}
			cur = append(cur, p)
			objs[p.ef.ObjName] = true
		}
		if len(cur) > 0 {
			out = append(out, cur)
		}
	}
	return out
}

// l0Batches splits L0 pieces, oldest first, into ingestions: each a run
// of consecutive pieces that overlap none of the run's others and repeat
// no object (sorted by start key), so every piece whose keys overlap an
// older one's is still ingested after it (its sequence number above the
// older one's); pieces with disjoint keys need no order among them. The
// two halves of a rescaled state (disjoint key groups) and a flush split
// into several tables restore in one ingestion per L0 sublevel instead
// of one per table.
func l0Batches(level []ingestPiece) [][]ingestPiece {
	var out [][]ingestPiece
	var cur []ingestPiece
	objs := map[string]bool{}
	flush := func() {
		if len(cur) == 0 {
			return
		}
		sort.SliceStable(cur, func(a, b int) bool { return bytes.Compare(cur[a].ef.StartKey, cur[b].ef.StartKey) < 0 })
		out = append(out, cur)
		cur, objs = nil, map[string]bool{}
	}
	for _, p := range level {
		clash := objs[p.ef.ObjName]
		for _, q := range cur {
			if clash {
				break
			}
			a, b := q.ef, p.ef
			if bytes.Compare(b.StartKey, a.StartKey) < 0 {
				a, b = b, a
			}
			clash = overlaps(a, b)
		}
		if clash {
			flush()
		}
		cur = append(cur, p)
		objs[p.ef.ObjName] = true
	}
	flush()
	return out
}

// overlaps reports whether b, starting at or after a's start, begins
// before a ends.
func overlaps(a, b pebble.ExternalFile) bool {
	c := bytes.Compare(b.StartKey, a.EndKey)
	return c < 0 || (c == 0 && a.EndKeyIsInclusive)
}

// objectsFor returns the object of every file of the snapshots (by
// snapshot and file index) after taking this instance's reference on it:
// files in the store are referenced (one reference list for all,
// referenceAll), other files (a savepoint's, a local snapshot's) are copied into the
// store, each once.
func (r *remoteObjects) objectsFor(handles []RestoreHandle, hs []keyedHandle, storeDir string) ([][]string, error) {
	names := make([][]string, len(hs))
	srcs := map[string]string{} // absolute source path -> object name
	var order []string
	for i, h := range hs {
		names[i] = make([]string, len(h.Files))
		for j, f := range h.Files {
			src := filepath.Join(handles[i].Dir, filepath.FromSlash(f.Path))
			if f.Shared {
				src = filepath.Join(handles[i].SharedDir, filepath.FromSlash(f.Path))
			}
			abs, err := filepath.Abs(src)
			if err != nil {
				return nil, err
			}
			if _, ok := srcs[abs]; !ok {
				srcs[abs] = ""
				order = append(order, abs)
			}
			names[i][j] = abs // replaced below
		}
	}
	imported := map[string]string{}
	var inStore []string
	for _, abs := range order {
		if filepath.Dir(abs) == storeDir {
			inStore = append(inStore, abs)
			continue
		}
		name, err := r.objectFor(abs, storeDir, imported)
		if err != nil {
			return nil, fmt.Errorf("state: restore %s: %w", abs, err)
		}
		srcs[abs] = name
	}
	// The objects in the store get this instance's reference in one
	// reference list (referenceAll), not a marker object each. No Size
	// (a stat, or a HEAD on S3) per object: a job's restore checked every
	// object's existence and size before (checkpoint.Verify), and the
	// table's size is in the handle.
	objs := make([]string, len(inStore))
	for k, abs := range inStore {
		objs[k] = filepath.Base(abs)
		srcs[abs] = objs[k]
	}
	if err := r.referenceAll(objs); err != nil {
		return nil, fmt.Errorf("state: restore: %w", err)
	}
	for i := range names {
		for j, abs := range names[i] {
			names[i][j] = srcs[abs]
		}
	}
	return names, nil
}

// learnExternal records the objects of the external tables an ingestion
// of efs just added: each backing file number not known before belongs
// to the file whose bounds hold the table's smallest key (the files of
// one ingestion do not overlap).
func (r *remoteObjects) learnExternal(db *pebble.DB, known map[uint64]bool, efs []pebble.ExternalFile) error {
	levels, err := db.SSTables()
	if err != nil {
		return fmt.Errorf("state: restore: list tables: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, tables := range levels {
		for _, ti := range tables {
			n := uint64(ti.BackingSSTNum)
			if ti.BackingType != pebble.BackingTypeExternal || known[n] {
				continue
			}
			name := ""
			for _, ef := range efs {
				k := ti.Smallest.UserKey
				if c := bytes.Compare(k, ef.EndKey); bytes.Compare(k, ef.StartKey) >= 0 && (c < 0 || c == 0 && ef.EndKeyIsInclusive) {
					name = ef.ObjName
					break
				}
			}
			if name == "" {
				return fmt.Errorf("state: restore: external table %s (smallest key %q) matches none of the ingested files", ti.FileNum, ti.Smallest.UserKey)
			}
			known[n] = true
			r.extNames[n] = name
		}
	}
	return nil
}

// logMs is d in milliseconds with a fraction (log fields).
func logMs(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
