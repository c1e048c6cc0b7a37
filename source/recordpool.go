package source

import (
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
	mu      sync.Mutex
	free    [][]kgo.Record
	records int // sum of cap(free[i])
	// gets and reuses count GetRecords calls and those a pooled slice
	// served (tests).
	gets, reuses atomic.Int64
}

// maxPooledFetchRecords bounds the records a fetchRecordPool keeps for
// reuse (about 10 MiB of kgo.Records): about what a source subtask's
// partitions have in flight (one fetch buffered in franz-go and one
// polled, per partition); a slice put back beyond it is left to the
// collector.
const maxPooledFetchRecords = 1 << 16

// GetRecords implements kgo.PoolRecords: the smallest pooled slice that
// holds n records, else a new one with an eighth to spare (the next
// batches of a partition are about as large, a few records more or less).
func (p *fetchRecordPool) GetRecords(n int) []kgo.Record {
	p.gets.Add(1)
	p.mu.Lock()
	best := -1
	for i, s := range p.free {
		if cap(s) >= n && (best < 0 || cap(s) < cap(p.free[best])) {
			best = i
		}
	}
	if best >= 0 {
		s := p.free[best]
		last := len(p.free) - 1
		p.free[best] = p.free[last]
		p.free[last] = nil
		p.free = p.free[:last]
		p.records -= cap(s)
		p.mu.Unlock()
		p.reuses.Add(1)
		return s[:0]
	}
	p.mu.Unlock()
	return make([]kgo.Record, 0, n+n/8)
}

// PutRecords implements kgo.PoolRecords: s's records were recycled (or
// never kept); it is kept for a later batch unless the pool is full.
func (p *fetchRecordPool) PutRecords(s []kgo.Record) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.records+cap(s) > maxPooledFetchRecords {
		return
	}
	p.free = append(p.free, s)
	p.records += cap(s)
}
