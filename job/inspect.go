package job

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2/objstorage/remote"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/state"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// The read side of Flink's State Processor API: `kstreamd state ls|dump|
// count` and GET /api/v1/checkpoints/{id} read a checkpoint or savepoint
// through the restore's own path: checkpoint.ReadMetadata and Verify (as
// VerifyCheckpoint), the restorePlan's task states and keyed restore
// handles, and state.ReadKeyedSnapshot (OpenBackendRestored).

// CheckpointSummary is what a checkpoint or savepoint holds, readable: its
// metadata (FORMAT.md) without the task states' raw bytes, and per
// operator its states with entry counts and sizes. It is the JSON of
// `kstreamd state ls --json` and of GET /api/v1/checkpoints/{id}.
type CheckpointSummary struct {
	Dir            string    `json:"dir"`
	Version        int       `json:"version"`
	Job            string    `json:"job"`
	CheckpointID   int64     `json:"checkpoint_id"`
	Savepoint      bool      `json:"savepoint"`
	Timestamp      time.Time `json:"timestamp"`
	Completed      time.Time `json:"completed"`
	MaxParallelism int       `json:"max_parallelism"`
	// Bytes is the metadata's bytes: what the checkpoint wrote.
	Bytes int64 `json:"bytes"`
	// SharedFiles counts the shared files an incremental checkpoint
	// refers to.
	SharedFiles int `json:"shared_files"`
	// Operators are by the name the checkpoint records (the operator's
	// name when it was taken).
	Operators map[string]*OperatorSummary `json:"operators"`
}

// OperatorSummary is one operator's (source's, sink's) part of a
// CheckpointSummary.
type OperatorSummary struct {
	// UID is the operator's uid when it differs from its name.
	UID         string `json:"uid,omitempty"`
	Parallelism int    `json:"parallelism"`
	// Backend is the keyed state backend (hashmap, pebble); "" without
	// keyed state.
	Backend string `json:"backend,omitempty"`
	// KeyedStates are the keyed states, by name, summed over subtasks.
	KeyedStates []KeyedStateSummary `json:"keyed_states,omitempty"`
	// RequiredStates are the operator states every subtask must hold.
	RequiredStates []string `json:"required_states,omitempty"`
	// Subtasks are the subtasks' own parts, index = subtask.
	Subtasks []SubtaskSummary `json:"subtasks"`
}

// KeyedStateSummary is one keyed state: its meta record and its stored
// entries (a map: one per user key) and their bytes (stored keys and
// values, FORMAT.md) over every subtask.
type KeyedStateSummary struct {
	state.KeyedStateInfo
	Entries int64 `json:"entries"`
	Bytes   int64 `json:"bytes"`
}

// SubtaskSummary is one subtask's state in a CheckpointSummary.
type SubtaskSummary struct {
	Subtask int `json:"subtask"`
	// KeyGroups is the key-group range of its keyed state; nil without.
	KeyGroups *keygroup.Range `json:"key_groups,omitempty"`
	// KeyedEntries and KeyedBytes sum its keyed state.
	KeyedEntries int64 `json:"keyed_entries,omitempty"`
	KeyedBytes   int64 `json:"keyed_bytes,omitempty"`
	// OperatorStates are its operator list states, by name, their entries
	// readable (ReadableEntry).
	OperatorStates map[string]ListStateSummary `json:"operator_states,omitempty"`
	// Broadcast holds its broadcast states, each a JSON object of entries.
	Broadcast map[string]json.RawMessage `json:"broadcast,omitempty"`
}

// ListStateSummary is an operator list state: its redistribution mode
// (split, union) and its entries, each ReadableEntry.
type ListStateSummary struct {
	Mode    string            `json:"mode"`
	Entries []json.RawMessage `json:"entries"`
	// Bytes is the size of the entries as stored.
	Bytes int64 `json:"bytes"`
}

