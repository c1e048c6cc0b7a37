package filesink

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kstreamd/kstreamd/connector"
	"github.com/kstreamd/kstreamd/runtime"
)

// Type is the file sink's type name in the connector registry and in its
// committable envelopes (checkpoint.EncodeCommittable).
const Type = "file"

// CommittableVersion is the version of the Committable encoding written.
const CommittableVersion = 1

// Committable is one pending part file, everything needed to publish it
// later, possibly from another process after a crash (Flink's
// FileSinkCommittable). Its encoding (MarshalCommittable), the data of
// its checkpoint.Committable envelope, is JSON:
//
//	{"v":1,"checkpoint_id":7,"pending":"b/.part-….pending","final":"b/part-…","size":1234,"records":10}
type Committable struct {
	// Version is CommittableVersion.
	Version int `json:"v"`
	// CheckpointID is the checkpoint whose barrier made the part pending.
	CheckpointID int64 `json:"checkpoint_id"`
	// Pending and Final are the part's keys in the storage: hidden while
	// pending, then published.
	Pending string `json:"pending"`
	Final   string `json:"final"`
	// Size is the part's size in bytes; Records its number of records.
	Size    int64 `json:"size"`
	Records int64 `json:"records"`
}

// MarshalCommittable encodes c (JSON, Version set).
func MarshalCommittable(c Committable) ([]byte, error) {
	c.Version = CommittableVersion
	return json.Marshal(c)
}

// UnmarshalCommittable decodes b; an unknown version or a committable
// without keys is an error.
func UnmarshalCommittable(b []byte) (Committable, error) {
	var c Committable
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("filesink: committable: %w", err)
	}
	if c.Version != CommittableVersion {
		return c, fmt.Errorf("filesink: committable version %d, want %d", c.Version, CommittableVersion)
	}
	if c.Pending == "" || c.Final == "" || PendingKey(c.Final) != c.Pending {
		return c, fmt.Errorf("filesink: committable without matching pending and final keys: %q, %q", c.Pending, c.Final)
	}
	return c, nil
}

// RollingPolicy says when an in-progress part is closed and a new one
// started (Flink's DefaultRollingPolicy); every checkpoint closes every
// in-progress part in addition (OnCheckpointRollingPolicy).
type RollingPolicy struct {
	// MaxPartSize rolls a part once its size reaches it, in bytes (an
	// estimate for Parquet, which buffers a row group). 0 means
	// DefaultMaxPartSize.
	MaxPartSize int64
	// RolloverInterval rolls a part this long after it was opened. 0 means
	// none: only size, inactivity and checkpoints roll.
	RolloverInterval time.Duration
	// InactivityInterval rolls a part that received no record for this
	// long. 0 means none.
	InactivityInterval time.Duration
}

// DefaultMaxPartSize is Flink's default part size, 128 MiB.
const DefaultMaxPartSize = 128 << 20

// Config configures one subtask of a file sink.
type Config struct {
	// Name is the sink's name; Subtask its index.
	Name    string
	Subtask int
	// Storage is where the parts go. Required.
	Storage Storage
	// Format is FormatJSONLines or FormatParquet; Columns the Parquet
	// columns (required for Parquet, at least one).
	Format  Format
	Columns []Column
	// Bucket assigns records to buckets; nil means BasePathBucketAssigner.
	Bucket BucketAssigner
	// PartPrefix and PartSuffix frame part names (Flink's
	// OutputFileConfig): <prefix>-<run>-<subtask>-<n><suffix>. Empty
	// PartPrefix means "part"; empty PartSuffix ".jsonl" or ".parquet".
	PartPrefix, PartSuffix string
	// Rolling is the rolling policy.
	Rolling RollingPolicy
	// Now is the clock (processing time); nil means time.Now.
	Now func() time.Time
	// RecordsOut counts the records of the parts this subtask published
	// (as the Kafka exactly-once sink counts committed records); may be
	// nil.
	RecordsOut prometheus.Counter
	// Logger is required.
	Logger *slog.Logger
}

