package checkpoint

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/objstorage/remote"

	"github.com/kstreamd/kstreamd/internal/atomicfile"
)

// DefaultRetained is how many completed checkpoints Storage keeps unless
// configured otherwise.
const DefaultRetained = 3

// Checkpoint states as List reports them.
const (
	StateCompleted  = "completed"
	StateIncomplete = "incomplete" // no metadata: in progress, or failed before its commit point
)

// Storage is the filesystem checkpoint storage of one job (see the package
// comment for the layout). Its methods are not safe for concurrent use; the
// Coordinator owns it while the job runs.
type Storage struct {
	jobDir   string
	retained int
	logger   *slog.Logger
	// beforeCommit, if set, runs between the task snapshots and the
	// metadata rename (failure injection in tests).
	beforeCommit func(id int64) error
	// protected holds the absolute directories of checkpoints Prune must
	// keep (Protect).
	protected map[string]bool
	// remoteStore is the remote state's object store (SetRemoteStore);
	// nil: RemoteDir.
	remoteStore remote.Storage
	// syncDir fsyncs a directory; nil means atomicfile.SyncDir (tests
	// count directory fsyncs through it).
	syncDir func(dir string) error
	// meta caches the metadata of completed checkpoints (see metaCache).
	meta metaCache
	// durableShared holds the shared directories (absolute) whose entries
	// in their parents are known durable (syncShared).
	durableShared map[string]bool
}

// metaCache caches what Storage itself reads of the completed
// checkpoints' _metadata (metaSummary), by directory: a completed
// checkpoint's _metadata is immutable, so retention after each checkpoint
// reads only the new one instead of every retained one again. An entry is
// used only while the directory is the same one (same inode and
// modification time as when it was read), so a chk-<id> deleted and
// written again is read again.
//
// Safe by construction: an entry is a metaSummary built from a copy (the
// shared file names copied out of the Metadata it was made from, which is
// then dropped), its fields are unexported and only read in this package,
// and no *Metadata ever enters or leaves the cache, so neither the
// coordinator (which goes on using the Metadata it committed) nor a
// restore (which owns the Metadata Latest hands it) can change what
// another caller sees. Safe for concurrent use (List may run from another
// goroutine than the Coordinator's).
type metaCache struct {
	mu      sync.Mutex
	entries map[string]metaEntry
	// reads counts the _metadata files read (tests).
	reads int
}

type metaEntry struct {
	dir os.FileInfo
	sum *metaSummary
}

// metaSummary is what List, retention (Prune, SharedRefCounts) and a
// unit's upload read of a completed checkpoint's _metadata: immutable once
// made (summaryOf); never handed out of the package.
type metaSummary struct {
	timestamp time.Time
	bytes     int64
	savepoint bool
	// sharedFiles is Metadata.SharedFiles, a copy owned by the summary:
	// read only (callers that keep it copy it).
	sharedFiles []string
}

// summaryOf returns the summary of m, sharing nothing with m. Its
// timestamp is m.Timestamp as ReadMetadata decodes it from the file m
// was written to (JSON round trip: no monotonic reading, the file's
// location), so a summary made at commit equals one read back.
func summaryOf(m *Metadata) *metaSummary {
	ts := m.Timestamp.Round(0)
	if b, err := m.Timestamp.MarshalJSON(); err == nil {
		var u time.Time
		if u.UnmarshalJSON(b) == nil {
			ts = u
		}
	}
	return &metaSummary{timestamp: ts, bytes: m.Bytes, savepoint: m.Savepoint, sharedFiles: slices.Clone(m.SharedFiles)}
}

// get returns the cached summary of dir (whose current stat is st), or
// nil.
func (c *metaCache) get(dir string, st os.FileInfo) *metaSummary {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[dir]
	if !ok || st == nil || !os.SameFile(e.dir, st) || !e.dir.ModTime().Equal(st.ModTime()) {
		return nil
	}
	return e.sum
}

func (c *metaCache) put(dir string, st os.FileInfo, sum *metaSummary) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[string]metaEntry{}
	}
	c.entries[dir] = metaEntry{dir: st, sum: sum}
}

