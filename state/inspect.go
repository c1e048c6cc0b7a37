package state

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/cockroachdb/pebble/v2"
)

// KeyedStateInfo describes one keyed state as a snapshot records it: the
// meta record of FORMAT.md ("meta key"). Kind is value, list, map,
// reducing or aggregating; Serializer the serializer's Name (a map's
// "<key serializer>/<value serializer>"); TTL whether every value carries
// the 8-byte access timestamp.
type KeyedStateInfo struct {
	Name       string `json:"name"`
	ID         uint32 `json:"id"`
	Kind       string `json:"kind"`
	TTL        bool   `json:"ttl"`
	Serializer string `json:"serializer"`
}

// KeyedEntry is one stored entry of a keyed snapshot, as FORMAT.md lays it
// out: a value, a whole list, or one map entry. The slices are valid only
// during the callback that receives them.
type KeyedEntry struct {
	// State is the entry's state.
	State *KeyedStateInfo
	// KeyGroup is the key group of Key, in [0, max parallelism).
	KeyGroup int
	// Key is the serialized key (what key_by selected).
	Key []byte
	// UserKey is a map entry's serialized user key; empty for the other
	// kinds.
	UserKey []byte
	// Value is the stored blob: with TTL it starts with the timestamp; a
	// list is its length-prefixed elements.
	Value []byte
	// StoredBytes is the size in bytes of the stored key and value
	// together (the state key of FORMAT.md plus the blob).
	StoredBytes int
}

// ReadKeyedSnapshot reads the keyed snapshot rh (one subtask's keyed state
// in a checkpoint or savepoint, RestoreHandle as a restore builds it) the
// way a restore does: OpenBackendRestored with the handle's own backend
// kind, max parallelism and key-group range, so the Pebble files are
// materialized (SSTs hard-linked, incremental checkpoints' shared files
// included) into a temporary directory under scratch ("" means
// os.TempDir()), removed before it returns. It calls fn for every stored
// entry in the order of the Pebble key layout (key group, state id, key,
// user key; a hashmap snapshot's entries are sorted the same way) and
// returns every state the snapshot records, sorted by name, also those
// without entries. fn's error stops the walk and is returned. It returns an
// error wrapping ErrCorrupt when the handle or the stored records cannot be
// decoded. It is the read side of Flink's State Processor API.
func ReadKeyedSnapshot(rh RestoreHandle, scratch string, fn func(KeyedEntry) error) ([]KeyedStateInfo, error) {
	var h keyedHandle
	if err := json.Unmarshal(rh.Handle, &h); err != nil {
		return nil, fmt.Errorf("state: keyed state handle: %v: %w", err, ErrCorrupt)
	}
	tmp, err := os.MkdirTemp(scratch, "kstreamd-state-read-")
	if err != nil {
		return nil, fmt.Errorf("state: read snapshot: %w", err)
	}
	defer os.RemoveAll(tmp)
	cfg := BackendConfig{Kind: h.Backend, MaxParallelism: h.MaxParallelism, KeyGroupRange: h.KeyGroups,
		TTLCleanup: TTLCleanupConfig{Disabled: true}, WriteCacheBytes: -1}
	if h.Backend == KindPebble {
		cfg.Dir = filepath.Join(tmp, "db")
	}
	if h.Remote {
		cfg.Remote = inspectRemote(rh, h, tmp)
	}
	b, err := OpenBackendRestored(cfg, []RestoreHandle{rh})
	if err != nil {
		return nil, err
	}
	defer b.Close()
	c := b.core()
	byID := map[uint32]*KeyedStateInfo{}
	infos := make([]KeyedStateInfo, 0, len(c.metas))
	for _, m := range c.metas {
		infos = append(infos, KeyedStateInfo{Name: m.Name, ID: m.ID, Kind: string(m.Kind), TTL: m.TTL, Serializer: m.Serializer})
	}
	slices.SortFunc(infos, func(a, b KeyedStateInfo) int { return strings.Compare(a.Name, b.Name) })
	for i := range infos {
		byID[infos[i].ID] = &infos[i]
	}
	visit := func(k, v []byte) error {
		sk, uk, err := parseStateKey(k)
		if err != nil {
			return err
		}
		info, ok := byID[sk.id]
		if !ok {
			return fmt.Errorf("state: entry of unknown state id %d: %w", sk.id, ErrCorrupt)
		}
		return fn(KeyedEntry{State: info, KeyGroup: sk.kg, Key: sk.key, UserKey: uk, Value: v, StoredBytes: len(k) + len(v)})
	}
	switch sb := b.(type) {
	case *pebbleBackend:
		err = scanPebble(sb.st.db, visit)
	case *hashmapBackend:
		err = scanHashmap(sb.st, visit)
	default:
		err = fmt.Errorf("state: backend %T cannot be read", b)
	}
	return infos, err
}

