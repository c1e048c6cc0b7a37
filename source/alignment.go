package source

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// DefaultAlignmentUpdateInterval is WatermarkAlignment.UpdateInterval's
// default. Flink's is 1s, because its readers report to the source
// coordinator over RPC; here the subtasks of a group share their
// watermarks in memory, so a shorter interval costs nothing measurable.
const DefaultAlignmentUpdateInterval = 100 * time.Millisecond

// WatermarkAlignment configures a source's watermark alignment (Flink's
// FLIP-182 and FLIP-217, WatermarkStrategy.withWatermarkAlignment(group,
// maxAllowedWatermarkDrift, updateInterval)): a partition whose watermark
// runs more than MaxDrift ahead of its group's minimum watermark has its
// fetched records held and is paused (franz-go's PauseFetchPartitions)
// until the minimum catches up (aligner), so that
// a source reading a backlog reads its partitions at about the same event
// time and the operators downstream, whose watermark is the least of them,
// buffer less. Pausing is not state: a checkpoint holds the offsets
// emitted, as without it, and a restore starts with every partition
// resumed. It never changes which records are emitted nor their order
// within a partition; only which partition is read when.
type WatermarkAlignment struct {
	// Group, if not nil, is shared by the source subtasks aligned with
	// each other (sources[].watermark_alignment.group: by default each
	// source's subtasks form a group): a partition is held back by the
	// least watermark of every subtask in it. Nil: the subtask aligns its
	// own partitions only.
	Group *AlignmentGroup
	// MaxDrift is how far ahead of the group's minimum watermark a
	// partition's may be; 0 turns alignment off.
	MaxDrift time.Duration
	// UpdateInterval is how often a subtask whose partitions are all
	// paused wakes up to look at the group's minimum again; it also looks
	// after every poll, and the member whose progress lifts the minimum
	// far enough wakes it at once (alignMember.need). 0 means
	// DefaultAlignmentUpdateInterval.
	UpdateInterval time.Duration
}

// noAlignmentWatermark is what a subtask publishes when none of its
// partitions holds the group back.
const noAlignmentWatermark = math.MaxInt64

// AlignmentGroup is a watermark alignment group (Flink's watermark group):
// the source subtasks of one process that align their partitions with
// each other. Each member publishes the least watermark of the partitions
// it still has records to read from; the group's minimum is the least of
// those. Safe for concurrent use.
type AlignmentGroup struct {
	name    string
	mu      sync.Mutex
	members []*alignMember
}

// NewAlignmentGroup returns an empty group called name (for logs).
func NewAlignmentGroup(name string) *AlignmentGroup { return &AlignmentGroup{name: name} }

// Name returns the group's name.
func (g *AlignmentGroup) Name() string { return g.name }

// alignMember is one subtask's entry in its group.
type alignMember struct {
	g  *AlignmentGroup
	wm atomic.Int64 // ms; noAlignmentWatermark when it holds nothing back, noTimestamp when it holds the group at its start
	// need is the least group watermark at which one of the member's
	// paused partitions may go on (its largest event time minus
	// MaxDrift), ms; noAlignmentWatermark while it waits for none. A
	// member that lifts the group's least to need or beyond wakes the
	// waiting member at once (min), instead of leaving it asleep in its
	// poll until UpdateInterval ends.
	need atomic.Int64
	// wake interrupts the member's wait (the subtask's poll: it posts to
	// its mailbox); nil: nobody to wake.
	wake func()
}

// join adds a member that holds the group at its start (as a partition
// without a timestamp does) until it publishes.
func (g *AlignmentGroup) join() *alignMember {
	m := &alignMember{g: g}
	m.wm.Store(noTimestamp)
	m.need.Store(noAlignmentWatermark)
	g.mu.Lock()
	g.members = append(g.members, m)
	g.mu.Unlock()
	return m
}

// leave removes m: a stopped subtask holds nobody back.
func (m *alignMember) leave() {
	g := m.g
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, o := range g.members {
		if o == m {
			g.members = append(g.members[:i], g.members[i+1:]...)
			return
		}
	}
}

// min returns the least watermark the group's members published, ms
// (noAlignmentWatermark when none holds anything back), and wakes each
// member whose paused partitions wait for a least it reached (need): the
// member that moved the least looks here right after publishing, so a
// waiting subtask resumes within the publisher's pass rather than at its
// next UpdateInterval.
func (g *AlignmentGroup) min() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	lowest := int64(noAlignmentWatermark)
	for _, m := range g.members {
		lowest = min(lowest, m.wm.Load())
	}
	for _, m := range g.members {
		if need := m.need.Load(); need != noAlignmentWatermark && lowest >= need && m.need.CompareAndSwap(need, noAlignmentWatermark) && m.wake != nil {
			m.wake()
		}
	}
	return lowest
}

