package state

import (
	"encoding/binary"
	"fmt"
	"time"
)

// UpdateType says which accesses refresh an entry's TTL timestamp, as Flink's
// StateTtlConfig.UpdateType. The zero value is OnCreateAndWrite.
type UpdateType int

const (
	// OnCreateAndWrite refreshes the timestamp when the entry is created or
	// written (Update, Add, Put, ...), not when it is read. The default.
	OnCreateAndWrite UpdateType = iota
	// OnReadAndWrite also refreshes the timestamp on every read that returns
	// the entry, which costs a write per read.
	OnReadAndWrite
)

// String returns Flink's name of the update type.
func (u UpdateType) String() string {
	switch u {
	case OnCreateAndWrite:
		return "OnCreateAndWrite"
	case OnReadAndWrite:
		return "OnReadAndWrite"
	default:
		return fmt.Sprintf("UpdateType(%d)", int(u))
	}
}

// StateVisibility says whether an expired entry that is still stored may be
// returned, as Flink's StateTtlConfig.StateVisibility. The zero value is
// NeverReturnExpired.
type StateVisibility int

const (
	// NeverReturnExpired never returns an expired entry. The default.
	NeverReturnExpired StateVisibility = iota
	// ReturnExpiredIfNotCleanedUp returns an expired entry as long as it is
	// still stored. As in Flink, the read that returns it also removes it, so
	// the next read, like any read after background cleanup, finds nothing.
	ReturnExpiredIfNotCleanedUp
)

// String returns Flink's name of the visibility.
func (v StateVisibility) String() string {
	switch v {
	case NeverReturnExpired:
		return "NeverReturnExpired"
	case ReturnExpiredIfNotCleanedUp:
		return "ReturnExpiredIfNotCleanedUp"
	default:
		return fmt.Sprintf("StateVisibility(%d)", int(v))
	}
}

// StateTtlConfig enables time-to-live for one keyed state, following Flink's
// StateTtlConfig. TTL is measured in processing time, from the backend's
// Clock, at millisecond resolution.
//
// Every value, list element and map entry of a state with TTL is stored with
// an 8-byte last-access timestamp; an entry whose timestamp plus TTL is at or
// before now is expired (Flink's TtlUtils.expired). Expired entries are
// removed when read, in full snapshots (hashmap Snapshot), and by the
// backend's background cleanup (KeyedStateBackend.CleanupStep).
//
// Enabling or disabling TTL for a state that already has data is refused with
// a *StateMigrationError; changing TTL, UpdateType or Visibility is allowed,
// as in Flink.
type StateTtlConfig struct {
	// TTL is how long an entry lives after its last refresh. Required, at
	// least 1ms.
	TTL time.Duration
	// UpdateType says which accesses refresh the timestamp. Default
	// OnCreateAndWrite.
	UpdateType UpdateType
	// Visibility says whether expired entries not yet removed are returned.
	// Default NeverReturnExpired.
	Visibility StateVisibility
	// DisableCleanupInBackground excludes this state from background cleanup
	// (Flink's disableCleanupInBackground); expired entries are then only
	// removed when read or snapshotted.
	DisableCleanupInBackground bool
	// EventTime measures TTL in event time rather than processing time (a
	// kstreamd extension): an access is stamped with the current event
	// time, the later of the accessing record's timestamp and the input
	// watermark (KeyedStateBackend.SetRecordTimestamp, SetWatermark), and
	// an entry expires once the event time passes its stamp plus TTL. A
	// replayed backlog thus expires the same state as live traffic did.
	// Before the first record and watermark the event time is
	// runtime.MinWatermark's and nothing expires.
	EventTime bool
}

// Validate reports every problem of the config, or nil.
func (c *StateTtlConfig) Validate() error {
	var errs []string
	if c.TTL < time.Millisecond {
		errs = append(errs, fmt.Sprintf("ttl %v below the 1ms minimum", c.TTL))
	}
	if c.UpdateType != OnCreateAndWrite && c.UpdateType != OnReadAndWrite {
		errs = append(errs, fmt.Sprintf("unknown update type %d", int(c.UpdateType)))
	}
	if c.Visibility != NeverReturnExpired && c.Visibility != ReturnExpiredIfNotCleanedUp {
		errs = append(errs, fmt.Sprintf("unknown state visibility %d", int(c.Visibility)))
	}
	return joinProblems("state: state ttl config", errs)
}