// StateFilter selects what DumpCheckpoint and CountCheckpoint read; the
// zero value selects everything.
type StateFilter struct {
	// Operator is an operator's recorded name or uid; "" for all.
	Operator string
	// State is a keyed state's name; "" for all.
	State string
	// KeyGroup, when HasKeyGroup, is the one key group read (only the
	// subtask owning it is opened).
	KeyGroup    int
	HasKeyGroup bool
	// Key, when not nil, is the one serialized key read (only its key
	// group is opened).
	Key []byte
}

// DumpedEntry is one keyed state entry of a checkpoint: a line of
// `kstreamd state dump`.
type DumpedEntry struct {
	Operator string `json:"operator"`
	Subtask  int    `json:"subtask"`
	state.DecodedEntry
}

// KeyGroupCount is what one key group of one operator holds: a line of
// `kstreamd state count`.
type KeyGroupCount struct {
	Operator string `json:"operator"`
	KeyGroup int    `json:"key_group"`
	Entries  int64  `json:"entries"`
	Bytes    int64  `json:"bytes"`
}

// CheckpointReader reads a checkpoint or savepoint as a restore does
// (Flink's State Processor API, read side): `kstreamd state` and GET
// /api/v1/checkpoints/{id}. The zero value reads everything from the
// filesystem.
type CheckpointReader struct {
	// Scratch is where Pebble snapshots are materialized while they are
	// read ("": os.TempDir()).
	Scratch string
	// RemoteStore, if not nil, holds the objects of disaggregated keyed
	// state (state.remote with store s3) that checkpoints refer to as
	// "../remote/<object>": they are verified and read there. nil: the
	// filesystem, the job's checkpoint directory's remote directory.
	RemoteStore remote.Storage
}

// openForRead verifies the checkpoint in dir as a restore does
// (VerifyCheckpoint, with remote objects looked up on store when not nil)
// and returns its restore plan: the metadata, with the shared files where
// the metadata says they are.
func openForRead(dir string, store remote.Storage) (restorePlan, error) {
	m, err := checkpoint.ReadMetadata(dir)
	if err != nil {
		return restorePlan{}, err
	}
	if err := verifyRemote(dir, m, store); err != nil {
		return restorePlan{}, err
	}
	return restorePlan{dir: dir, meta: m, sharedDir: m.SharedDirOf(dir), maxP: m.MaxParallelism}, nil
}

// readKeyed calls fn with every keyed entry of operator name's subtasks
// that f selects (f.State, f.KeyGroup, f.Key; not f.Operator), in subtask
// and key order, and returns the states each subtask's snapshot records.
// scratch is where Pebble snapshots are materialized ("": os.TempDir()).
func (rp restorePlan) readKeyed(name string, r CheckpointReader, f StateFilter, fn func(sub int, e state.KeyedEntry) error) ([][]state.KeyedStateInfo, []checkpoint.TaskState, error) {
	old, err := rp.taskStatesOf(name)
	if err != nil {
		return nil, nil, err
	}
	kg, hasKG := f.KeyGroup, f.HasKeyGroup
	if f.Key != nil {
		k := keygroup.Assign(f.Key, rp.maxP)
		if hasKG && k != kg {
			return make([][]state.KeyedStateInfo, len(old)), old, nil // the key is in another key group: nothing
		}
		kg, hasKG = k, true
	}
	infos := make([][]state.KeyedStateInfo, len(old))
	for i, ts := range old {
		if ts.Keyed == nil || ts.KeyGroups == nil || hasKG && !ts.KeyGroups.Contains(kg) {
			continue
		}
		rh := rp.keyedHandle(ts.Keyed)
		rh.RemoteStore = r.RemoteStore
		infos[i], err = state.ReadKeyedSnapshot(rh, r.Scratch, func(e state.KeyedEntry) error {
			if f.State != "" && e.State.Name != f.State || hasKG && e.KeyGroup != kg || f.Key != nil && !bytes.Equal(e.Key, f.Key) {
				return nil
			}
			return fn(i, e)
		})
		if err != nil {
			return nil, nil, fmt.Errorf("job: read %s: operator %q subtask %d: %w", rp.dir, name, i, err)
		}
	}
	return infos, old, nil
}

