package state

import "github.com/cockroachdb/pebble/v2"

// BlockCache is a Pebble block cache shared by the Pebble backends of one
// process, so that memory for cached blocks is bounded once rather than per
// subtask (Flink's shared RocksDB block cache, state.backend.rocksdb.memory.managed).
//
// Ownership: NewBlockCache returns a cache holding one reference, owned by
// the caller. Every backend opened with it takes its own reference and drops
// it on Close. The caller calls Close when it opens no more backends; the
// memory is freed when the last reference is dropped.
type BlockCache struct {
	c      *pebble.Cache
	closed bool
}

// NewBlockCache returns a block cache of at most sizeBytes bytes; memory is
// allocated on demand.
func NewBlockCache(sizeBytes int64) *BlockCache { return &BlockCache{c: pebble.NewCache(sizeBytes)} }

// Close drops the caller's reference. It is idempotent but not safe for
// concurrent use with itself or with OpenBackend on the same cache.
func (c *BlockCache) Close() {
	if !c.closed {
		c.closed = true
		c.c.Unref()
	}
}