// ttlPolicy is a validated StateTtlConfig in the form the read and write
// paths use. A nil *ttlPolicy means the state has no TTL.
type ttlPolicy struct {
	ttlMillis     int64
	updateOnRead  bool
	returnExpired bool
	background    bool
	eventTime     bool
}

func newTTLPolicy(c *StateTtlConfig) *ttlPolicy {
	if c == nil {
		return nil
	}
	return &ttlPolicy{
		ttlMillis:     c.TTL.Milliseconds(),
		updateOnRead:  c.UpdateType == OnReadAndWrite,
		returnExpired: c.Visibility == ReturnExpiredIfNotCleanedUp,
		background:    !c.DisableCleanupInBackground,
		eventTime:     c.EventTime,
	}
}

// expired reports whether an entry stamped ts (ms since the epoch) is expired
// at now (ms since the epoch).
func (p *ttlPolicy) expired(ts, now int64) bool { return ts+p.ttlMillis <= now }

// ttlHeaderLen is the size of the timestamp stored in front of every value,
// list element and map entry of a state with TTL.
const ttlHeaderLen = 8

// appendTimestamp appends the 8-byte big-endian timestamp ts (ms since the
// epoch, as an int64's two's-complement bits).
func appendTimestamp(dst []byte, ts int64) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(ts))
}

// splitTimestamp splits a TTL-stamped blob into its timestamp and payload.
func splitTimestamp(b []byte) (int64, []byte, error) {
	if len(b) < ttlHeaderLen {
		return 0, nil, fmt.Errorf("state: ttl value of %d bytes, shorter than its %d-byte timestamp: %w", len(b), ttlHeaderLen, ErrCorrupt)
	}
	return int64(binary.BigEndian.Uint64(b)), b[ttlHeaderLen:], nil
}

// stampInPlace overwrites the timestamp of a TTL-stamped blob.
func stampInPlace(b []byte, ts int64) { binary.BigEndian.PutUint64(b, uint64(ts)) }

// ttlAction is what a read must do to a stored blob after checking its TTL.
type ttlAction int

const (
	ttlKeep    ttlAction = iota // leave the blob as stored
	ttlRemove                   // the blob expired: delete it
	ttlRefresh                  // OnReadAndWrite: the blob was restamped in place, write it back
)

// stamp starts the stored form of a value, list element or map entry: with
// TTL, dst plus the timestamp now; without, dst unchanged.
func (c *stateCore) stamp(dst []byte, now int64) []byte {
	if c.ttl == nil {
		return dst
	}
	return appendTimestamp(dst, now)
}

// now returns the current time in ms since the epoch, or 0 for a state
// without TTL (which never looks at time).
func (c *stateCore) now() int64 {
	if c.ttl == nil {
		return 0
	}
	if c.ttl.eventTime {
		return c.b.eventMillis()
	}
	return c.b.nowMillis()
}

// check applies the state's TTL to a stored blob read at now: it returns the
// serialized payload, whether the read may return it, and what to do with
// the blob. On ttlRefresh the blob's timestamp has been overwritten with now.
func (c *stateCore) check(blob []byte, now int64) (payload []byte, visible bool, act ttlAction, err error) {
	if c.ttl == nil {
		return blob, true, ttlKeep, nil
	}
	ts, payload, err := splitTimestamp(blob)
	if err != nil {
		return nil, false, ttlKeep, err
	}
	if c.ttl.expired(ts, now) {
		return payload, c.ttl.returnExpired, ttlRemove, nil
	}
	if c.ttl.updateOnRead {
		stampInPlace(blob, now)
		return payload, true, ttlRefresh, nil
	}
	return payload, true, ttlKeep, nil
}

// cleanupVisitor returns the background-cleanup visit function of a state
// with TTL: a value or map entry is kept while unexpired; a list keeps its
// unexpired elements and is removed when none is left.
func (c *stateCore) cleanupVisitor() func(v []byte) ([]byte, bool, error) {
	if c.kind == kindList {
		return func(v []byte) ([]byte, bool, error) {
			kept, changed, err := c.filterList(v, c.now())
			if err != nil || !changed {
				return nil, true, err
			}
			return kept, len(kept) > 0, nil
		}
	}
	return func(v []byte) ([]byte, bool, error) {
		ts, _, err := splitTimestamp(v)
		if err != nil {
			return nil, true, err
		}
		return nil, !c.ttl.expired(ts, c.now()), nil
	}
}