// operatorNames returns the recorded names of the operators f selects
// (by name or uid), sorted; an error names the operators there are when
// f.Operator matches none.
func (rp restorePlan) operatorNames(f StateFilter) ([]string, error) {
	all := slices.Sorted(func(yield func(string) bool) {
		for n := range rp.meta.Operators {
			if !yield(n) {
				return
			}
		}
	})
	if f.Operator == "" {
		return all, nil
	}
	for _, n := range all {
		if n == f.Operator || rp.meta.Operators[n].UID == f.Operator {
			return []string{n}, nil
		}
	}
	return nil, fmt.Errorf("job: %s holds no operator %q (it holds %v)", rp.dir, f.Operator, all)
}

// SummarizeCheckpoint reads the checkpoint or savepoint in dir as a restore
// would (refusing an inconsistent one as VerifyCheckpoint does) and
// returns its summary; scratch is where Pebble snapshots are materialized
// while they are read ("": os.TempDir()).
func SummarizeCheckpoint(dir, scratch string) (*CheckpointSummary, error) {
	return CheckpointReader{Scratch: scratch}.Summarize(dir)
}

// Summarize is SummarizeCheckpoint with r's scratch directory and remote
// store.
func (r CheckpointReader) Summarize(dir string) (*CheckpointSummary, error) {
	rp, err := openForRead(dir, r.RemoteStore)
	if err != nil {
		return nil, err
	}
	m := rp.meta
	out := &CheckpointSummary{Dir: dir, Version: m.Version, Job: m.Job, CheckpointID: m.CheckpointID, Savepoint: m.Savepoint,
		Timestamp: m.Timestamp, Completed: m.Completed, MaxParallelism: m.MaxParallelism, Bytes: m.Bytes,
		SharedFiles: len(m.SharedFiles), Operators: map[string]*OperatorSummary{}}
	for name, om := range m.Operators {
		ops := &OperatorSummary{UID: om.UID, Parallelism: om.Parallelism, RequiredStates: om.RequiredStates, Subtasks: make([]SubtaskSummary, len(om.Subtasks))}
		sums := map[string]*KeyedStateSummary{}
		infos, old, err := rp.readKeyed(name, r, StateFilter{}, func(sub int, e state.KeyedEntry) error {
			s := sums[e.State.Name]
			if s == nil {
				s = &KeyedStateSummary{KeyedStateInfo: *e.State}
				sums[e.State.Name] = s
			}
			s.Entries++
			s.Bytes += int64(e.StoredBytes)
			ops.Subtasks[sub].KeyedEntries++
			ops.Subtasks[sub].KeyedBytes += int64(e.StoredBytes)
			return nil
		})
		if err != nil {
			return nil, err
		}
		for i, ts := range old {
			sub := &ops.Subtasks[i]
			sub.Subtask, sub.KeyGroups, sub.Broadcast = i, ts.KeyGroups, ts.Broadcast
			if ts.Keyed != nil {
				var h struct {
					Backend string `json:"backend"`
				}
				_ = json.Unmarshal(ts.Keyed, &h) // ReadKeyedSnapshot decoded it already
				ops.Backend = h.Backend
			}
			for ln, ls := range ts.Operator {
				if sub.OperatorStates == nil {
					sub.OperatorStates = map[string]ListStateSummary{}
				}
				l := ListStateSummary{Mode: ls.Mode, Entries: []json.RawMessage{}}
				for _, e := range ls.Entries {
					l.Entries = append(l.Entries, ReadableEntry(ln, e))
					l.Bytes += int64(len(e))
				}
				sub.OperatorStates[ln] = l
			}
			for _, in := range infos[i] {
				if sums[in.Name] == nil {
					sums[in.Name] = &KeyedStateSummary{KeyedStateInfo: in}
				}
			}
		}
		for _, n := range slices.Sorted(func(yield func(string) bool) {
			for n := range sums {
				if !yield(n) {
					return
				}
			}
		}) {
			ops.KeyedStates = append(ops.KeyedStates, *sums[n])
		}
		out.Operators[name] = ops
	}
	return out, nil
}

