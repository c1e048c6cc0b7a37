package source

import (
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
)

// fetchRecordPool is a source client's pool of the slices franz-go decodes
// fetched record batches into (its kgo.PoolRecords, given with
// kgo.WithPools): one []kgo.Record per batch, about 150 bytes per record,
// which without the pool is a new allocation for every batch (1.5 MB for
// a 1 MB batch of 100-byte records), zeroed, scanned by the collector and
// left to it once the batch's records were read.
//
// Ownership (the contract of kgo.Record.Recycle): the source recycles each
// fetched record once it is done with it, at the end of emitRead; a
// batch's slice comes back to the pool (PutRecords) when franz-go counted
// every kept record of it recycled. Nothing of the source keeps a
// *kgo.Record after emitRead (watermark alignment holds records until it
// emits them, through emitRead), and a runtime.Record takes the record's
// key, value and header slices, not the kgo.Record: those point into the
// fetch's own buffers (its decompressed batch), which this pool does not
// touch, so what a chained operator keeps of a record stays valid after
// the record was recycled. Recycle zeroes the record; a batch's records
// franz-go did not keep (below the offset asked for) are not recycled and
// stay as they are until the slice is decoded into again.
//
// Safe for concurrent use: franz-go's fetch goroutines get, the source's
// goroutine puts (through Recycle).
type fetchRecordPool struct {
	mu sync.Mutex
	// free are the slices put back, by class: free[c] have capacity
	// 1<<(c+minRecordClass) (poolClass).
	free    [recordClasses][][]kgo.Record
	records int // the capacities of free's slices, summed
	// gets, reuses and drops count GetRecords calls, those a pooled
	// slice served, and the slices PutRecords left to the collector
	// (tests).
	gets, reuses, drops atomic.Int64
}

// Record slice classes: capacities are powers of two from
// 1<<minRecordClass to 1<<(minRecordClass+recordClasses-1) records (a
// batch of a Kafka default 1 MB holds about 10,000 100-byte records); a
// batch of more records gets a slice of its own, never pooled.
const (
	minRecordClass = 6
	recordClasses  = 12
)

// maxPooledFetchRecords bounds the records a fetchRecordPool keeps for
// reuse (about 19 MiB of kgo.Records): about what a source subtask has in
// flight under a backlog (the fetch being read and the next one, which
// franz-go decodes meanwhile, up to 1 MiB of a batch per partition); a
// slice put back beyond it is left to the collector.
const maxPooledFetchRecords = 1 << 17

// poolClass returns the class of a slice for n records: the smallest c
// with n <= 1<<(c+minRecordClass), and false when n is larger than the
// largest class.
func poolClass(n int) (int, bool) {
	c := max(bits.Len(uint(max(n, 1)-1))-minRecordClass, 0)
	return c, c < recordClasses
}

// GetRecords implements kgo.PoolRecords: a pooled slice of n's class, else
// a new one of the class's capacity (a partition's batches differ in
// size, by as many records as its producer's lingers took).
func (p *fetchRecordPool) GetRecords(n int) []kgo.Record {
	p.gets.Add(1)
	c, ok := poolClass(n)
	if !ok {
		return make([]kgo.Record, 0, n)
	}
	p.mu.Lock()
	if free := p.free[c]; len(free) > 0 {
		s := free[len(free)-1]
		free[len(free)-1] = nil
		p.free[c] = free[:len(free)-1]
		p.records -= cap(s)
		p.mu.Unlock()
		p.reuses.Add(1)
		return s[:0]
	}
	p.mu.Unlock()
	return make([]kgo.Record, 0, 1<<(c+minRecordClass))
}

// PutRecords implements kgo.PoolRecords: s's records were recycled (or
// never kept); it is kept for a later batch of its class unless the pool
// is full or s is of no class (a capacity GetRecords did not make).
func (p *fetchRecordPool) PutRecords(s []kgo.Record) {
	c, ok := poolClass(cap(s))
	if !ok || cap(s) != 1<<(c+minRecordClass) {
		p.drops.Add(1)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.records+cap(s) > maxPooledFetchRecords {
		p.drops.Add(1)
		return
	}
	p.free[c] = append(p.free[c], s)
	p.records += cap(s)
}
