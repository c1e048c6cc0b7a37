package state

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/kstreamd/kstreamd/state/keygroup"
)

// ErrUnknownState is wrapped by the *UnknownStateError QueryKey returns for
// a state name the backend does not hold.
var ErrUnknownState = errors.New("state: unknown state")

// ErrKeyInFlight is returned by AsyncExecutionController-aware readers
// (operators.KeyedOperator.QueryState) when a record of the queried key is
// still in flight in the async state layer, so that its state is not yet
// consistent with the records processed so far: the caller asks again once
// the record finished.
var ErrKeyInFlight = errors.New("state: a record of the key is in flight")

// UnknownStateError is returned by QueryKey for a state the backend does
// not hold: neither obtained in this run nor restored. Known lists the
// states it holds, sorted. It wraps ErrUnknownState.
type UnknownStateError struct {
	State string
	Known []string
}

// Error implements error.
func (e *UnknownStateError) Error() string {
	if len(e.Known) == 0 {
		return fmt.Sprintf("state: no keyed state %q: the operator holds no keyed state yet", e.State)
	}
	return fmt.Sprintf("state: no keyed state %q; the operator holds %s", e.State, strings.Join(e.Known, ", "))
}

// Unwrap returns ErrUnknownState.
func (e *UnknownStateError) Unwrap() error { return ErrUnknownState }

// KeyQueryResult is the state of one key as QueryKey reads it: what GET
// /api/v1/state/{operator}/{state} answers (Flink's queryable state,
// Kafka Streams' interactive queries). Found is false when the key has
// nothing visible in the state (never written, cleared, or expired under
// its TTL); Value and Entries are then empty. Values are decoded as
// `kstreamd state dump` decodes them (KeyedEntry.Decode): by the
// serializer the state was declared with, else given as base64 with the
// serializer named.
type KeyQueryResult struct {
	// State, Kind (value, list, map, reducing or aggregating) and
	// Serializer are the state's, as its descriptor declared them.
	State      string `json:"state"`
	Kind       string `json:"kind"`
	Serializer string `json:"serializer"`
	// TTL is whether the state has a time-to-live: an expired value, list
	// element or map entry is left out as if absent.
	TTL bool `json:"ttl"`
	// KeyGroup is the key group of the key, in [0, max parallelism).
	KeyGroup int  `json:"key_group"`
	Found    bool `json:"found"`
	// Value is a value, reducing or aggregating state's value, or a list
	// state's elements as an array (expired elements left out); absent
	// for a map state and when not Found. ValueBase64 replaces it when the
	// serializer is not one that can be decoded (a string, or for a list
	// an array of strings).
	Value       json.RawMessage `json:"value,omitempty"`
	ValueBase64 any             `json:"value_base64,omitempty"`
	// Entries are a map state's entries in the order of their serialized
	// user keys (expired ones left out); nil for the other kinds.
	Entries []MapEntryResult `json:"entries,omitempty"`
	// TTLTimestamp is the stored last-access time of a value with TTL, in
	// ms since the Unix epoch (TTLTimestamps: per list element).
	TTLTimestamp  *int64  `json:"ttl_timestamp,omitempty"`
	TTLTimestamps []int64 `json:"ttl_timestamps,omitempty"`
	// TTLUnjudged is set when the state has TTL but was not obtained by
	// the operator in this run (restored, not used since), so its TTL
	// settings are unknown and nothing was left out as expired.
	TTLUnjudged bool `json:"ttl_unjudged,omitempty"`
}

// MapEntryResult is one map state entry of a KeyQueryResult: its user key
// and value decoded (or in base64 when they cannot be), with its TTL
// timestamp when the state has TTL.
type MapEntryResult struct {
	Key          json.RawMessage `json:"key,omitempty"`
	KeyBase64    string          `json:"key_base64,omitempty"`
	Value        json.RawMessage `json:"value,omitempty"`
	ValueBase64  any             `json:"value_base64,omitempty"`
	TTLTimestamp *int64          `json:"ttl_timestamp,omitempty"`
}

