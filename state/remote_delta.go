package state

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/batchrepr"
)

// Delta checkpoints of a disaggregated backend (REMOTE.md, "Delta
// checkpoints"), in the manner of Flink's changelog state backend
// (FLIP-158: a periodic materialization plus the changes since). A base
// checkpoint flushes the memtable and lists the LSM's tables (the store's
// objects); a delta checkpoint after it does not flush Pebble: it names
// the same base tables plus, in order, delta objects holding every batch
// the backend committed to Pebble since the base. A restore ingests the
// base tables by reference and applies the deltas once each, in order.
//
// Every commit of the backend goes through pebbleStore.commit, which
// appends the batch's representation to the deltaLog under the same lock
// the snapshot holds while it flushes and lists the tables (a base) or
// cuts the log (a delta): no commit falls between a flush and the list
// of tables it produced, nor between two deltas.

// DefaultMaxDeltaCheckpoints is the default of
// RemoteConfig.MaxDeltaCheckpoints: at most 8 delta checkpoints follow a
// base checkpoint.
const DefaultMaxDeltaCheckpoints = 8

// DefaultMaxDeltaBytes is the default of RemoteConfig.MaxDeltaBytes
// (64 MiB): a chain of delta objects larger than this (or a log of
// changes since the last checkpoint that would pass it) makes the next
// checkpoint a base.
const DefaultMaxDeltaBytes = 64 << 20

// deltaMagic starts every delta object; a CRC-32C (Castagnoli) of all
// bytes before it ends it. In between: records, each a uvarint length and
// a Pebble batch representation (its header's sequence number is not
// used: a restore commits the batch anew).
const deltaMagic = "kstreamd-delta-v1\n"

var deltaCRC = crc32.MakeTable(crc32.Castagnoli)

// deltaLog is the log of commits of one disaggregated instance since its
// last checkpoint, and the chain of delta objects since its last base.
type deltaLog struct {
	mu sync.Mutex
	// maxDeltas and maxBytes are the RemoteConfig limits (resolved).
	maxDeltas int
	maxBytes  int64
	// recording is set once a base checkpoint exists: commits are then
	// appended to buf (magic first, then records).
	recording bool
	buf       []byte
	// overflow is set when buf would have passed maxBytes: the log stops
	// and the next checkpoint is a base.
	overflow bool
	// needBase makes the next checkpoint a base (after a savepoint, whose
	// listing replaced the base's hold).
	needBase bool
	// base holds the base checkpoint's tables and their object names;
	// chain the delta objects since, oldest first.
	base      []fileRef
	baseNames []string
	chain     []*deltaObject
	chainSize int64
	// next numbers the instance's delta objects.
	next int
}

// deltaObject is one delta object of the chain.
type deltaObject struct {
	name string
	// data is the object's bytes until written (then nil); size its
	// length with the CRC.
	data []byte
	size int64
	// written is set when the checkpoint's asynchronous part stored it;
	// a chain with an unwritten object (a failed or cancelled
	// checkpoint) is not continued.
	written atomic.Bool
}

func newDeltaLog(cfg *RemoteConfig) *deltaLog {
	d := &deltaLog{maxDeltas: cfg.MaxDeltaCheckpoints, maxBytes: cfg.MaxDeltaBytes}
	if d.maxDeltas == 0 {
		d.maxDeltas = DefaultMaxDeltaCheckpoints
	}
	if d.maxBytes <= 0 {
		d.maxBytes = DefaultMaxDeltaBytes
	}
	return d
}