// retain drops every entry whose directory is not in keep.
func (c *metaCache) retain(keep map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for d := range c.entries {
		if !keep[d] {
			delete(c.entries, d)
		}
	}
}

func (c *metaCache) drop(dir string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, dir)
}

func (c *metaCache) countRead() {
	c.mu.Lock()
	c.reads++
	c.mu.Unlock()
}

// metadataReads returns how many _metadata files s read (tests).
func (s *Storage) metadataReads() int {
	s.meta.mu.Lock()
	defer s.meta.mu.Unlock()
	return s.meta.reads
}

// summary is the metaSummary of the completed checkpoint in dir through
// s's cache: a completed checkpoint whose directory is unchanged since it
// was read (or committed by s) costs one stat. Errors are ReadMetadata's.
func (s *Storage) summary(dir string) (*metaSummary, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, err
	}
	return s.summaryStat(dir, st)
}

func (s *Storage) summaryStat(dir string, st os.FileInfo) (*metaSummary, error) {
	if sum := s.meta.get(dir, st); sum != nil {
		return sum, nil
	}
	s.meta.countRead()
	m, err := ReadMetadata(dir)
	if err != nil {
		return nil, err
	}
	sum := summaryOf(m)
	s.meta.put(dir, st, sum)
	return sum, nil
}

// sync fsyncs dir with s.syncDir.
func (s *Storage) sync(dir string) error {
	if s.syncDir != nil {
		return s.syncDir(dir)
	}
	return atomicfile.SyncDir(dir)
}

// mkdirAll is atomicfile.MkdirAll with s's fsync: dir and its new parents
// exist durably when it returns.
func (s *Storage) mkdirAll(dir string) error {
	return atomicfile.MkdirAll(dir, 0o755, s.sync)
}