// KeyedStateNames returns the names of the keyed states b holds (obtained
// in this run or restored), sorted. Owner goroutine only.
func KeyedStateNames(b KeyedStateBackend) []string {
	c := b.core()
	names := make([]string, 0, len(c.metas))
	for n := range c.metas {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// QueryKey reads the state called name of key (a serialized key, as key_by
// selected it) from b without changing anything: no TTL timestamp is
// refreshed, nothing expired is removed, the current key is left as it
// is. TTL is honoured as NeverReturnExpired does: an expired value, list
// element or map entry is absent, judged at the time the state's reads
// would judge it (processing time from the backend's clock, or the event
// time of StateTtlConfig.EventTime). It must run on the goroutine that
// owns b, between records (the keyed operators' QueryState does so from
// the subtask's mailbox), so that it sees the effects of exactly the
// records processed so far.
//
// It returns a *UnknownStateError for a state b does not hold, a
// *KeyGroupError when key's key group is not b's, ErrClosed after Close,
// and an error wrapping ErrCorrupt for a stored blob that does not have
// its kind's layout. A key with nothing stored is not an error: Found is
// false.
func QueryKey(b KeyedStateBackend, name string, key []byte) (KeyQueryResult, error) {
	c := b.core()
	if c.closed {
		return KeyQueryResult{}, ErrClosed
	}
	meta, ok := c.metas[name]
	if !ok {
		return KeyQueryResult{}, &UnknownStateError{State: name, Known: KeyedStateNames(b)}
	}
	kg := keygroup.Assign(key, c.maxP)
	if !c.kgs.Contains(kg) {
		return KeyQueryResult{}, &KeyGroupError{KeyGroup: kg, Range: c.kgs}
	}
	res := KeyQueryResult{State: name, Kind: string(meta.Kind), Serializer: meta.Serializer, TTL: meta.TTL, KeyGroup: kg}
	// The policy of the state as obtained in this run; now is when its
	// reads judge expiry.
	var ttl *ttlPolicy
	var now int64
	if r, ok := c.states[name]; ok && r.core.ttl != nil {
		ttl, now = r.core.ttl, r.core.now()
	}
	res.TTLUnjudged = meta.TTL && ttl == nil
	info := &KeyedStateInfo{Name: meta.Name, ID: meta.ID, Kind: string(meta.Kind), TTL: meta.TTL, Serializer: meta.Serializer}
	sk := stateKey{id: meta.ID, kg: kg, key: key}
	live := func(blob []byte) (bool, error) {
		if ttl == nil {
			return true, nil
		}
		ts, _, err := splitTimestamp(blob)
		if err != nil {
			return false, err
		}
		return !ttl.expired(ts, now), nil
	}
	if meta.Kind == kindMap {
		var entries []KeyedEntry
		err := c.st.scanEntries(sk, func(uk, v []byte) (bool, error) {
			ok, err := live(v)
			if ok {
				entries = append(entries, KeyedEntry{State: info, KeyGroup: kg, Key: key, UserKey: bytes.Clone(uk), Value: bytes.Clone(v)})
			}
			return true, err
		})
		if err != nil {
			return res, err
		}
		slices.SortFunc(entries, func(a, b KeyedEntry) int { return bytes.Compare(a.UserKey, b.UserKey) })
		for _, e := range entries {
			d, err := e.Decode()
			if err != nil {
				return res, err
			}
			res.Entries = append(res.Entries, MapEntryResult{Key: d.UserKey, KeyBase64: d.UserKeyBase64,
				Value: d.Value, ValueBase64: d.ValueBase64, TTLTimestamp: d.TTLTimestamp})
		}
		res.Found = len(res.Entries) > 0
		return res, nil
	}
	blob, found, err := c.st.get(sk)
	if err != nil || !found {
		return res, err
	}
	if meta.Kind == kindList && ttl != nil {
		// Keep the elements not expired.
		var kept []byte
		err := forEachElement(blob, func(el []byte) error {
			ok, err := live(el)
			if ok {
				kept = binary.AppendUvarint(kept, uint64(len(el)))
				kept = append(kept, el...)
			}
			return err
		})
		if err != nil {
			return res, err
		}
		blob = kept
	} else if ok, err := live(blob); err != nil || !ok {
		return res, err
	}
	if len(blob) == 0 && meta.Kind == kindList {
		return res, nil
	}
	d, err := KeyedEntry{State: info, KeyGroup: kg, Key: key, Value: blob}.Decode()
	if err != nil {
		return res, err
	}
	res.Found = true
	res.Value, res.ValueBase64, res.TTLTimestamp, res.TTLTimestamps = d.Value, d.ValueBase64, d.TTLTimestamp, d.TTLTimestamps
	return res, nil
}

// KeyInFlight reports whether a record of key is in flight in c (its
// function returned but state requests or continuations of it are
// pending, or it waits behind another record of the key): until it
// finishes, the key's state does not yet reflect it. Subtask goroutine
// only.
func (c *AsyncExecutionController) KeyInFlight(key []byte) bool {
	_, busy := c.keys[string(key)]
	return busy
}