// commit commits b (every write of the backend comes here); on a
// disaggregated instance recording deltas, b's representation is appended
// to the delta log atomically with the commit.
func (s *pebbleStore) commit(b *pebble.Batch, o *pebble.WriteOptions) error {
	if err := s.settle(); err != nil {
		return err
	}
	d := s.delta
	if d == nil {
		return b.Commit(o)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.commitLocked(b, o)
}

// commitLocked is commit with d.mu held.
func (d *deltaLog) commitLocked(b *pebble.Batch, o *pebble.WriteOptions) error {
	if !d.recording || d.overflow || b.Empty() {
		return b.Commit(o)
	}
	// The representation is copied before the commit: a large batch
	// becomes Pebble's flushable batch, which its flush reads.
	mark := len(d.buf)
	repr := b.Repr()
	if int64(mark+len(repr)+binary.MaxVarintLen64) > d.maxBytes {
		d.overflow, d.buf = true, nil
		return b.Commit(o)
	}
	if mark == 0 {
		d.buf = append(d.buf, deltaMagic...)
	}
	d.buf = binary.AppendUvarint(d.buf, uint64(len(repr)))
	d.buf = append(d.buf, repr...)
	if err := b.Commit(o); err != nil {
		d.buf = d.buf[:mark]
		return err
	}
	return nil
}

// pendingCommit is the commit to Pebble of a delta checkpoint's captured
// write-cache entries, running on its own goroutine after the
// checkpoint's synchronous part (pebbleStore.pending).
type pendingCommit struct {
	done chan struct{}
	// err is the commit's error, read after done is closed.
	err error
}

// commitLater commits b (already in the delta log) to Pebble on another
// goroutine, then closes it and releases p (pending since before the
// capture, snapshotRemote): the synchronous part of a delta checkpoint
// captures the write cache's dirty entries in b and returns without
// waiting for Pebble (which sorts a large batch as it commits it, tens of
// milliseconds for the 100k entries of a 10M-key state's interval). Every
// later access to Pebble waits for it first (settle), so the commits
// reach Pebble in the order of the delta log and every read sees the
// captured entries.
func (s *pebbleStore) commitLater(p *pendingCommit, b *pebble.Batch) {
	hook := commitLaterHook
	go func() {
		defer close(p.done)
		if hook != nil {
			hook()
		}
		p.err = b.Commit(pebble.NoSync)
		if cerr := b.Close(); p.err == nil {
			p.err = cerr
		}
	}()
}

// release ends p, pending since before a capture, with err: nil when the
// captured entries are in Pebble (a base committed them) or there were
// none; non-nil makes every later access to Pebble fail with it (the
// captured entries reached Pebble nowhere: sticky).
func (s *pebbleStore) release(p *pendingCommit, err error) {
	p.err = err
	close(p.done)
	if err == nil {
		s.pending.CompareAndSwap(p, nil)
	}
}

// commitLaterHook, when set (tests only), runs on commitLater's goroutine
// before its commit.
var commitLaterHook func()

// settle waits for the pending commit of a delta checkpoint
// (commitLater), if any, and returns its error: an instance whose
// captured entries failed to reach Pebble fails every later access (its
// task restarts from the checkpoint, which holds them in its delta).
// Safe for concurrent use (the TTL and asynchronous reads call it on
// other goroutines).
func (s *pebbleStore) settle() error {
	p := s.pending.Load()
	if p == nil {
		return nil
	}
	<-p.done
	if p.err != nil {
		return fmt.Errorf("state: pebble write: %w", p.err)
	}
	s.pending.CompareAndSwap(p, nil)
	return nil
}

// dbSet, dbMerge and dbDelete are Pebble's DB.Set, Merge and Delete
// through commit.
func (s *pebbleStore) dbSet(key, v []byte, o *pebble.WriteOptions) error {
	if s.delta == nil {
		return s.db.Set(key, v, o)
	}
	b := s.db.NewBatch()
	defer b.Close()
	_ = b.Set(key, v, nil)
	return s.commit(b, o)
}

func (s *pebbleStore) dbMerge(key, v []byte, o *pebble.WriteOptions) error {
	if s.delta == nil {
		return s.db.Merge(key, v, o)
	}
	b := s.db.NewBatch()
	defer b.Close()
	_ = b.Merge(key, v, nil)
	return s.commit(b, o)
}

func (s *pebbleStore) dbDelete(key []byte, o *pebble.WriteOptions) error {
	if s.delta == nil {
		return s.db.Delete(key, o)
	}
	b := s.db.NewBatch()
	defer b.Close()
	_ = b.Delete(key, nil)
	return s.commit(b, o)
}

// deltaCut is what a checkpoint's synchronous part took from the log: the
// tables of the base, and the chain (the last object new when cut).
type deltaCut struct {
	files   []fileRef
	names   []string
	chain   []*deltaObject
	created *deltaObject
	// commitLater says the captured batch is in the log (the new delta)
	// and not yet in Pebble: the caller commits it (commitLater). lost
	// says the captured entries reached neither (a failed commit).
	commitLater, lost bool
}

// cutDelta decides, under the log's lock, whether this checkpoint is a
// delta: if so it cuts the log into a new delta object (none when nothing
// was committed) and returns the base and the chain; if not (ok false)
// the caller takes a base with the lock held (base is called with d.mu
// held and must list the tables after flushing).
func (d *deltaLog) cutDelta(creator uint64, captured *pebble.Batch, base func() ([]fileRef, []string, error)) (deltaCut, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	pend := 0
	if captured != nil && !captured.Empty() {
		pend = len(captured.Repr()) + binary.MaxVarintLen64
	}
	isBase := !d.recording || d.overflow || d.needBase || len(d.chain) >= d.maxDeltas && len(d.buf)+pend > 0 ||
		d.chainSize+int64(len(d.buf)+pend) > d.maxBytes
	for _, o := range d.chain {
		if !o.written.Load() {
			isBase = true
		}
	}
	if isBase {
		if captured != nil {
			// A base lists the tables after flushing the memtable: the
			// captured entries are committed first.
			if err := d.commitLocked(captured, pebble.NoSync); err != nil {
				d.recording, d.buf, d.chain, d.chainSize = false, nil, nil, 0
				return deltaCut{lost: true}, err
			}
		}
		files, names, err := base()
		if err != nil {
			d.recording, d.buf, d.chain, d.chainSize = false, nil, nil, 0
			return deltaCut{}, err
		}
		d.base, d.baseNames = files, names
		d.chain, d.chainSize, d.buf = nil, 0, nil
		d.recording = d.maxDeltas > 0
		d.overflow, d.needBase = false, false
		return deltaCut{files: files, names: names}, nil
	}
	c := deltaCut{files: d.base, names: d.baseNames}
	if pend > 0 {
		// The captured entries join the log as the commit would have
		// appended them; the caller commits them to Pebble later
		// (commitLater).
		repr := captured.Repr()
		if len(d.buf) == 0 {
			d.buf = append(d.buf, deltaMagic...)
		}
		d.buf = binary.AppendUvarint(d.buf, uint64(len(repr)))
		d.buf = append(d.buf, repr...)
		c.commitLater = true
	}
	if len(d.buf) > 0 {
		o := &deltaObject{name: "delta-" + strconv.FormatUint(creator, 10) + "-" + strconv.Itoa(d.next) + ".kd", data: d.buf}
		o.size = int64(len(o.data)) + 4
		d.next++
		d.buf = nil
		d.chain = append(d.chain, o)
		d.chainSize += o.size
		c.created = o
	}
	c.chain = append([]*deltaObject(nil), d.chain...)
	return c, nil
}

// writeDelta stores o on r's store (the instance's marker first, as for
// every object it creates).
func (r *remoteObjects) writeDelta(o *deltaObject) error {
	w, err := r.CreateObject(o.name)
	if err != nil {
		return fmt.Errorf("state: snapshot: write delta %s: %w", o.name, err)
	}
	var crc [4]byte
	binary.LittleEndian.PutUint32(crc[:], crc32.Checksum(o.data, deltaCRC))
	_, err = w.Write(o.data)
	if err == nil {
		_, err = w.Write(crc[:])
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("state: snapshot: write delta %s: %w", o.name, err)
	}
	r.knowSize(o.name, o.size)
	o.data = nil
	o.written.Store(true)
	return nil
}

// readDelta reads delta object name (size bytes) and checks it.
func (r *remoteObjects) readDelta(name string, size int64) ([]byte, error) {
	rd, n, err := r.st.ReadObject(context.Background(), name)
	if err != nil {
		return nil, fmt.Errorf("state: restore: delta %s: %w", name, err)
	}
	defer rd.Close()
	if size <= 0 {
		size = n
	}
	buf := make([]byte, size)
	if err := rd.ReadAt(context.Background(), buf, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("state: restore: delta %s: %w", name, err)
	}
	if len(buf) < len(deltaMagic)+4 || string(buf[:len(deltaMagic)]) != deltaMagic ||
		crc32.Checksum(buf[:len(buf)-4], deltaCRC) != binary.LittleEndian.Uint32(buf[len(buf)-4:]) {
		return nil, fmt.Errorf("state: restore: delta %s: bad magic or checksum: %w", name, ErrCorrupt)
	}
	return buf[len(deltaMagic) : len(buf)-4], nil
}

// maxReplayBytes bounds the batch a restore replays the delta chains in
// (deltaReplay): twice DefaultMaxDeltaBytes, so one default chain, or two
// snapshots' chains of a rescale, are one commit. A variable for tests.
var maxReplayBytes = 2 * DefaultMaxDeltaBytes

// deltaReplay applies the delta objects of a restore as one Pebble batch:
// the records (batch representations) of every delta object of every
// snapshot, oldest first, are concatenated into one batch representation
// and committed once. A batch's entries take consecutive sequence
// numbers in their order, so the concatenation applies exactly what
// committing the records one after the other did (a later Set, Delete or
// range deletion shadows the earlier entries; merge operands stay in
// order). A batch of at least half the memtable size becomes Pebble's
// flushable batch (sorted once, not inserted key by key into the
// memtable's skiplist), and one commit never waits for the flush of an
// earlier one: committing the records one by one stalled each large
// record behind the flush of the previous one (Pebble stops writes while
// the queued memtables exceed MemTableStopWritesThreshold memtables).
type deltaReplay struct {
	db *pebble.DB
	// buf is the batch representation being built: header (sequence
	// number 0, count), then the records' entries; count is its entries.
	buf     []byte
	count   uint64
	scratch *pebble.Batch
	// sizeHint is the delta objects' total size: the first buffer's
	// capacity (at most maxReplayBytes).
	sizeHint int
	// commits counts the batches committed; objects the delta objects
	// added (the caller counts).
	commits *atomic.Int64
	objects int
}

// newDeltaReplay returns a replay into db of delta objects of sizeHint
// bytes in all; commits counts its batches.
func newDeltaReplay(db *pebble.DB, sizeHint int64, commits *atomic.Int64) *deltaReplay {
	return &deltaReplay{db: db, sizeHint: int(min(sizeHint, int64(maxReplayBytes))), commits: commits}
}

// add appends the records of a delta object (data: the object without
// magic and CRC) in order, keeping only the keys in [lo, hi) (the key
// groups restored from this snapshot) and the metadata space; all,
// unchanged, when whole.
func (p *deltaReplay) add(data []byte, lo, hi []byte, whole bool) error {
	for len(data) > 0 {
		n, k := binary.Uvarint(data)
		if k <= 0 || uint64(len(data)-k) < n {
			return fmt.Errorf("state: restore: delta record: %w", ErrCorrupt)
		}
		repr := data[k : k+int(n)]
		data = data[k+int(n):]
		if !whole {
			if p.scratch == nil {
				p.scratch = p.db.NewBatch()
			}
			p.scratch.Reset()
			if err := filterBatch(p.scratch, repr, lo, hi); err != nil {
				return err
			}
			repr = p.scratch.Repr()
		}
		h, ok := batchrepr.ReadHeader(repr)
		if !ok {
			return fmt.Errorf("state: restore: delta record: short batch header: %w", ErrCorrupt)
		}
		if h.Count == 0 {
			continue
		}
		body := repr[batchrepr.HeaderLen:]
		if p.count > 0 && (p.count+uint64(h.Count) > math.MaxUint32 || len(p.buf)+len(body) > maxReplayBytes) {
			if err := p.commit(); err != nil {
				return err
			}
		}
		if len(p.buf) == 0 {
			p.buf = make([]byte, batchrepr.HeaderLen, batchrepr.HeaderLen+max(len(body), p.sizeHint))
		}
		p.buf = append(p.buf, body...)
		p.count += uint64(h.Count)
	}
	return nil
}

// commit commits what add collected as one batch.
func (p *deltaReplay) commit() error {
	if p.count == 0 {
		return nil
	}
	binary.LittleEndian.PutUint32(p.buf[8:batchrepr.HeaderLen], uint32(p.count))
	buf := p.buf
	p.buf, p.count = nil, 0
	b := p.db.NewBatch()
	defer b.Close()
	if err := b.SetRepr(buf); err != nil {
		return fmt.Errorf("state: restore: delta batch: %v: %w", err, ErrCorrupt)
	}
	p.commits.Add(1)
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("state: restore: apply delta: %w", err)
	}
	return nil
}

