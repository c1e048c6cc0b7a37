package source

import (
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
// runs more than MaxDrift ahead of its group's minimum watermark is paused
// (franz-go's PauseFetchPartitions) until the minimum catches up, so that
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
	// UpdateInterval is how often the subtask publishes its watermark to
	// the group and pauses or resumes its partitions against the group's
	// minimum; a subtask whose partitions are all paused wakes up this
	// often to look. 0 means DefaultAlignmentUpdateInterval.
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
}

// join adds a member that holds the group at its start (as a partition
// without a timestamp does) until it publishes.
func (g *AlignmentGroup) join() *alignMember {
	m := &alignMember{g: g}
	m.wm.Store(noTimestamp)
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
// (noAlignmentWatermark when none holds anything back).
func (g *AlignmentGroup) min() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	lowest := int64(noAlignmentWatermark)
	for _, m := range g.members {
		lowest = min(lowest, m.wm.Load())
	}
	return lowest
}

// aligner is a source subtask's share of watermark alignment. Only the
// subtask goroutine uses it (New makes it and joins the group, Run leaves
// it when it returns).
type aligner struct {
	cfg    WatermarkAlignment
	member *alignMember // nil without a group
	// paused are the partitions paused now; hwm is each partition's last
	// stable offset (its high watermark when that is unknown) as of the
	// last fetch that returned it, absent before.
	paused map[int32]bool
	hwm    map[int32]int64
	// pauses and resumes count the partitions paused and resumed (tests).
	pauses, resumes atomic.Int64
}

func newAligner(cfg WatermarkAlignment) *aligner {
	if cfg.UpdateInterval <= 0 {
		cfg.UpdateInterval = DefaultAlignmentUpdateInterval
	}
	a := &aligner{cfg: cfg, paused: map[int32]bool{}, hwm: map[int32]int64{}}
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

// fetched notes the end offsets a fetch returned.
func (a *aligner) fetched(s *KafkaSource, fetches kgo.Fetches) {
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		end := p.LastStableOffset
		if end < 0 {
			end = p.HighWatermark
		}
		if p.Partition >= 0 && p.Err == nil && end >= 0 {
			a.hwm[s.pid(p.Topic, p.Partition)] = end
		}
	})
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

// behind reports whether partition p has records left to read: below the
// end offset of the last fetch that returned it, else below the catch-up
// target looked up at start (or that target is still to be looked up).
func (a *aligner) behind(s *KafkaSource, p int32) bool {
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

// update publishes the subtask's watermark and pauses or resumes its
// partitions against the group's minimum; the source calls it after every
// poll (at most 1,000 records; a look at a few partitions and one lock,
// well under a microsecond). A paused partition is not idle: its
// last-seen time moves with now, since the subtask, not the partition,
// stopped its records.
func (a *aligner) update(s *KafkaSource, now time.Time) {
	for p := range a.paused {
		s.wms.lastSeen[p] = now
	}
	local := int64(noAlignmentWatermark)
	for p, ts := range s.wms.maxTs {
		if holds, pending := a.holds(s, p, ts, now); pending {
			local = noTimestamp
		} else if holds {
			local = min(local, ts)
		}
	}
	lowest := local
	if a.member != nil {
		a.member.wm.Store(local)
		lowest = a.member.g.min()
	}
	var pause, resume map[string][]int32
	for p, ts := range s.wms.maxTs {
		ahead := false
		switch {
		case ts == noTimestamp || lowest == noAlignmentWatermark:
		case lowest == noTimestamp:
			ahead = true // a partition holds the group at its start
		default:
			ahead = ts-lowest > a.cfg.MaxDrift.Milliseconds()
		}
		if ahead == a.paused[p] {
			continue
		}
		t, part := s.tp(p)
		if ahead {
			a.paused[p] = true
			pause = addTP(pause, t, part)
			a.pauses.Add(1)
		} else {
			delete(a.paused, p)
			resume = addTP(resume, t, part)
			a.resumes.Add(1)
		}
	}
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

// waitBound is how long a poll may wait: UpdateInterval (at least 1ms: a
// poll whose context is done returns no record) while a partition is
// paused, as the group's minimum may move without a record of this
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