// scanPebble calls fn for every key of the key-group space of db, in order.
func scanPebble(db *pebble.DB, fn func(k, v []byte) error) error {
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: keyGroupsStart, UpperBound: keyGroupsEnd})
	if err != nil {
		return fmt.Errorf("state: pebble iter: %w", err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err == nil {
			err = fn(it.Key(), v)
		}
		if err != nil {
			return errors.Join(err, it.Close())
		}
	}
	return it.Close()
}

// scanHashmap calls fn for every entry of s, in the order of their state
// keys (the Pebble order).
func scanHashmap(s *hashmapStore, fn func(k, v []byte) error) error {
	type kv struct{ k, v []byte }
	var all []kv
	for id, t := range s.tables {
		for gi := range t {
			g := &t[gi]
			kg := s.kgs.Start + gi
			for k, v := range g.values {
				all = append(all, kv{appendStateKey(nil, stateKey{id: id, kg: kg, key: []byte(k)}), v})
			}
			for k, m := range g.maps {
				for uk, v := range m {
					all = append(all, kv{append(appendStateKey(nil, stateKey{id: id, kg: kg, key: []byte(k)}), uk...), v})
				}
			}
		}
	}
	slices.SortFunc(all, func(a, b kv) int { return bytes.Compare(a.k, b.k) })
	for _, e := range all {
		if err := fn(e.k, e.v); err != nil {
			return err
		}
	}
	return nil
}

// DecodedEntry is a KeyedEntry made readable: what `kstreamd state dump`
// prints as one JSON line (after the operator and subtask). Each of key,
// user key and value is decoded when the state's serializer is one this
// package knows (int64, float64, string, json, and a timer's key), else
// given as base64 in the *Base64 field, with Serializer naming the
// serializer that wrote it.
type DecodedEntry struct {
	State    string `json:"state"`
	Kind     string `json:"kind"`
	KeyGroup int    `json:"key_group"`
	// Key is the serialized key as a JSON string when it is valid UTF-8;
	// KeyBase64 otherwise.
	Key       *string `json:"key,omitempty"`
	KeyBase64 string  `json:"key_base64,omitempty"`
	// UserKey is a map entry's user key (decoded), UserKeyBase64 its bytes
	// when it cannot be decoded.
	UserKey       json.RawMessage `json:"user_key,omitempty"`
	UserKeyBase64 string          `json:"user_key_base64,omitempty"`
	// Value is the decoded value (a list: an array of its elements); for a
	// list with an undecodable element every element is in ValueBase64.
	Value       json.RawMessage `json:"value,omitempty"`
	ValueBase64 any             `json:"value_base64,omitempty"`
	// Serializer names the serializer of what is given in base64.
	Serializer string `json:"serializer,omitempty"`
	// TTLTimestamp is the last access time stored with a value or map
	// entry of a state with TTL, in ms since the Unix epoch; a list with
	// TTL has one per element, TTLTimestamps.
	TTLTimestamp  *int64  `json:"ttl_timestamp,omitempty"`
	TTLTimestamps []int64 `json:"ttl_timestamps,omitempty"`
}