// aligner is a source subtask's share of watermark alignment. Only the
// subtask goroutine uses it (New makes it and joins the group, Run leaves
// it when it returns).
//
// The subtask polls every record franz-go has buffered and emits each
// partition's records, in order, while the partition's largest event time
// is within MaxDrift of the group's least, at most alignEmitBudget a pass;
// the rest are held, in order, and a partition that is ahead is paused
// (franz-go's PauseFetchPartitions), so nothing fetched is dropped and
// fetched again, and what is held is bounded by about two fetches per
// partition (one held, one in franz-go's buffer: the subtask polls only
// once no held record may go on). A held partition's position (the offset
// a checkpoint holds) stays at its next record to emit. The partition is
// resumed once it is no longer ahead; the subtask that lifts the group's
// least that far wakes it (alignMember.need).
type aligner struct {
	cfg    WatermarkAlignment
	member *alignMember // nil without a group
	// held are, per partition, the records fetched but not emitted yet, in
	// offset order; paused the partitions paused now; hwm each partition's
	// last stable offset (its high watermark when that is unknown) as of
	// the last fetch that returned it, absent before.
	held   map[int32][]*kgo.Record
	paused map[int32]bool
	hwm    map[int32]int64
	// more says held records may go on: the last emitHeld stopped at
	// alignEmitBudget with some left, or update found a held partition no
	// longer ahead; the source emits them before it polls.
	more bool
	// pauses and resumes count the partitions paused and resumed (tests).
	pauses, resumes atomic.Int64
}

func newAligner(cfg WatermarkAlignment) *aligner {
	if cfg.UpdateInterval <= 0 {
		cfg.UpdateInterval = DefaultAlignmentUpdateInterval
	}
	a := &aligner{cfg: cfg, held: map[int32][]*kgo.Record{}, paused: map[int32]bool{}, hwm: map[int32]int64{}}
	if cfg.Group != nil {
		a.member = cfg.Group.join()
	}
	return a
}

// stop leaves the group; a may be nil.
func (a *aligner) stop() {
	if a != nil && a.member != nil {
		a.member.leave()
	}
}

// emit takes a poll's records: it notes the end offsets the fetches
// returned, queues each partition's records behind those it holds, and
// emits what the group's least watermark allows (emitHeld).
func (a *aligner) emit(ctx context.Context, s *KafkaSource, fetches kgo.Fetches) error {
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if p.Partition < 0 {
			return
		}
		id := s.pid(p.Topic, p.Partition)
		end := p.LastStableOffset
		if end < 0 {
			end = p.HighWatermark
		}
		if p.Err == nil && end >= 0 {
			a.hwm[id] = end
		}
		if len(p.Records) > 0 {
			if held := a.held[id]; len(held) > 0 {
				a.held[id] = append(held, p.Records...)
			} else {
				// The poll's slice itself (the caller owns it): no copy
				// of a fetch's record pointers per poll.
				a.held[id] = p.Records
			}
		}
	})
	return a.emitHeld(ctx, s)
}

// emitHeld emits, partition by partition, the held records of each
// partition whose largest event time is not ahead of the group's least
// (which it looks at again after each pass that emitted something, as the
// least moves with what this subtask emits), stopping a partition at its
// first record that puts it ahead: it may lead by MaxDrift plus the event
// time one record moves it.
//
// It emits at most alignEmitBudget records a call; when it stops there
// with records left that may go on, more is set, and the source's loop
// runs its mail and calls it again before it polls (a checkpoint barrier
// waits behind one budget, not behind everything a poll took).
func (a *aligner) emitHeld(ctx context.Context, s *KafkaSource) error {
	a.more = false
	budget := alignEmitBudget
	for len(a.held) > 0 {
		lowest := a.lowest(s, time.Now())
		progress := false
		for id, recs := range a.held {
			i := 0
			for i < len(recs) && budget > 0 && !a.ahead(s.wms.maxTs[id], lowest) {
				if err := s.emitRead(ctx, recs[i]); err != nil {
					return err
				}
				i++
				budget--
			}
			if i == len(recs) {
				delete(a.held, id)
			} else {
				clear(recs[:i]) // the emitted records' memory may go
				a.held[id] = recs[i:]
			}
			progress = progress || i > 0
		}
		if budget == 0 {
			a.more = len(a.held) > 0
			return nil
		}
		if !progress {
			break
		}
	}
	return nil
}

// alignEmitBudget is how many held records one emitHeld call emits at
// most: what one poll returns without alignment (PollRecords(1000)).
const alignEmitBudget = 1000

// ahead reports whether a partition whose largest event time is ts is
// ahead of the group's least watermark lowest.
func (a *aligner) ahead(ts, lowest int64) bool {
	switch {
	case ts == noTimestamp || lowest == noAlignmentWatermark:
		return false
	case lowest == noTimestamp:
		return true // a partition or member holds the group at its start
	}
	return ts-lowest > a.cfg.MaxDrift.Milliseconds()
}

