package state

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
)

// Serializer turns values of type T into bytes and back, as Flink's
// TypeSerializer does for keyed state. The bytes are what the backends store,
// so a serializer's output is part of the state format: it must be
// deterministic and stable across versions.
//
// Name identifies the byte format. It is stored with each state's metadata;
// restoring a state whose stored serializer name differs from the
// descriptor's is refused with a *StateMigrationError (kstreamd does not
// migrate state between formats, as Flink does when a serializer reports
// compatibility "after migration").
//
// Append appends the encoding of v to dst and returns the extended slice.
// Decode decodes b, which holds exactly one encoding; it must not retain b
// (the backend may reuse or free it) and must return an error, never panic,
// on malformed input.
//
// Serializers must be safe for concurrent use: the Pebble backend may decode
// on goroutines other than the subtask's (async state). Every serializer in
// this package is stateless.
type Serializer[T any] interface {
	Name() string
	Append(dst []byte, v T) ([]byte, error)
	Decode(b []byte) (T, error)
}

// JSONSerializer encodes T with encoding/json (name "json"). It fits any type
// encoding/json handles; values round-trip as JSON does (unexported fields
// are dropped, map keys become strings, numbers in an interface{} become
// float64).
type JSONSerializer[T any] struct{}

// Name returns "json".
func (JSONSerializer[T]) Name() string { return "json" }

// Append appends the JSON encoding of v.
func (JSONSerializer[T]) Append(dst []byte, v T) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return dst, fmt.Errorf("state: json encode: %w", err)
	}
	return append(dst, b...), nil
}

// Decode decodes the JSON in b.
func (JSONSerializer[T]) Decode(b []byte) (T, error) {
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		return v, fmt.Errorf("state: json decode: %w", err)
	}
	return v, nil
}

// BytesSerializer stores a []byte as is (name "bytes"). Decode returns a
// copy; a nil and an empty slice both decode as an empty, non-nil slice.
type BytesSerializer struct{}

// Name returns "bytes".
func (BytesSerializer) Name() string { return "bytes" }

// Append appends v.
func (BytesSerializer) Append(dst []byte, v []byte) ([]byte, error) { return append(dst, v...), nil }

// Decode returns a copy of b.
func (BytesSerializer) Decode(b []byte) ([]byte, error) { return append([]byte{}, b...), nil }

// StringSerializer stores a string as its raw bytes (name "string"), so
// MapState iterates string keys in byte order on the Pebble backend.
type StringSerializer struct{}

// Name returns "string".
func (StringSerializer) Name() string { return "string" }

// Append appends the bytes of v.
func (StringSerializer) Append(dst []byte, v string) ([]byte, error) { return append(dst, v...), nil }

// Decode returns b as a string.
func (StringSerializer) Decode(b []byte) (string, error) { return string(b), nil }

// Int64Serializer stores an int64 in 8 bytes, big-endian with the sign bit
// flipped (name "int64"), so that byte order equals numeric order and
// MapState iterates int64 keys in ascending order on the Pebble backend.
type Int64Serializer struct{}

// Name returns "int64".
func (Int64Serializer) Name() string { return "int64" }

// Append appends the 8-byte encoding of v.
func (Int64Serializer) Append(dst []byte, v int64) ([]byte, error) {
	return binary.BigEndian.AppendUint64(dst, uint64(v)^(1<<63)), nil
}

// Decode decodes 8 bytes; any other length is an error.
func (Int64Serializer) Decode(b []byte) (int64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("state: int64 decode: %d bytes, want 8", len(b))
	}
	return int64(binary.BigEndian.Uint64(b) ^ (1 << 63)), nil
}

// Float64Serializer stores a float64 as its IEEE 754 bits in 8 bytes,
// big-endian (name "float64"). NaN payloads round-trip bit for bit.
type Float64Serializer struct{}

// Name returns "float64".
func (Float64Serializer) Name() string { return "float64" }

// Append appends the 8-byte encoding of v.
func (Float64Serializer) Append(dst []byte, v float64) ([]byte, error) {
	return binary.BigEndian.AppendUint64(dst, math.Float64bits(v)), nil
}

// Decode decodes 8 bytes; any other length is an error.
func (Float64Serializer) Decode(b []byte) (float64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("state: float64 decode: %d bytes, want 8", len(b))
	}
	return math.Float64frombits(binary.BigEndian.Uint64(b)), nil
}

// HeapSerializer is a Serializer whose values a MapState or ValueState
// without TTL on the Pebble backend keeps decoded in the backend's write
// cache, as Flink's heap state keeps objects and Kafka Streams' caching
// store keeps records before serialization: MapState.Put (ValueState.Update)
// stores Copy(v) without serializing it, MapState.Get (ValueState.Value) of
// a cached entry returns View of the kept value without decoding it, and the value is serialized with Append only
// when the cache writes it to Pebble (before every snapshot, scan and
// close, and on eviction), so Pebble and every checkpoint hold the bytes
// they hold without the cache (state/FORMAT.md).
//
// Copy returns a copy of v sharing no memory the caller may change, or the
// error Append would return for v (so a Put fails as it fails when
// serializing). known are values Copy returned earlier (the state's last
// value read and last value put through this handle, of any entries; zero
// values when none): parts of v that are parts of, or equal to parts of, a
// known value (an item of a list read with Get, the item just put under
// another entry) may be shared rather than copied and checked again. The
// state never modifies a value Copy returned. AppendKept is Append of a
// value Copy returned: it may skip the checks Copy made, and must write
// the bytes Append writes. View returns the value Get hands to the caller
// for a kept value: it may share memory with it that nobody modifies (the
// items of a list), but the caller may change the value itself (set
// elements, append) without changing the state; its documentation says
// what it shares. Size estimates the bytes v holds, counted against the
// write cache's bound (BackendConfig.WriteCacheBytes). The methods must be
// safe for concurrent use.
type HeapSerializer[T any] interface {
	Serializer[T]
	Copy(v T, known []T) (T, error)
	AppendKept(dst []byte, v T) ([]byte, error)
	View(v T) T
	Size(v T) int
}

// HeapResizer is an optional interface of a HeapSerializer: Resize(old,
// oldSize, v) returns Size(v) from the value v replaces under the same
// key (old, a value Copy returned, whose Size is oldSize) without
// visiting what the two values share, e.g. the items of a list that did
// not change, when they are many or their memory is cold. The write
// cache calls it instead of Size when an entry that holds old decoded is
// written with v (ValueState.Update, MapState.Put after a read of the
// key). It must equal Size(v) (the cache's byte count is then what Size
// alone makes it) and be safe for concurrent use. Flink's and Kafka
// Streams' heap caches keep no per-entry size to bound; this keeps the
// bound's cost off the unchanged part of a write.
type HeapResizer[T any] interface {
	Resize(old T, oldSize int, v T) int
}
