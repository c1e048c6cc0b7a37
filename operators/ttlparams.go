package operators

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kstreamd/kstreamd/state"
)

// StateTTLParams is the state_ttl: mapping of the params of a stateful
// built-in operator (aggregate, and every later one that keeps keyed state
// without a lifetime of its own): Flink's StateTtlConfig in YAML. Without
// state_ttl (or with an empty mapping) the state lives forever; with it,
// each key's state expires ttl after its last refresh, in processing time,
// and a key seen again after that starts from zero.
//
//	state_ttl:
//	  ttl: 30m                              # required
//	  update_type: on_create_and_write      # or on_read_and_write
//	  visibility: never_return_expired      # or return_expired_if_not_cleaned_up
//	  cleanup: background                   # or on_read
//
// Config maps it to a *state.StateTtlConfig; CheckParams-style validation
// is Check. Switching TTL on or off for an operator whose state already
// exists is refused at restore by the state backend
// (*state.StateMigrationError naming the state); changing ttl, update_type
// or visibility is allowed, as in Flink.
type StateTTLParams struct {
	// TTL is how long a key's state lives after its last refresh; required
	// once state_ttl is given, at least 1ms.
	TTL time.Duration `yaml:"ttl" doc:"How long a key's state lives after its last refresh, in processing time, e.g. 30m; required, at least 1ms."`
	// UpdateType says which accesses refresh the TTL; "" means
	// on_create_and_write.
	UpdateType TTLUpdateType `yaml:"update_type" doc:"Which accesses refresh the TTL: on_create_and_write (writes only; default) or on_read_and_write (reads too)."`
	// Visibility says whether expired state not yet removed is still
	// returned; "" means never_return_expired.
	Visibility TTLVisibility `yaml:"visibility" doc:"never_return_expired (default) or return_expired_if_not_cleaned_up (expired state is used until removed)."`
	// Cleanup says how expired state is removed; "" means background.
	Cleanup TTLCleanup `yaml:"cleanup" doc:"How expired state is removed: background (default: on read, and the subtask scans up to 1000 stored entries every 10ms, so expired state nobody reads leaves state and checkpoints within one scan round) or on_read (only when read or snapshotted)."`
	// Time says which clock TTL counts on; "" means processing.
	Time TTLTime `yaml:"time" doc:"processing (default: the wall clock) or event (the record timestamps and the watermark, so a replayed backlog expires the same state live traffic did)."`
}

// TTLTime is state_ttl.time: state.StateTtlConfig.EventTime in YAML.
type TTLTime string

// The values of TTLTime.
const (
	TTLProcessingTime TTLTime = "processing" // the default
	TTLEventTime      TTLTime = "event"      // state.StateTtlConfig.EventTime
)

// UnmarshalText implements encoding.TextUnmarshaler, refusing an unknown
// value.
func (t *TTLTime) UnmarshalText(text []byte) error {
	return setEnum(t, text, TTLProcessingTime, TTLEventTime)
}

// TTLUpdateType is state_ttl.update_type: state.UpdateType in YAML.
type TTLUpdateType string

// The values of TTLUpdateType.
const (
	TTLOnCreateAndWrite TTLUpdateType = "on_create_and_write" // state.OnCreateAndWrite, the default
	TTLOnReadAndWrite   TTLUpdateType = "on_read_and_write"   // state.OnReadAndWrite
)

// UnmarshalText implements encoding.TextUnmarshaler, refusing an unknown
// value.
func (u *TTLUpdateType) UnmarshalText(text []byte) error {
	return setEnum(u, text, TTLOnCreateAndWrite, TTLOnReadAndWrite)
}

// TTLVisibility is state_ttl.visibility: state.StateVisibility in YAML.
type TTLVisibility string

// The values of TTLVisibility.
const (
	TTLNeverReturnExpired          TTLVisibility = "never_return_expired"             // state.NeverReturnExpired, the default
	TTLReturnExpiredIfNotCleanedUp TTLVisibility = "return_expired_if_not_cleaned_up" // state.ReturnExpiredIfNotCleanedUp
)

// UnmarshalText implements encoding.TextUnmarshaler, refusing an unknown
// value.
func (v *TTLVisibility) UnmarshalText(text []byte) error {
	return setEnum(v, text, TTLNeverReturnExpired, TTLReturnExpiredIfNotCleanedUp)
}

// TTLCleanup is state_ttl.cleanup: background cleanup on or off
// (state.StateTtlConfig.DisableCleanupInBackground).
type TTLCleanup string

// The values of TTLCleanup.
const (
	// TTLCleanupBackground removes expired state when read, in full
	// snapshots and by the backend's incremental background scan. The
	// default.
	TTLCleanupBackground TTLCleanup = "background"
	// TTLCleanupOnRead removes expired state only when read or
	// snapshotted (Flink's disableCleanupInBackground).
	TTLCleanupOnRead TTLCleanup = "on_read"
)

// UnmarshalText implements encoding.TextUnmarshaler, refusing an unknown
// value.
func (c *TTLCleanup) UnmarshalText(text []byte) error {
	return setEnum(c, text, TTLCleanupBackground, TTLCleanupOnRead)
}

// Enabled reports whether state_ttl was given with any field.
func (p StateTTLParams) Enabled() bool {
	return p.TTL != 0 || p.UpdateType != "" || p.Visibility != "" || p.Cleanup != "" || p.Time != ""
}

// Check reports the problems of a state_ttl mapping at field (its path
// relative to params, as "state_ttl"), with ParamsChecker's report.
func (p StateTTLParams) Check(field string, report func(field, msg string)) {
	switch {
	case !p.Enabled():
	case p.TTL == 0:
		report(field+".ttl", "required when state_ttl is set (a duration such as 30m)")
	case p.TTL < time.Millisecond:
		report(field+".ttl", fmt.Sprintf("must be at least 1ms, got %v", p.TTL))
	}
}

// Config returns the state.StateTtlConfig of p, nil when state_ttl was not
// given. p must have passed Check.
func (p StateTTLParams) Config() *state.StateTtlConfig {
	if !p.Enabled() {
		return nil
	}
	c := &state.StateTtlConfig{TTL: p.TTL}
	if p.UpdateType == TTLOnReadAndWrite {
		c.UpdateType = state.OnReadAndWrite
	}
	if p.Visibility == TTLReturnExpiredIfNotCleanedUp {
		c.Visibility = state.ReturnExpiredIfNotCleanedUp
	}
	c.DisableCleanupInBackground = p.Cleanup == TTLCleanupOnRead
	c.EventTime = p.Time == TTLEventTime
	return c
}

// setEnum sets *dst to text when it is one of allowed, and otherwise
// returns an error listing them: the UnmarshalText of the params' enum
// types.
func setEnum[T ~string](dst *T, text []byte, allowed ...T) error {
	v := T(text)
	if slices.Contains(allowed, v) {
		*dst = v
		return nil
	}
	names := make([]string, len(allowed))
	for i, a := range allowed {
		names[i] = string(a)
	}
	return fmt.Errorf("must be one of %s, got %q", strings.Join(names, ", "), text)
}