// NewStorage returns the storage of job under dir: dir/job holds its
// checkpoints. retained <= 0 means DefaultRetained.
func NewStorage(dir, job string, retained int, logger *slog.Logger) *Storage {
	if retained <= 0 {
		retained = DefaultRetained
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Storage{jobDir: filepath.Join(dir, job), retained: retained, logger: logger}
}

// JobDir returns dir/job.
func (s *Storage) JobDir() string { return s.jobDir }

// CheckpointDir returns the directory of checkpoint id: dir/job/chk-<id>.
func (s *Storage) CheckpointDir(id int64) string {
	return filepath.Join(s.jobDir, "chk-"+strconv.FormatInt(id, 10))
}

// SharedDir returns dir/job/shared, the home of incremental shared files.
func (s *Storage) SharedDir() string { return filepath.Join(s.jobDir, "shared") }

// Info describes one checkpoint directory.
type Info struct {
	ID        int64
	Dir       string
	State     string    // StateCompleted or StateIncomplete
	Time      time.Time // trigger time (completed) or directory time (incomplete)
	Bytes     int64     // bytes the checkpoint wrote (metadata's count), or the directory's size when incomplete
	Savepoint bool
}

// List returns the checkpoints under the job directory, ascending by id. A
// directory whose metadata is unreadable is listed as incomplete.
// Completed checkpoints' metadata comes from s's cache (metaCache) when
// their directory is unchanged.
func (s *Storage) List() ([]Info, error) {
	seen := map[string]bool{}
	out, err := listDir(s.jobDir, func(dir string, e fs.DirEntry) (*metaSummary, error) {
		seen[dir] = true
		st, err := e.Info()
		if err != nil {
			return nil, err
		}
		return s.summaryStat(dir, st)
	})
	if err == nil {
		s.meta.retain(seen)
	}
	return out, err
}

// ListDir lists the checkpoints in a job's checkpoint directory (see
// Storage.List). A missing directory has no checkpoints.
func ListDir(jobDir string) ([]Info, error) {
	return listDir(jobDir, func(dir string, _ fs.DirEntry) (*metaSummary, error) {
		m, err := ReadMetadata(dir)
		if err != nil {
			return nil, err
		}
		return summaryOf(m), nil
	})
}

// listDir is ListDir reading each checkpoint's metadata with read.
func listDir(jobDir string, read func(dir string, e fs.DirEntry) (*metaSummary, error)) ([]Info, error) {
	ents, err := os.ReadDir(jobDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Info
	for _, e := range ents {
		id, ok := parseChkName(e.Name())
		if !ok || !e.IsDir() {
			continue
		}
		dir := filepath.Join(jobDir, e.Name())
		info := Info{ID: id, Dir: dir, State: StateIncomplete}
		if sum, err := read(dir, e); err == nil {
			info.State, info.Time, info.Bytes, info.Savepoint = StateCompleted, sum.timestamp, sum.bytes, sum.savepoint
		} else {
			if st, err := e.Info(); err == nil {
				info.Time = st.ModTime()
			}
			info.Bytes = dirSize(dir)
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b Info) int { return int(a.ID - b.ID) })
	return out, nil
}

// ListAll lists what dir holds for `kstreamd checkpoints list`, ascending
// by id: dir itself when it is one checkpoint or savepoint (it holds
// _metadata); else the checkpoints (chk-<id>) and savepoints
// (savepoint-<id>-<unix>) directly under it, so a job's checkpoint
// directory and a savepoint directory both list, plus, for a job
// directory, the savepoint its latest-savepoint pointer names when that is
// elsewhere (checkpoints.savepoint_dir). Entries are as in ListDir; a
// savepoint's Savepoint is true also while its metadata is missing. A
// missing dir lists nothing. Unlike ListDir it is for display only:
// retention and restore never see savepoints through it.
func ListAll(dir string) ([]Info, error) {
	if m, err := ReadMetadata(dir); err == nil {
		return []Info{{ID: m.CheckpointID, Dir: dir, State: StateCompleted, Time: m.Timestamp, Bytes: m.Bytes, Savepoint: m.Savepoint}}, nil
	}
	out, err := ListDir(dir)
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	seen := map[string]bool{}
	for _, e := range ents {
		if id, ok := parseSavepointName(e.Name()); ok && e.IsDir() {
			out = append(out, infoOf(filepath.Join(dir, e.Name()), id, true))
			seen[filepath.Join(dir, e.Name())] = true
		}
	}
	if sp, err := (&Storage{jobDir: dir}).LatestSavepoint(); err == nil && !seen[sp] && filepath.Dir(sp) != filepath.Clean(dir) {
		if id, ok := parseSavepointName(filepath.Base(sp)); ok {
			if _, err := os.Stat(sp); err == nil {
				out = append(out, infoOf(sp, id, true))
			}
		}
	}
	slices.SortStableFunc(out, func(a, b Info) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// infoOf describes the checkpoint or savepoint directory dir of id.
func infoOf(dir string, id int64, savepoint bool) Info {
	info := Info{ID: id, Dir: dir, State: StateIncomplete, Savepoint: savepoint}
	if m, err := ReadMetadata(dir); err == nil {
		info.State, info.Time, info.Bytes, info.Savepoint = StateCompleted, m.Timestamp, m.Bytes, m.Savepoint
		return info
	}
	if st, err := os.Stat(dir); err == nil {
		info.Time = st.ModTime()
	}
	info.Bytes = dirSize(dir)
	return info
}

// parseSavepointName parses a savepoint directory's name,
// savepoint-<id>-<unix time>, and returns the id.
func parseSavepointName(name string) (int64, bool) {
	rest, ok := strings.CutPrefix(name, "savepoint-")
	if !ok {
		return 0, false
	}
	idText, unix, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(idText, 10, 64)
	if _, err2 := strconv.ParseInt(unix, 10, 64); err != nil || err2 != nil || id <= 0 {
		return 0, false
	}
	return id, true
}

func parseChkName(name string) (int64, bool) {
	rest, ok := strings.CutPrefix(name, "chk-")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(rest, 10, 64)
	return id, err == nil && id > 0
}

func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if st, err := d.Info(); err == nil {
				n += st.Size()
			}
		}
		return nil
	})
	return n
}