// holds reports whether partition p, whose largest timestamp is ts,
// holds its group back at now: it is readable, not idle, and has records
// left to read (behind). One without a timestamp that has records left
// holds the group at its very start (pending): where its event time
// stands is not known until its first record. A partition read to its end
// holds nobody back: otherwise the end of one partition's backlog would
// pause the others for good. Pausing never changes the watermark itself,
// which still waits for every active partition.
func (a *aligner) holds(s *KafkaSource, p int32, ts int64, now time.Time) (holds, pending bool) {
	if s.unavail[p] != nil {
		return false, false
	}
	if idle := s.wms.cfg.Idleness; idle > 0 && !a.paused[p] && now.Sub(s.wms.lastSeen[p]) >= idle {
		return false, false
	}
	if !a.behind(s, p) {
		return false, false
	}
	return true, ts == noTimestamp
}

// behind reports whether partition p has records left to emit: held, or
// below the end offset of the last fetch that returned it, else below the
// catch-up target looked up at start (or that target is still to be
// looked up).
func (a *aligner) behind(s *KafkaSource, p int32) bool {
	if len(a.held[p]) > 0 {
		return true
	}
	if end, ok := a.hwm[p]; ok {
		return s.pos[p] < end
	}
	if _, ok := s.pending[p]; ok {
		return true
	}
	if _, ok := s.ends[p]; ok {
		return true
	}
	l := s.lookups[p]
	return l != nil && l.end
}

// lowest publishes the least largest-event-time of the subtask's
// partitions that hold its group back (noTimestamp when one is pending,
// noAlignmentWatermark when none holds) and returns the group's least
// (the subtask's own without a group).
func (a *aligner) lowest(s *KafkaSource, now time.Time) int64 {
	local := int64(noAlignmentWatermark)
	for p, ts := range s.wms.maxTs {
		if holds, pending := a.holds(s, p, ts, now); pending {
			local = noTimestamp
		} else if holds {
			local = min(local, ts)
		}
	}
	if a.member == nil {
		return local
	}
	a.member.wm.Store(local)
	return a.member.g.min()
}

// update pauses the partitions that are ahead of the group's least, and
// resumes the others (a partition held only by alignEmitBudget is not
// paused: franz-go fetches its next records while the held ones go out,
// and the source polls only once none of those may go on, so what it
// holds stays within about two fetches); the source calls it after
// every poll, once the poll's records went through emit. A paused
// partition is not idle: its last-seen time moves with now, since the
// subtask, not the partition, stopped its records.
func (a *aligner) update(s *KafkaSource, now time.Time) {
	for p := range a.paused {
		s.wms.lastSeen[p] = now
	}
	lowest := a.lowest(s, now)
	var pause, resume map[string][]int32
	for p, ts := range s.wms.maxTs {
		stop := a.ahead(ts, lowest)
		if stop == a.paused[p] {
			continue
		}
		t, part := s.tp(p)
		if stop {
			a.paused[p] = true
			pause = addTP(pause, t, part)
			a.pauses.Add(1)
		} else {
			delete(a.paused, p)
			a.resumes.Add(1)
			if s.unavail[p] == nil {
				// An unavailable partition stays paused until a probe
				// finds it back (markAvailable resumes it then).
				resume = addTP(resume, t, part)
			}
		}
	}
	for p := range a.held {
		if !a.ahead(s.wms.maxTs[p], lowest) {
			// The least moved past this held partition since emitHeld
			// looked (another subtask's progress): it is not paused and
			// no wake waits for it, so it goes on before the next poll
			// rather than behind a poll's whole wait.
			a.more = true
			break
		}
	}
	a.await(s)
	if pause != nil {
		s.cl.PauseFetchPartitions(pause)
		n := 0
		for _, ps := range pause {
			n += len(ps)
		}
		s.cfg.Metrics.alignmentPaused(s.cfg.Name, n)
	}
	if resume != nil {
		s.cl.ResumeFetchPartitions(resume)
	}
}

// await tells the group the least watermark the subtask's paused
// partitions wait for (alignMember.need: the least of their largest event
// times minus MaxDrift), so that the member whose progress reaches it
// wakes this subtask's poll; then looks once itself, in case the least
// moved past it already. Without a group the subtask's own records are
// all that moves its least, so nothing else could wake it.
func (a *aligner) await(s *KafkaSource) {
	if a.member == nil {
		return
	}
	need := int64(noAlignmentWatermark)
	for p := range a.paused {
		if ts := s.wms.maxTs[p]; ts != noTimestamp {
			need = min(need, ts-a.cfg.MaxDrift.Milliseconds())
		} else {
			need = min(need, noTimestamp+1) // the group's least leaving its start
		}
	}
	a.member.need.Store(need)
	if need != noAlignmentWatermark {
		a.member.g.min()
	}
}

// waitBound is how long a poll may wait: UpdateInterval (at least 1ms: a
// poll whose context is done returns no record) while a partition is
// paused, as the group's least may move without a record of this
// subtask's; else bound.
func (a *aligner) waitBound(bound time.Duration) time.Duration {
	if a != nil && len(a.paused) > 0 {
		return min(bound, max(a.cfg.UpdateInterval, time.Millisecond))
	}
	return bound
}

func addTP(m map[string][]int32, t string, p int32) map[string][]int32 {
	if m == nil {
		m = map[string][]int32{}
	}
	m[t] = append(m[t], p)
	return m
}
