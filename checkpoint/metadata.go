package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/kstreamd/kstreamd/internal/atomicfile"
)

// MetadataFile is the name of the file whose atomic creation commits a
// checkpoint or savepoint.
const MetadataFile = "_metadata"

// MetadataVersion is the version of the metadata format this package
// writes (FORMAT.md). It reads every version from MinMetadataVersion on:
// version 1 lacks shared_dir (its shared files are in the shared directory
// beside the checkpoint's, ../shared) and required_states; versions 1 and
// 2 keep a sink's committables as bare Kafka committables under
// LegacyKafkaCommittables, version 3 as envelopes naming the sink type
// under CommittablesState (DecodeCommittables reads both).
const MetadataVersion = 3

// MinMetadataVersion is the oldest metadata version ReadMetadata accepts.
const MinMetadataVersion = 1

// InlineMetadataVersion is the version of a cluster unit's _metadata in
// the store when it carries the checkpoint's small private files
// (Metadata.InlineFiles, FORMAT.md): version 3 plus that field. Only
// Owner.upload writes it, so that a binary older than the field refuses
// such a checkpoint (its ReadMetadata wants 1 to 3) instead of restoring
// it without those files. Owner.Restore writes the files back and the
// local _metadata as version 3 without them, so ReadMetadata and every
// local directory stay at 1 to 3.
const InlineMetadataVersion = 4

// DefaultSharedDir is where a checkpoint's shared files are, relative to
// its directory, when its metadata does not say (version 1): the job's
// shared directory beside chk-<n>.
const DefaultSharedDir = "../shared"

// ErrNoCheckpoint is returned by Latest when the job has no completed
// checkpoint.
var ErrNoCheckpoint = errors.New("checkpoint: no completed checkpoint")

// ErrCorruptMetadata is wrapped by ReadMetadata when a metadata file cannot
// be decoded or has an unknown version.
var ErrCorruptMetadata = errors.New("checkpoint: corrupt metadata")

// Metadata is the content of a _metadata file (JSON; FORMAT.md): everything
// needed to restore the job, with task files referenced by paths relative to
// the checkpoint's directory (private files) or to the shared directory
// SharedDir names.
type Metadata struct {
	// Version is MetadataVersion.
	Version int `json:"version"`
	// Job is the job's name.
	Job string `json:"job"`
	// CheckpointID is n.
	CheckpointID int64 `json:"checkpoint_id"`
	// Savepoint tells a savepoint from a checkpoint.
	Savepoint bool `json:"savepoint"`
	// Timestamp is when the checkpoint was triggered.
	Timestamp time.Time `json:"timestamp"`
	// Completed is when the metadata was written.
	Completed time.Time `json:"completed"`
	// MaxParallelism is the number of key groups; it cannot change across a
	// restore.
	MaxParallelism int `json:"max_parallelism"`
	// Operators maps each operator (source, operator, sink) name to its
	// subtasks' states.
	Operators map[string]OperatorMetadata `json:"operators"`
	// SharedFiles lists every file under the shared directory this
	// checkpoint refers to (relative paths), sorted.
	SharedFiles []string `json:"shared_files,omitempty"`
	// SharedDir is the directory holding SharedFiles: slash-separated and
	// relative to the checkpoint's directory (DefaultSharedDir as written
	// by Storage), or absolute. Empty when there are no shared files, and
	// in version 1, where it means DefaultSharedDir. Read it with
	// SharedDirOf.
	SharedDir string `json:"shared_dir,omitempty"`
	// Bytes is the total size in bytes of the files the checkpoint wrote.
	Bytes int64 `json:"bytes"`
	// InlineFiles holds private files of the checkpoint (its own
	// directory's, not shared ones) by their slash-separated path relative
	// to that directory, with their bytes (base64 in the JSON), in place of
	// an object each: only in a cluster unit's _metadata in the store
	// (version InlineMetadataVersion), where Owner.upload puts a
	// checkpoint's small files (a Pebble checkpoint's MANIFEST, OPTIONS and
	// markers) to save their creates and fsyncs, and Owner.Restore writes
	// them back into the restored directory. Absent everywhere else.
	InlineFiles map[string][]byte `json:"inline_files,omitempty"`
	// Claim, only in a cluster unit's _metadata in the store (version
	// InlineMetadataVersion), names the claim whose owner wrote the
	// checkpoint when the _metadata is the only object Owner.upload
	// wrote into chk-<id> (every private file inline): its create-only
	// write then fences the directory as the owner marker chk-<id>/_claim
	// does, and no marker is written (HEAD MetadataClaim). nil: the
	// checkpoint's owner marker, if any, is chk-<id>/_claim.
	Claim *ClaimMarker `json:"claim,omitempty"`
}