// Latest returns the directory and metadata of the newest completed
// checkpoint or savepoint of the job, or ErrNoCheckpoint. Savepoints and
// checkpoints share one id sequence; a savepoint newer than every checkpoint
// (a stop-with-savepoint, say) is what a restart must resume from, or it
// would replay output the savepoint already committed. Savepoints are found
// through the pointer RecordSavepoint writes.
func (s *Storage) Latest() (string, *Metadata, error) {
	infos, err := s.List()
	if err != nil {
		return "", nil, err
	}
	var dir string
	var meta *Metadata
	for i := len(infos) - 1; i >= 0; i-- {
		if infos[i].State != StateCompleted {
			continue
		}
		// The whole metadata, read from the file: the cache keeps only
		// summaries, and the restore that asks owns (and may change) the
		// object it gets. One read per restore.
		m, err := ReadMetadata(infos[i].Dir)
		if err != nil {
			return "", nil, err
		}
		dir, meta = infos[i].Dir, m
		break
	}
	if spDir, err := s.LatestSavepoint(); err == nil {
		if m, err := ReadMetadata(spDir); err == nil && (meta == nil || m.CheckpointID > meta.CheckpointID) {
			dir, meta = spDir, m
		}
	}
	if meta == nil {
		return "", nil, ErrNoCheckpoint
	}
	return dir, meta, nil
}

// savepointPointer is the file in the job directory naming the job's newest
// savepoint.
const savepointPointer = "latest-savepoint"

// RecordSavepoint remembers dir as the job's newest savepoint (atomically
// and durably, with atomicfile.WriteFile), so Latest can resume from it.
func (s *Storage) RecordSavepoint(dir string) error {
	if err := s.mkdirAll(s.jobDir); err != nil {
		return err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(s.jobDir, savepointPointer), []byte(abs+"\n"), atomicfile.Options{
		TempName: savepointPointer + ".tmp",
		Perm:     0o644,
		SyncDir:  s.syncDir,
	})
}

// LatestSavepoint returns the directory RecordSavepoint last recorded, or an
// error wrapping fs.ErrNotExist when there is none.
func (s *Storage) LatestSavepoint() (string, error) {
	b, err := os.ReadFile(filepath.Join(s.jobDir, savepointPointer))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// commit writes m as the metadata of the checkpoint in dir: the commit
// point; noSync skips the fsyncs (a cluster unit's staging copy:
// runtime.Barrier.Staging). Before the metadata it makes the checkpoint's
// directories durable (syncEntries), so a _metadata that survives a crash
// never names a task directory or shared file that did not. The
// metadata cache gets a summary of m made right after m was encoded
// (summaryOf: a copy, equal to what reading the file back gives), never m
// itself, which the coordinator goes on using: retention does not read
// the new _metadata back.
func (s *Storage) commit(dir string, m *Metadata, noSync bool) error {
	if !noSync {
		if err := s.syncEntries(dir, m); err != nil {
			return fmt.Errorf("checkpoint: commit %d: %w", m.CheckpointID, err)
		}
	}
	var hook func() error
	if s.beforeCommit != nil {
		hook = func() error { return s.beforeCommit(m.CheckpointID) }
	}
	if err := writeMetadataSync(dir, m, hook, noSync, s.syncDir); err != nil {
		return fmt.Errorf("checkpoint: commit %d: %w", m.CheckpointID, err)
	}
	sum := summaryOf(m) // on this goroutine, right after the encoding: what the file holds
	if st, err := os.Stat(dir); err == nil {
		s.meta.put(dir, st, sum)
	}
	return nil
}

// syncEntries makes durable the directory entries a checkpoint's task
// snapshots created below its directory dir (the backends create
// <operator>/<subtask>/ with os.MkdirAll and fsync only the directory
// their files are in): it fsyncs dir and every directory below it that
// holds a directory, once each. Then, for the shared files m names, it
// fsyncs the parent of each shared directory not yet known durable (a new
// backend instance's directory, the shared directory itself), once per
// Storage.
func (s *Storage) syncEntries(dir string, m *Metadata) error {
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		ents, err := os.ReadDir(p)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if e.IsDir() {
				return s.sync(p)
			}
		}
		return nil
	})
	if err != nil || len(m.SharedFiles) == 0 {
		return err
	}
	shared := absPath(m.SharedDirOf(dir))
	if !strings.HasPrefix(shared, absPath(s.jobDir)+string(filepath.Separator)) {
		return nil // another job's shared directory (a restored one): not ours to sync
	}
	var parents []string
	seen := map[string]bool{}
	for _, f := range m.SharedFiles {
		if _, ok := remoteObject(f); ok {
			continue
		}
		for d := filepath.Dir(filepath.Join(shared, filepath.FromSlash(f))); len(d) >= len(shared) && !s.durableShared[d]; d = filepath.Dir(d) {
			if !seen[d] {
				seen[d] = true
				if p := filepath.Dir(d); !slices.Contains(parents, p) {
					parents = append(parents, p)
				}
			}
		}
	}
	for _, p := range parents {
		if err := s.sync(p); err != nil {
			return err
		}
	}
	if s.durableShared == nil {
		s.durableShared = map[string]bool{}
	}
	for d := range seen {
		s.durableShared[d] = true
	}
	return nil
}

