package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2/objstorage/remote"

	"github.com/kstreamd/kstreamd/state"
)

// ErrInconsistent is wrapped by the *InconsistentError Verify returns: the
// checkpoint's metadata promises state its files or entries do not hold,
// so restoring it would lose state or output silently.
var ErrInconsistent = errors.New("checkpoint: inconsistent checkpoint")

// Problem is one inconsistency of a checkpoint.
type Problem struct {
	// Operator is the operator (source, operator or sink) concerned.
	Operator string
	// Subtask is the subtask concerned, or -1 for the whole operator.
	Subtask int
	// Detail says what is missing or wrong.
	Detail string
}

// String is `operator "NAME" subtask I: DETAIL` (without the subtask for
// the whole operator).
func (p Problem) String() string {
	if p.Subtask < 0 {
		return fmt.Sprintf("operator %q: %s", p.Operator, p.Detail)
	}
	return fmt.Sprintf("operator %q subtask %d: %s", p.Operator, p.Subtask, p.Detail)
}

// InconsistentError is Verify's error: the checkpoint or savepoint and
// every problem found, sorted by operator and subtask.
type InconsistentError struct {
	Dir          string
	CheckpointID int64
	Savepoint    bool
	Problems     []Problem
}

// Error names the checkpoint and lists the problems.
func (e *InconsistentError) Error() string {
	kind := "checkpoint"
	if e.Savepoint {
		kind = "savepoint"
	}
	ps := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		ps[i] = p.String()
	}
	return fmt.Sprintf("checkpoint: %s %d (%s) is inconsistent, refusing to restore it: %s", kind, e.CheckpointID, e.Dir, strings.Join(ps, "; "))
}

// Unwrap returns ErrInconsistent.
func (e *InconsistentError) Unwrap() error { return ErrInconsistent }

// VerifyOptions tunes Verify.
type VerifyOptions struct {
	// InferRequired names operator list states that metadata of version 1,
	// which records no required states, is checked for as if required by
	// every operator any of whose subtasks holds an entry of one: an
	// exactly-once sink's committables state (every subtask writes one
	// committable per checkpoint, so a subtask without any lost them).
	InferRequired []string
	// RemoteStore is the store of the job's remote state objects
	// (Storage.RemoteStore): a keyed state shared file "../remote/<object>"
	// of a disaggregated backend is looked up there. nil: the filesystem.
	RemoteStore remote.Storage
}

// Verify checks the checkpoint or savepoint in dir, whose metadata is m,
// without restoring it (Flink's CompletedCheckpoint would fail later, at
// the first read): every operator holds as many subtask states as its
// parallelism; every subtask state decodes; every subtask of an operator
// holds at least one entry of each of the operator's RequiredStates (or,
// for version 1, of VerifyOptions.InferRequired); and every keyed state
// file is where its handle says (private files under dir, shared ones in
// m.SharedDirOf(dir)) with the size recorded (state.VerifyRestoreHandle).
// It returns nil, or an *InconsistentError (wrapping ErrInconsistent)
// naming the checkpoint and every problem, or, when a file cannot be
// looked at (os.Stat failing other than with fs.ErrNotExist), that error,
// which is not ErrInconsistent: it says nothing about the checkpoint, and
// a restart may cure it.
func Verify(dir string, m *Metadata, opts VerifyOptions) error {
	var problems []Problem
	shared := m.SharedDirOf(dir)
	for _, name := range slices.Sorted(maps.Keys(m.Operators)) {
		op := m.Operators[name]
		whole := func(format string, args ...any) {
			problems = append(problems, Problem{Operator: name, Subtask: -1, Detail: fmt.Sprintf(format, args...)})
		}
		if op.Parallelism != len(op.Subtasks) {
			whole("the metadata says parallelism %d but holds %d subtask states", op.Parallelism, len(op.Subtasks))
		}
		states := make([]*TaskState, len(op.Subtasks))
		for i, raw := range op.Subtasks {
			if len(raw) == 0 || string(raw) == "null" {
				continue
			}
			var ts TaskState
			if err := json.Unmarshal(raw, &ts); err != nil {
				problems = append(problems, Problem{Operator: name, Subtask: i, Detail: fmt.Sprintf("state cannot be decoded: %v", err)})
				continue
			}
			states[i] = &ts
		}
		required := op.RequiredStates
		if m.Version < 2 {
			for _, s := range opts.InferRequired {
				if slices.ContainsFunc(states, func(ts *TaskState) bool { return ts != nil && len(ts.Operator[s].Entries) > 0 }) {
					required = append(required, s)
				}
			}
		}
		for i, ts := range states {
			for _, s := range required {
				switch {
				case ts == nil && (len(op.Subtasks[i]) == 0 || string(op.Subtasks[i]) == "null"):
					problems = append(problems, Problem{Operator: name, Subtask: i, Detail: fmt.Sprintf("has no state, but every subtask must hold an entry of %q", s)})
				case ts != nil && len(ts.Operator[s].Entries) == 0:
					problems = append(problems, Problem{Operator: name, Subtask: i, Detail: fmt.Sprintf("holds no entry of %q, which every subtask must hold", s)})
				}
			}
			if ts == nil || ts.Keyed == nil {
				continue
			}
			ps, err := state.VerifyRestoreHandle(state.RestoreHandle{Handle: ts.Keyed, Dir: dir, SharedDir: shared, RemoteStore: opts.RemoteStore})
			if err != nil {
				// Not a verdict: a restart may read it (IncompatibleRestore
				// must not see ErrInconsistent here).
				return fmt.Errorf("checkpoint: verify %s: operator %q subtask %d: %w", dir, name, i, err)
			}
			for _, p := range ps {
				problems = append(problems, Problem{Operator: name, Subtask: i, Detail: p})
			}
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return &InconsistentError{Dir: dir, CheckpointID: m.CheckpointID, Savepoint: m.Savepoint, Problems: problems}
}