// OperatorMetadata is one operator's part of the metadata.
type OperatorMetadata struct {
	// Parallelism is the operator's parallelism when the checkpoint was taken.
	Parallelism int `json:"parallelism"`
	// Subtasks holds each subtask's state description (index = subtask);
	// null for a stateless subtask. Its shape is TaskState.
	Subtasks []json.RawMessage `json:"subtasks"`
	// UID is the operator's uid when it differs from its name (the key of
	// Operators): what a restore matches the operators of the job by.
	// Absent means the name is the uid (every checkpoint written before
	// uids).
	UID string `json:"uid,omitempty"`
	// RequiredStates names the operator list states every subtask's state
	// must hold with at least one entry (an exactly-once sink's
	// committables: each subtask pre-commits one transaction per
	// checkpoint); Verify refuses a checkpoint lacking one. Sorted; absent
	// in version 1 (see VerifyOptions.InferRequired).
	RequiredStates []string `json:"required_states,omitempty"`
}

// SharedDirOf returns the directory of the shared files of the checkpoint
// in dir whose metadata is m: m.SharedDir resolved against dir, or
// DefaultSharedDir when m does not say.
func (m *Metadata) SharedDirOf(dir string) string {
	sd := m.SharedDir
	if sd == "" {
		sd = DefaultSharedDir
	}
	if filepath.IsAbs(filepath.FromSlash(sd)) {
		return filepath.Clean(filepath.FromSlash(sd))
	}
	return filepath.Join(dir, filepath.FromSlash(sd))
}

// ReadMetadata reads the metadata of the checkpoint or savepoint in dir, of
// any version from MinMetadataVersion to MetadataVersion (Version tells
// which). It returns an error wrapping ErrCorruptMetadata when the file
// cannot be decoded or has an unknown version (or is a cluster unit's
// store _metadata, InlineMetadataVersion, saying so), and the os error when it cannot be read
// (os.ErrNotExist for a checkpoint that never committed).
func ReadMetadata(dir string) (*Metadata, error) {
	b, err := os.ReadFile(filepath.Join(dir, MetadataFile))
	if err != nil {
		return nil, err
	}
	var m Metadata
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorruptMetadata, dir, err)
	}
	if m.Version == InlineMetadataVersion {
		// Only a cluster unit's _metadata in its store is version 4: it
		// needs Owner.Restore (or a cluster savepoint gather) to write its
		// inline files back; read as it is, the checkpoint lacks them.
		return nil, fmt.Errorf("%w: %s: version %d is a cluster unit's checkpoint in its store, with %d of its files inline in the _metadata: restore it through the cluster (its unit's owner) or gather a cluster savepoint from it, not from this directory",
			ErrCorruptMetadata, dir, m.Version, len(m.InlineFiles))
	}
	if m.Version < MinMetadataVersion || m.Version > MetadataVersion {
		return nil, fmt.Errorf("%w: %s: version %d, want %d to %d", ErrCorruptMetadata, dir, m.Version, MinMetadataVersion, MetadataVersion)
	}
	return &m, nil
}

// writeMetadata commits m into dir with atomicfile.Write: it writes the
// temporary file _metadata.tmp (the name Storage.List and the head upload
// recognise as an incomplete commit), fsyncs it, renames it to _metadata
// and fsyncs dir. beforeRename, if not nil, runs just before the rename;
// its error leaves _metadata.tmp behind as a crash there would (tests
// inject failures there).
func writeMetadata(dir string, m *Metadata, beforeRename func() error) error {
	return writeMetadataSync(dir, m, beforeRename, false, nil)
}

// writeMetadataSync is writeMetadata, without either fsync when noSync (a
// cluster unit's staging copy, which the unit's start wipes and whose
// durable copy is the store's: runtime.Barrier.Staging); syncDir, if not
// nil, fsyncs dir (atomicfile.Options.SyncDir).
func writeMetadataSync(dir string, m *Metadata, beforeRename func() error, noSync bool, syncDir func(string) error) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, MetadataFile), b, atomicfile.Options{
		TempName:     MetadataFile + ".tmp",
		BeforeRename: beforeRename,
		NoSync:       noSync,
		SyncDir:      syncDir,
	})
}