// Prune applies retention after a commit: it keeps the newest Retained
// completed checkpoints and the protected ones (Protect), deletes older ones and every incomplete checkpoint
// older than the newest completed one, then deletes each shared file no
// kept checkpoint refers to. It must not run while a checkpoint is in
// flight (the Coordinator runs it between checkpoints).
func (s *Storage) Prune() error {
	infos, err := s.List()
	if err != nil {
		return err
	}
	var completed []Info
	for _, in := range infos {
		if in.State == StateCompleted {
			completed = append(completed, in)
		}
	}
	if len(completed) == 0 {
		return nil
	}
	newest := completed[len(completed)-1].ID
	keep := map[int64]bool{}
	for _, in := range completed[max(0, len(completed)-s.retained):] {
		keep[in.ID] = true
	}
	for _, in := range completed {
		if s.protected[absPath(in.Dir)] {
			keep[in.ID] = true
		}
	}
	var errs []error
	referenced := map[string]bool{}
	for _, in := range infos {
		if keep[in.ID] {
			sum, err := s.summary(in.Dir)
			if err != nil {
				return err // never delete shared files on a partial view
			}
			for _, f := range sum.sharedFiles {
				referenced[f] = true
			}
			continue
		}
		if in.State == StateIncomplete && in.ID > newest {
			continue // may still be in flight
		}
		s.logger.Debug("deleting checkpoint", "checkpoint_id", in.ID, "state", in.State)
		errs = append(errs, os.RemoveAll(in.Dir))
		s.meta.drop(in.Dir)
	}
	shared := s.SharedDir()
	err = filepath.WalkDir(shared, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(shared, path)
		if !referenced[filepath.ToSlash(rel)] {
			errs = append(errs, os.Remove(path))
		}
		return nil
	})
	errs = append(errs, err)
	errs = append(errs, s.pruneRemote(referenced))
	return errors.Join(errs...)
}

// DiscardIncomplete deletes every checkpoint directory without metadata:
// checkpoints aborted or cut short by a stop. It must only run when no
// checkpoint is in flight (after the job's tasks returned).
func (s *Storage) DiscardIncomplete() error {
	infos, err := s.List()
	if err != nil {
		return err
	}
	var errs []error
	for _, in := range infos {
		if in.State == StateIncomplete {
			s.logger.Debug("discarding incomplete checkpoint", "checkpoint_id", in.ID)
			errs = append(errs, os.RemoveAll(in.Dir))
		}
	}
	return errors.Join(errs...)
}

// SharedRefCounts returns, per shared file, how many kept completed
// checkpoints refer to it (tests and `checkpoints list` use it).
func (s *Storage) SharedRefCounts() (map[string]int, error) {
	infos, err := s.List()
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, in := range infos {
		if in.State != StateCompleted {
			continue
		}
		sum, err := s.summary(in.Dir)
		if err != nil {
			return nil, err
		}
		for _, f := range sum.sharedFiles {
			out[f]++
		}
	}
	return out, nil
}

