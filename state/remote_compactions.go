package state

import (
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// restoreScheduler is the compaction scheduler (Pebble's
// Options.Experimental.CompactionScheduler) of a disaggregated instance
// opened by a restore. While held it grants no compaction: the restore's
// ingestions put every table of the snapshot into the fresh LSM, and at
// 10M keys a checkpoint names 16-21 L0 tables (flushes not yet compacted),
// so Pebble picked an L0 compaction into the base level (a rewrite of the
// whole base level through the store) in the middle of the restore, which
// then shared the cores with the remaining ingestions, the delta replay
// and the first reads. Held, the compaction waits until the restore is
// done (release), as RocksDB's and Flink's restore paths do with
// automatic compactions disabled during a bulk load. Otherwise it behaves
// as Pebble's default ConcurrencyLimitScheduler: it grants up to
// DBForCompaction.GetAllowedWithoutPermission compactions at once,
// sampled on every request, when a compaction ends and every 100 ms.
//
// Flushes, delete-only and download compactions never ask a scheduler,
// so a write that needs a flush is never held; the restore releases the
// scheduler before its delta replay when L0 already holds as many
// sublevels as make Pebble stop writes (L0StopWritesThreshold: the replay's
// commit would wait for a compaction held until after it).
type restoreScheduler struct {
	db pebble.DBForCompaction // set by Register, before any other call

	mu         sync.Mutex
	held       bool
	running    int
	granting   bool // a grant loop runs (Done, the ticker, release)
	grantDone  *sync.Cond
	registered bool
	stopped    bool
	// heldAtStop is whether compactions were still held when Unregister
	// (the DB's Close) stopped the scheduler.
	heldAtStop bool
	stop, poke chan struct{}
	ticker     sync.WaitGroup
}

var _ pebble.CompactionScheduler = (*restoreScheduler)(nil)

// newRestoreScheduler returns a scheduler that holds compactions until
// release.
func newRestoreScheduler() *restoreScheduler {
	s := &restoreScheduler{held: true, stop: make(chan struct{}), poke: make(chan struct{}, 1)}
	s.grantDone = sync.NewCond(&s.mu)
	return s
}

// Register implements pebble.CompactionScheduler: Pebble's Open calls it
// once.
func (s *restoreScheduler) Register(_ int, db pebble.DBForCompaction) {
	s.db = db
	s.mu.Lock()
	s.registered = true
	s.mu.Unlock()
	s.ticker.Add(1)
	go s.periodic()
}

// Unregister implements pebble.CompactionScheduler: Pebble's Close calls
// it; no grant runs after it returns.
func (s *restoreScheduler) Unregister() {
	s.mu.Lock()
	if !s.stopped {
		s.heldAtStop = s.held
	}
	if s.stopped || !s.registered {
		s.stopped = true
		s.mu.Unlock()
		return
	}
	s.stopped = true
	for s.granting {
		s.grantDone.Wait()
	}
	s.mu.Unlock()
	close(s.stop)
	s.ticker.Wait()
}

// TrySchedule implements pebble.CompactionScheduler: no while held, else
// yes while fewer compactions run than the DB allows.
func (s *restoreScheduler) TrySchedule() (bool, pebble.CompactionGrantHandle) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held || s.stopped {
		return false, nil
	}
	if s.db.GetAllowedWithoutPermission() > s.running {
		s.running++
		return true, s
	}
	return false, nil
}

// UpdateGetAllowedWithoutPermission implements pebble.CompactionScheduler:
// the ticker samples the allowance at once.
func (s *restoreScheduler) UpdateGetAllowedWithoutPermission() { s.wake() }

// Started, MeasureCPU and CumulativeStats implement
// pebble.CompactionGrantHandle (nothing is paced).
func (s *restoreScheduler) Started()                                          {}
func (s *restoreScheduler) MeasureCPU(pebble.CompactionGoroutineKind)         {}
func (s *restoreScheduler) CumulativeStats(pebble.CompactionGrantHandleStats) {}

// Done implements pebble.CompactionGrantHandle: a granted compaction
// ended; a waiting one may start.
func (s *restoreScheduler) Done() {
	s.mu.Lock()
	s.running--
	s.mu.Unlock()
	s.grant()
}

// release ends the hold: a compaction the DB waits to run is granted at
// once (by the ticker's goroutine). Safe to call more than once.
func (s *restoreScheduler) release() {
	s.mu.Lock()
	s.held = false
	s.mu.Unlock()
	s.wake()
}

// isHeld reports whether compactions are still held.
func (s *restoreScheduler) isHeld() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

func (s *restoreScheduler) wake() {
	select {
	case s.poke <- struct{}{}:
	default:
	}
}

func (s *restoreScheduler) periodic() {
	defer s.ticker.Done()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-s.poke:
		case <-s.stop:
			return
		}
		s.grant()
	}
}

// grant starts waiting compactions up to the DB's allowance, one grant
// loop at a time, never holding s.mu while calling the DB (whose
// GetWaitingCompaction and Schedule take the DB's mutex, under which
// the DB calls TrySchedule).
func (s *restoreScheduler) grant() {
	s.mu.Lock()
	for s.granting {
		s.grantDone.Wait()
	}
	if s.held || s.stopped || !s.registered {
		s.mu.Unlock()
		return
	}
	n := s.db.GetAllowedWithoutPermission() - s.running
	if n <= 0 {
		s.mu.Unlock()
		return
	}
	s.granting = true
	s.mu.Unlock()
	for ; n > 0; n-- {
		if waiting, _ := s.db.GetWaitingCompaction(); !waiting {
			break
		}
		// Counted before Schedule: an accepted compaction may end (Done)
		// before Schedule returns.
		s.mu.Lock()
		s.running++
		s.mu.Unlock()
		if !s.db.Schedule(s) {
			s.mu.Lock()
			s.running--
			s.mu.Unlock()
			break
		}
	}
	s.mu.Lock()
	s.granting = false
	s.grantDone.Broadcast()
	s.mu.Unlock()
}
