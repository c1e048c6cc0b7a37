package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// MetadataFile is the name of the file whose atomic creation commits a
// checkpoint or savepoint.
const MetadataFile = "_metadata"

// MetadataVersion is the version of the metadata format this package writes
// and reads.
const MetadataVersion = 1

// ErrNoCheckpoint is returned by Latest when the job has no completed
// checkpoint.
var ErrNoCheckpoint = errors.New("checkpoint: no completed checkpoint")

// ErrCorruptMetadata is wrapped by ReadMetadata when a metadata file cannot
// be decoded or has an unknown version.
var ErrCorruptMetadata = errors.New("checkpoint: corrupt metadata")

// Metadata is the content of a _metadata file (JSON; FORMAT.md): everything
// needed to restore the job, with task files referenced by paths relative to
// the checkpoint's directory (private files) or the job's shared directory.
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
	// SharedFiles lists every file under the job's shared directory this
	// checkpoint refers to (relative paths), sorted.
	SharedFiles []string `json:"shared_files,omitempty"`
	// Bytes is the total size in bytes of the files the checkpoint wrote.
	Bytes int64 `json:"bytes"`
}

// OperatorMetadata is one operator's part of the metadata.
type OperatorMetadata struct {
	// Parallelism is the operator's parallelism when the checkpoint was taken.
	Parallelism int `json:"parallelism"`
	// Subtasks holds each subtask's state description (index = subtask);
	// null for a stateless subtask. Its shape is TaskState.
	Subtasks []json.RawMessage `json:"subtasks"`
}

// ReadMetadata reads the metadata of the checkpoint or savepoint in dir. It
// returns an error wrapping ErrCorruptMetadata when the file cannot be
// decoded or has another version, and the os error when it cannot be read
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
	if m.Version != MetadataVersion {
		return nil, fmt.Errorf("%w: %s: version %d, want %d", ErrCorruptMetadata, dir, m.Version, MetadataVersion)
	}
	return &m, nil
}

// writeMetadata commits m into dir: it writes a temporary file, fsyncs it,
// renames it to _metadata and fsyncs dir. beforeRename, if not nil, runs
// just before the rename (tests inject failures there).
func writeMetadata(dir string, m *Metadata, beforeRename func() error) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, MetadataFile+".tmp")
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if beforeRename != nil {
		if err := beforeRename(); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, filepath.Join(dir, MetadataFile)); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