// Protect keeps the checkpoint in dir, and every shared file it refers to,
// from Prune for the life of s: the job restored it explicitly
// (--from-savepoint), possibly an older one than the retained ones, and
// retention must not delete what was restored while the job runs from it
// (Flink's NO_CLAIM restore mode). A dir outside the job's directory is
// not Prune's to delete anyway; protecting it changes nothing. Call it
// before the Coordinator runs.
func (s *Storage) Protect(dir string) {
	if s.protected == nil {
		s.protected = map[string]bool{}
	}
	s.protected[absPath(dir)] = true
}

// absPath is dir made absolute and clean (dir cleaned when that fails).
func absPath(dir string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		return abs
	}
	return filepath.Clean(dir)
}

// AdoptShared makes the shared files of the checkpoint in dir (metadata m)
// available in this job's shared directory, where a restore reads them
// (state.RestoreHandle.SharedDir): when the checkpoint's shared directory
// (m.SharedDirOf(dir)) is another one — a retained checkpoint of another
// job or checkpoints dir given with --from-savepoint — each of its
// m.SharedFiles is hard-linked (copied where a link is impossible) into
// SharedDir. Shared files are immutable and named by the backend instance
// that wrote them, so a file already present with the same size is taken
// as is; one of another size is refused. The restored job then depends on
// the other directory only until the tasks opened their state, and its own
// checkpoints never refer to the copies (a restored backend writes its
// shared files under a new instance name), so retention deletes them after
// the first checkpoint. It returns the number of files linked or copied; 0
// when the checkpoint's shared directory is this job's own.
func (s *Storage) AdoptShared(dir string, m *Metadata) (int, error) {
	if len(m.SharedFiles) == 0 {
		return 0, nil
	}
	from, to := m.SharedDirOf(dir), s.SharedDir()
	if sameDir(from, to) {
		return 0, nil
	}
	n := 0
	var dirs []string
	for _, f := range m.SharedFiles {
		src, dst := filepath.Join(from, filepath.FromSlash(f)), filepath.Join(to, filepath.FromSlash(f))
		st, err := os.Stat(src)
		if err != nil {
			return n, fmt.Errorf("checkpoint: shared file %s of checkpoint %d: %w", f, m.CheckpointID, err)
		}
		if have, err := os.Stat(dst); err == nil {
			if have.Size() != st.Size() {
				return n, fmt.Errorf("checkpoint: shared file %s of checkpoint %d (%s, %d bytes) exists in %s with %d bytes", f, m.CheckpointID, from, st.Size(), to, have.Size())
			}
			continue
		}
		if err := s.mkdirAll(filepath.Dir(dst)); err != nil {
			return n, err
		}
		if err := os.Link(src, dst); err != nil {
			if err := atomicfile.CopyFile(src, dst, atomicfile.Options{Perm: 0o644, NoDirSync: true}); err != nil {
				return n, fmt.Errorf("checkpoint: copy shared file %s of checkpoint %d: %w", f, m.CheckpointID, err)
			}
		}
		n++
		if !slices.Contains(dirs, filepath.Dir(dst)) {
			dirs = append(dirs, filepath.Dir(dst))
		}
	}
	for _, d := range dirs { // the links and copies, once per directory
		if err := s.sync(d); err != nil {
			return n, err
		}
	}
	if n > 0 {
		s.logger.Info("linked the restored checkpoint's shared files into the job's shared directory",
			"checkpoint_id", m.CheckpointID, "files", n, "from", from, "to", to)
	}
	return n, nil
}

// sameDir reports whether a and b name one directory (the same file when
// both exist, else the same cleaned absolute path).
func sameDir(a, b string) bool {
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	if errA == nil && errB == nil {
		return os.SameFile(sa, sb)
	}
	aa, err1 := filepath.Abs(a)
	ab, err2 := filepath.Abs(b)
	return err1 == nil && err2 == nil && aa == ab
}