// withDefaults fills the defaults in.
func (c Config) withDefaults() Config {
	if c.PartPrefix == "" {
		c.PartPrefix = "part"
	}
	if c.PartSuffix == "" {
		c.PartSuffix = DefaultSuffix(c.Format)
	}
	if c.Rolling.MaxPartSize <= 0 {
		c.Rolling.MaxPartSize = DefaultMaxPartSize
	}
	if c.Bucket == nil {
		c.Bucket = BasePathBucketAssigner{}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// DefaultSuffix is the part suffix of f: ".jsonl" or ".parquet".
func DefaultSuffix(f Format) string {
	if f == FormatParquet {
		return ".parquet"
	}
	return ".jsonl"
}

// openPart is a bucket's in-progress part.
type openPart struct {
	final   string
	part    Part
	enc     encoder
	records int64
	opened  time.Time
	last    time.Time
}

// Sink is one subtask of a file sink, a two-phase-commit sink (Flink's
// FileWriter and FileCommitter in one operator, driven like
// connector.TwoPhaseCommitSink): it implements runtime.Operator,
// runtime.Snapshotter, runtime.CheckpointListener and
// runtime.PendingCommitter. Every method runs on the subtask's goroutine.
type Sink struct {
	cfg    Config
	newEnc newEncoder
	run    string
	logger *slog.Logger

	open      map[string]*openPart // bucket -> in-progress part
	rolled    []Committable        // pending since the last barrier (CheckpointID not yet set)
	pending   []Committable        // pre-committed, ascending checkpoint id
	counter   int64                // parts started by this run
	lastCheck time.Time            // last scan of every open part's age
	finalWait bool                 // a stop-with-savepoint barrier was taken
}

// New returns the sink subtask of cfg. It draws the run id that keeps its
// part names apart from every earlier start's.
func New(cfg Config) (*Sink, error) {
	cfg = cfg.withDefaults()
	if cfg.Storage == nil || cfg.Logger == nil {
		return nil, errors.New("filesink: storage and logger are required")
	}
	var ne newEncoder
	switch cfg.Format {
	case FormatJSONLines, "":
		ne = newJSONLines
	case FormatParquet:
		if len(cfg.Columns) == 0 {
			return nil, errors.New("filesink: parquet needs at least one column")
		}
		ne = newParquet(cfg.Columns)
	default:
		return nil, fmt.Errorf("filesink: unknown format %q", cfg.Format)
	}
	var r [4]byte
	if _, err := rand.Read(r[:]); err != nil {
		return nil, err
	}
	return &Sink{cfg: cfg, newEnc: ne, run: hex.EncodeToString(r[:]), open: map[string]*openPart{},
		logger: cfg.Logger.With("sink", cfg.Name, "subtask", cfg.Subtask)}, nil
}

// Open implements runtime.Operator.
func (s *Sink) Open(context.Context) error { return nil }

// ProcessRecord implements runtime.Operator: it writes rec into its
// bucket's in-progress part and rolls parts as the policy says.
func (s *Sink) ProcessRecord(ctx context.Context, _ int, rec runtime.Record) error {
	now := s.cfg.Now()
	bucket, err := s.cfg.Bucket.BucketID(rec, now)
	if err != nil {
		return s.badRecord(rec, err)
	}
	p := s.open[bucket]
	if p == nil {
		if p, err = s.start(ctx, bucket, now); err != nil {
			return err
		}
	}
	if err := p.enc.Write(rec); err != nil {
		return s.badRecord(rec, err)
	}
	p.records++
	p.last = now
	if p.enc.Size() >= s.cfg.Rolling.MaxPartSize {
		if err := s.roll(ctx, bucket); err != nil {
			return err
		}
	}
	return s.rollByTime(ctx, now)
}

// BadRecordError is a record the sink cannot write: its bucket expression
// fails on it, or it does not fit the format (a Parquet column's type, a
// multi-line value that is no JSON). It wraps the *runtime.RecordError
// (errors.As finds it, so a sink task with a bad-record policy applies
// it); without one it fails the job, and SuppressRestarts keeps a restart,
// which would meet the same record again, from looping.
type BadRecordError struct {
	// Sink is the sink's name; Origin where the record was read.
	Sink   string
	Origin runtime.Origin
	Err    *runtime.RecordError
}

// Error names the sink, the record's origin and the reason.
func (e *BadRecordError) Error() string {
	return fmt.Sprintf("filesink: sink %s: the record from %s cannot be written: %v", e.Sink, e.Origin, e.Err)
}

// Unwrap returns the *runtime.RecordError.
func (e *BadRecordError) Unwrap() error { return e.Err }

// SuppressRestarts reports true (Flink's SuppressRestartsException): a
// restart reads the same record again.
func (e *BadRecordError) SuppressRestarts() bool { return true }

// badRecord wraps a *runtime.RecordError of rec in a *BadRecordError;
// other errors pass.
func (s *Sink) badRecord(rec runtime.Record, err error) error {
	var re *runtime.RecordError
	if errors.As(err, &re) {
		return &BadRecordError{Sink: s.cfg.Name, Origin: rec.Origin, Err: re}
	}
	return err
}

// start opens bucket's next part.
func (s *Sink) start(ctx context.Context, bucket string, now time.Time) (*openPart, error) {
	name := fmt.Sprintf("%s-%s-%d-%d%s", s.cfg.PartPrefix, s.run, s.cfg.Subtask, s.counter, s.cfg.PartSuffix)
	s.counter++
	final := path.Join(bucket, name)
	part, err := s.cfg.Storage.NewPart(ctx, final)
	if err != nil {
		return nil, err
	}
	p := &openPart{final: final, part: part, enc: s.newEnc(part), opened: now, last: now}
	s.open[bucket] = p
	return p, nil
}

// roll closes bucket's in-progress part and makes it pending.
func (s *Sink) roll(ctx context.Context, bucket string) error {
	p := s.open[bucket]
	delete(s.open, bucket)
	if err := p.enc.Close(); err != nil {
		p.part.Discard()
		return fmt.Errorf("filesink: close part %s: %w", p.final, err)
	}
	size, err := p.part.Persist(ctx)
	if err != nil {
		return err
	}
	s.rolled = append(s.rolled, Committable{Version: CommittableVersion, Pending: PendingKey(p.final), Final: p.final, Size: size, Records: p.records})
	return nil
}

// rollByTime rolls, at most once a second, every part older than
// RolloverInterval or idle for InactivityInterval.
func (s *Sink) rollByTime(ctx context.Context, now time.Time) error {
	r := s.cfg.Rolling
	if r.RolloverInterval <= 0 && r.InactivityInterval <= 0 || now.Sub(s.lastCheck) < time.Second {
		return nil
	}
	s.lastCheck = now
	for _, b := range s.buckets() {
		p := s.open[b]
		if r.RolloverInterval > 0 && now.Sub(p.opened) >= r.RolloverInterval || r.InactivityInterval > 0 && now.Sub(p.last) >= r.InactivityInterval {
			if err := s.roll(ctx, b); err != nil {
				return err
			}
		}
	}
	return nil
}

// buckets returns the buckets with an open part, sorted.
func (s *Sink) buckets() []string {
	bs := make([]string, 0, len(s.open))
	for b := range s.open {
		bs = append(bs, b)
	}
	slices.Sort(bs)
	return bs
}

// SnapshotState implements runtime.Snapshotter: pre-commit. Every
// in-progress part becomes pending; the parts pending since the last
// barrier get the checkpoint's id; every pending committable goes into the
// checkpoint: under checkpoint.CommittablesState, one envelope of sink
// type Type per pending part, or a single empty one when none is pending
// (every subtask of an exactly-once sink holds an entry in every
// checkpoint: the metadata's required state).
func (s *Sink) SnapshotState(ctx context.Context, b *runtime.Barrier) (runtime.SnapshotFinisher, error) {
	for _, bucket := range s.buckets() {
		if err := s.roll(ctx, bucket); err != nil {
			return nil, err
		}
	}
	for _, c := range s.rolled {
		c.CheckpointID = b.CheckpointID
		s.pending = append(s.pending, c)
	}
	s.rolled = s.rolled[:0]
	if b.StopAfter {
		s.finalWait = true
	}
	entries := make([][]byte, 0, max(1, len(s.pending)))
	for _, c := range s.pending {
		e, err := MarshalCommittable(c)
		if err != nil {
			return nil, err
		}
		entries = append(entries, e)
	}
	if len(entries) == 0 {
		entries = append(entries, nil) // an empty epoch
	}
	raw, err := connector.CommittablesTaskState(Type, entries)
	if err != nil {
		return nil, err
	}
	return func(context.Context) (runtime.TaskSnapshot, error) { return runtime.TaskSnapshot{State: raw}, nil }, nil
}

// NotifyCheckpointComplete implements runtime.CheckpointListener: it
// publishes every pending part of checkpoint id or before, in order. A
// lost part fails the job.
func (s *Sink) NotifyCheckpointComplete(ctx context.Context, id int64) error {
	n := 0
	for ; n < len(s.pending) && s.pending[n].CheckpointID <= id; n++ {
		if _, err := s.cfg.Storage.Publish(ctx, s.pending[n].Pending, s.pending[n].Final); err != nil {
			s.pending = s.pending[n:]
			return fmt.Errorf("filesink: sink %s: publish part of checkpoint %d: %w", s.cfg.Name, s.pending[0].CheckpointID, err)
		}
		if s.cfg.RecordsOut != nil {
			s.cfg.RecordsOut.Add(float64(s.pending[n].Records))
		}
	}
	s.pending = s.pending[n:]
	return nil
}

// NotifyCheckpointAborted implements runtime.CheckpointListener: the
// pending parts stay pending and are published with the next completed
// checkpoint (a later checkpoint carries them too).
func (s *Sink) NotifyCheckpointAborted(context.Context, int64) {}

// PendingCommits implements runtime.PendingCommitter: after a
// stop-with-savepoint barrier the subtask waits for the publication.
func (s *Sink) PendingCommits() bool { return s.finalWait && len(s.pending) > 0 }

// EndInput implements runtime.Operator: the in-progress parts and the
// parts rolled since the last barrier hold records no checkpoint covers
// (they are read again after a restart), so they are deleted. Pending
// parts stay for the next start to publish or delete.
func (s *Sink) EndInput(ctx context.Context) error {
	if len(s.pending) > 0 {
		s.logger.Info("stopping with pending parts; the next start publishes them if their checkpoint completed", "pending", len(s.pending))
	}
	return s.discard(ctx)
}

// discard drops every in-progress part and every part rolled since the
// last barrier.
func (s *Sink) discard(ctx context.Context) error {
	var errs []error
	for _, b := range s.buckets() {
		errs = append(errs, s.open[b].part.Discard())
		delete(s.open, b)
	}
	keys := make([]string, 0, len(s.rolled))
	for _, c := range s.rolled {
		keys = append(keys, c.Pending)
	}
	s.rolled = s.rolled[:0]
	if len(keys) > 0 {
		errs = append(errs, s.cfg.Storage.Delete(ctx, keys...))
	}
	return errors.Join(errs...)
}

// Close implements runtime.Operator: it removes the in-progress parts
// (best effort; a restore deletes whatever is left).
func (s *Sink) Close() error {
	for _, b := range s.buckets() {
		_ = s.open[b].part.Discard()
		delete(s.open, b)
	}
	return nil
}
