package state

import (
	"errors"
	"fmt"

	"github.com/kstreamd/kstreamd/state/keygroup"
)

// ErrStateMigration is returned, wrapped in a *StateMigrationError, by the
// Get...State functions when the state stored under a descriptor's name
// (restored from a snapshot, or found when reopening a Pebble directory) is
// incompatible with the descriptor now given: TTL enabled on one side and
// disabled on the other, a different state type, or a different serializer
// name. Check it with errors.Is(err, ErrStateMigration). kstreamd, like
// Flink's StateMigrationException, refuses rather than guessing.
var ErrStateMigration = errors.New("state: state migration required")

// ErrStateConflict is returned by the Get...State functions when a state of
// the same name was already obtained from this backend with a different
// state type, value type, serializer or TTL setting.
var ErrStateConflict = errors.New("state: conflicting state descriptor")

// ErrNoCurrentKey is returned by state operations called before the first
// KeyedStateBackend.SetCurrentKey.
var ErrNoCurrentKey = errors.New("state: no current key")

// ErrKeyGroupOutOfRange is returned, wrapped in a *KeyGroupError, by state
// operations when the current key's key group is not in the backend's key
// group range: the record was routed to the wrong subtask.
var ErrKeyGroupOutOfRange = errors.New("state: key group out of range")

// ErrClosed is returned by operations on a closed backend.
var ErrClosed = errors.New("state: backend closed")

// ErrMaxParallelismChanged is returned by OpenBackend when the restored state
// was written with another max parallelism: key groups are part of the state
// format, so the max parallelism cannot change across a restore.
var ErrMaxParallelismChanged = errors.New("state: max parallelism changed")

// StateMigrationError says which state cannot be restored with the given
// descriptor and why. It matches ErrStateMigration with errors.Is.
type StateMigrationError struct {
	State     string // the state's descriptor name
	Property  string // "ttl", "type" or "serializer"
	Stored    string // the property as stored, e.g. "enabled", "list", "json"
	Requested string // the property the descriptor asks for
}

// Error reports the state, the property and both values, and what to do:
// restore with the old setting, or start the operator's state afresh under
// a new uid (the old uid's state is then dropped only with
// --allow-non-restored-state).
func (e *StateMigrationError) Error() string {
	return fmt.Sprintf("state: state %q: %s was %s when written but the descriptor has %s: state migration is not supported; "+
		"keep the %s %s, or give the operator a new uid so that it starts without state (and run with --allow-non-restored-state to drop the old uid's state)",
		e.State, e.Property, e.Stored, e.Requested, e.Property, e.Stored)
}

// Is reports whether target is ErrStateMigration.
func (e *StateMigrationError) Is(target error) bool { return target == ErrStateMigration }

// KeyGroupError carries the key group of a key a backend does not own. It
// matches ErrKeyGroupOutOfRange with errors.Is.
type KeyGroupError struct {
	KeyGroup int            // the key group of the current key
	Range    keygroup.Range // the key groups the backend owns
}

// Error reports the key group and the owned range.
func (e *KeyGroupError) Error() string {
	return fmt.Sprintf("state: key group %d outside the backend's key group range %s", e.KeyGroup, e.Range)
}

// Is reports whether target is ErrKeyGroupOutOfRange.
func (e *KeyGroupError) Is(target error) bool { return target == ErrKeyGroupOutOfRange }

// ErrCorrupt is wrapped by errors about stored bytes that do not decode:
// a truncated TTL timestamp or list element, a malformed key or snapshot.
// Such errors are fatal for the subtask; restore from a checkpoint.
var ErrCorrupt = errors.New("state: corrupt state")

// joinProblems turns a validation's problem list into one error, or nil.
func joinProblems(what string, problems []string) error {
	if len(problems) == 0 {
		return nil
	}
	msg := what + ": " + problems[0]
	for _, p := range problems[1:] {
		msg += "; " + p
	}
	return errors.New(msg)
}