// close commits the rest and releases the scratch batch.
func (p *deltaReplay) close() error {
	err := p.commit()
	p.abort()
	return err
}

// abort drops what was not committed (a failed restore, whose DB is
// closed) and releases the scratch batch.
func (p *deltaReplay) abort() {
	p.buf, p.count = nil, 0
	if p.scratch != nil {
		_ = p.scratch.Close()
		p.scratch = nil
	}
}

// filterBatch adds to b the entries of batch representation repr whose
// keys are in [lo, hi) or the metadata space (a range deletion clipped to
// them).
func filterBatch(b *pebble.Batch, repr, lo, hi []byte) error {
	keep := func(k []byte) bool {
		return bytes.Compare(k, keyGroupsEnd) >= 0 || bytes.Compare(k, lo) >= 0 && bytes.Compare(k, hi) < 0
	}
	rd := batchrepr.Read(repr)
	for {
		kind, k, v, ok, err := rd.Next()
		if err != nil {
			return fmt.Errorf("state: restore: delta record: %v: %w", err, ErrCorrupt)
		}
		if !ok {
			return nil
		}
		switch kind {
		case pebble.InternalKeyKindSet:
			if keep(k) {
				_ = b.Set(k, v, nil)
			}
		case pebble.InternalKeyKindMerge:
			if keep(k) {
				_ = b.Merge(k, v, nil)
			}
		case pebble.InternalKeyKindDelete, pebble.InternalKeyKindSingleDelete:
			if keep(k) {
				_ = b.Delete(k, nil)
			}
		case pebble.InternalKeyKindRangeDelete:
			for _, r := range [][2][]byte{{lo, hi}, {keyGroupsEnd, nil}} {
				s, e := k, v
				if bytes.Compare(s, r[0]) < 0 {
					s = r[0]
				}
				if r[1] != nil && bytes.Compare(e, r[1]) > 0 {
					e = r[1]
				}
				if bytes.Compare(s, e) < 0 {
					_ = b.DeleteRange(s, e, nil)
				}
			}
		default:
			return fmt.Errorf("state: restore: delta record: key kind %v not supported: %w", kind, ErrCorrupt)
		}
	}
}