// Decode returns e in readable form (see DecodedEntry). It returns an
// error wrapping ErrCorrupt when the blob does not have the layout of its
// state's kind (a short TTL header, a bad list length prefix).
func (e KeyedEntry) Decode() (DecodedEntry, error) {
	info := e.State
	d := DecodedEntry{State: info.Name, Kind: info.Kind, KeyGroup: e.KeyGroup}
	if utf8.Valid(e.Key) {
		k := string(e.Key)
		d.Key = &k
	} else {
		d.KeyBase64 = base64.StdEncoding.EncodeToString(e.Key)
	}
	valueSer := info.Serializer
	undecoded := false
	if info.Kind == string(kindMap) {
		keySer, vs, _ := strings.Cut(info.Serializer, "/")
		if info.Serializer == timersSerializer {
			keySer, vs = timersSerializer, ""
		}
		valueSer = vs
		if j, ok := decodeSerialized(keySer, e.UserKey); ok {
			d.UserKey = j
		} else {
			d.UserKeyBase64 = base64.StdEncoding.EncodeToString(e.UserKey)
			undecoded = true
		}
	}
	if info.Kind == string(kindList) {
		var elems []json.RawMessage
		var raw []string
		ok := true
		err := forEachElement(e.Value, func(el []byte) error {
			if info.TTL {
				ts, p, err := splitTimestamp(el)
				if err != nil {
					return err
				}
				d.TTLTimestamps = append(d.TTLTimestamps, ts)
				el = p
			}
			raw = append(raw, base64.StdEncoding.EncodeToString(el))
			j, dok := decodeSerialized(valueSer, el)
			ok = ok && dok
			elems = append(elems, j)
			return nil
		})
		if err != nil {
			return d, err
		}
		if ok {
			if elems == nil {
				elems = []json.RawMessage{}
			}
			d.Value, _ = json.Marshal(elems)
		} else {
			d.ValueBase64, undecoded = raw, true
		}
	} else if info.Serializer != timersSerializer {
		v := e.Value
		if info.TTL {
			ts, p, err := splitTimestamp(v)
			if err != nil {
				return d, err
			}
			d.TTLTimestamp, v = &ts, p
		}
		if j, ok := decodeSerialized(valueSer, v); ok {
			d.Value = j
		} else {
			d.ValueBase64, undecoded = base64.StdEncoding.EncodeToString(v), true
		}
	}
	if undecoded {
		d.Serializer = info.Serializer
	}
	return d, nil
}

// decodeSerialized returns b, written by the serializer called name, as
// JSON, and false when this package does not know how to read it.
func decodeSerialized(name string, b []byte) (json.RawMessage, bool) {
	var v any
	switch name {
	case "int64":
		n, err := Int64Serializer{}.Decode(b)
		if err != nil {
			return nil, false
		}
		v = n
	case "float64":
		f, err := Float64Serializer{}.Decode(b)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, false
		}
		v = f
	case "string":
		if !utf8.Valid(b) {
			return nil, false
		}
		v = string(b)
	case "json":
		if !json.Valid(b) {
			return nil, false
		}
		var buf bytes.Buffer
		if json.Compact(&buf, b) != nil {
			return nil, false
		}
		return buf.Bytes(), true
	case timersSerializer:
		// domain(1) ‖ ts(8, the int64 serializer): FORMAT.md, "Timers".
		if len(b) != 9 || b[0] > 1 {
			return nil, false
		}
		domain := "event_time"
		if b[0] == 1 {
			domain = "processing_time"
		}
		v = map[string]any{"domain": domain, "timestamp": int64(binary.BigEndian.Uint64(b[1:]) ^ (1 << 63))}
	default:
		return nil, false
	}
	j, err := json.Marshal(v)
	return j, err == nil
}