// ReadableEntry returns an operator list state entry as JSON: the entry
// itself when it is JSON (a source's split), with a committable envelope's
// data (checkpoint.Committable) given as JSON too when it is; otherwise
// the entry's bytes as a base64 JSON string.
func ReadableEntry(stateName string, e []byte) json.RawMessage {
	if !json.Valid(e) {
		j, _ := json.Marshal(base64.StdEncoding.EncodeToString(e))
		return j
	}
	if stateName == checkpoint.CommittablesState {
		var c checkpoint.Committable
		if json.Unmarshal(e, &c) == nil && c.Sink != "" && json.Valid(c.Data) {
			j, err := json.Marshal(struct {
				Sink string          `json:"sink"`
				Data json.RawMessage `json:"data"`
			}{c.Sink, c.Data})
			if err == nil {
				return j
			}
		}
	}
	var buf bytes.Buffer
	if json.Compact(&buf, e) != nil {
		return e
	}
	return buf.Bytes()
}

// DumpCheckpoint calls fn with every keyed state entry of the checkpoint
// or savepoint in dir that f selects, decoded (state.KeyedEntry.Decode),
// by operator name, subtask, then key order; see SummarizeCheckpoint for
// scratch and the checks.
func DumpCheckpoint(dir, scratch string, f StateFilter, fn func(DumpedEntry) error) error {
	return CheckpointReader{Scratch: scratch}.Dump(dir, f, fn)
}

// Dump is DumpCheckpoint with r's scratch directory and remote store.
func (r CheckpointReader) Dump(dir string, f StateFilter, fn func(DumpedEntry) error) error {
	rp, err := openForRead(dir, r.RemoteStore)
	if err != nil {
		return err
	}
	names, err := rp.operatorNames(f)
	if err != nil {
		return err
	}
	for _, name := range names {
		_, _, err := rp.readKeyed(name, r, f, func(sub int, e state.KeyedEntry) error {
			d, err := e.Decode()
			if err != nil {
				return err
			}
			return fn(DumpedEntry{Operator: name, Subtask: sub, DecodedEntry: d})
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// CountCheckpoint returns the keyed entries and their bytes per operator
// and key group of the checkpoint or savepoint in dir that f selects,
// sorted by operator and key group; key groups without entries are left
// out. See SummarizeCheckpoint for scratch and the checks.
func CountCheckpoint(dir, scratch string, f StateFilter) ([]KeyGroupCount, error) {
	return CheckpointReader{Scratch: scratch}.Count(dir, f)
}

// Count is CountCheckpoint with r's scratch directory and remote store.
func (r CheckpointReader) Count(dir string, f StateFilter) ([]KeyGroupCount, error) {
	rp, err := openForRead(dir, r.RemoteStore)
	if err != nil {
		return nil, err
	}
	names, err := rp.operatorNames(f)
	if err != nil {
		return nil, err
	}
	var out []KeyGroupCount
	for _, name := range names {
		byKG := map[int]*KeyGroupCount{}
		_, _, err := rp.readKeyed(name, r, f, func(_ int, e state.KeyedEntry) error {
			c := byKG[e.KeyGroup]
			if c == nil {
				c = &KeyGroupCount{Operator: name, KeyGroup: e.KeyGroup}
				byKG[e.KeyGroup] = c
			}
			c.Entries++
			c.Bytes += int64(e.StoredBytes)
			return nil
		})
		if err != nil {
			return nil, err
		}
		for _, kg := range slices.Sorted(func(yield func(int) bool) {
			for k := range byKG {
				if !yield(k) {
					return
				}
			}
		}) {
			out = append(out, *byKG[kg])
		}
	}
	return out, nil
}
