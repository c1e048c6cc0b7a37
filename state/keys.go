package state

import (
	"encoding/binary"
	"fmt"
)

// The byte layout of keys, shared by the Pebble store and the hashmap
// snapshot file. FORMAT.md specifies it in prose.
//
//	state key:  kg (2 bytes, big-endian) | state id (4 bytes, big-endian) |
//	            uvarint(len(key)) | key | [map user key]
//	format key: 0xFF 'f'                  -> JSON formatInfo
//	meta key:   0xFF 's' | state name     -> JSON stateMeta
//
// Key groups are below 32768, so a state key's first byte is at most 0x7F
// and the 0xFF meta space sorts after every key group.
const (
	metaSpace       = 0xFF
	metaFormatTag   = 'f'
	metaStateTag    = 's'
	stateKeyHeadLen = 6 // key group and state id
)

var (
	formatKey      = []byte{metaSpace, metaFormatTag}
	metaStatePfx   = []byte{metaSpace, metaStateTag}
	keyGroupsStart = []byte{0x00}
	keyGroupsEnd   = []byte{metaSpace} // exclusive upper bound of the key-group space
)

// metaKey returns the meta key of the state named name.
func metaKey(name string) []byte { return append(append([]byte{}, metaStatePfx...), name...) }

// appendGroupPrefix appends the prefix of every key of state id in key
// group kg.
func appendGroupPrefix(dst []byte, kg int, id uint32) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(kg))
	return binary.BigEndian.AppendUint32(dst, id)
}

// appendStateKey appends the key of k: the group prefix, then the
// length-prefixed serialized key. Map entry keys append the user key.
func appendStateKey(dst []byte, k stateKey) []byte {
	dst = appendGroupPrefix(dst, k.kg, k.id)
	dst = binary.AppendUvarint(dst, uint64(len(k.key)))
	return append(dst, k.key...)
}

// parseStateKey splits a state key into its parts; uk is what follows the
// serialized key (a map user key, empty for other states). The returned
// slices alias b.
func parseStateKey(b []byte) (k stateKey, uk []byte, err error) {
	if len(b) < stateKeyHeadLen || b[0] == metaSpace {
		return k, nil, fmt.Errorf("state: state key of %d bytes: %w", len(b), ErrCorrupt)
	}
	k.kg = int(binary.BigEndian.Uint16(b))
	k.id = binary.BigEndian.Uint32(b[2:])
	rest := b[stateKeyHeadLen:]
	n, w := binary.Uvarint(rest)
	if w <= 0 || uint64(len(rest)-w) < n {
		return k, nil, fmt.Errorf("state: state key with a bad key length: %w", ErrCorrupt)
	}
	k.key = rest[w : w+int(n)]
	return k, rest[w+int(n):], nil
}

// prefixEnd returns the smallest key greater than every key starting with
// p, or nil when there is none (p is all 0xFF).
func prefixEnd(p []byte) []byte { return appendPrefixEnd(nil, p) }

// appendPrefixEnd is prefixEnd writing into dst[:0] (p and dst must not
// overlap); nil when p is all 0xff.
func appendPrefixEnd(dst, p []byte) []byte {
	end := append(dst[:0], p...)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}
