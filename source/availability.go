package source

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/kafkaretry"
)

// The start offsets of a split whose partition was never read: the
// sentinels of Flink's KafkaPartitionSplit (LATEST_OFFSET, EARLIEST_OFFSET).
// A subtask keeps them in a checkpoint while it could not look the offset up
// yet (the partition has no leader); a restore looks them up again.
const (
	// LatestOffset: the partition starts at its end offset, looked up when
	// the subtask can.
	LatestOffset int64 = -1
	// EarliestOffset: the partition starts at its log start offset, looked
	// up when the subtask can.
	EarliestOffset int64 = -2
)

// Per-partition lookup back-off: a partition whose offset lookup fails is
// tried again after lookupBackoffMin, doubling to lookupBackoffMax.
const (
	lookupBackoffMin = 200 * time.Millisecond
	lookupBackoffMax = 5 * time.Second
)

// unavailableLogEvery bounds how often a partition's unavailability is
// logged at Warn while it lasts.
const unavailableLogEvery = 30 * time.Second

// partLookup is what a partition still needs looked up: its start offset,
// its catch-up target, or a probe of whether it has a leader again. Each
// partition is looked up on its own schedule, so one that fails backs off
// without holding the others.
type partLookup struct {
	start   int64 // EarliestOffset or LatestOffset while the start offset is unknown; 0 when known
	end     bool  // the catch-up target (last stable offset) is unknown
	probe   bool  // the partition is unavailable: a successful lookup makes it available
	next    time.Time
	backoff time.Duration
}

// unavailable is a partition the subtask cannot read: no leader, or its
// offset lookup or fetch fails with a retriable error. It is paused in the
// consuming client until a probe lookup succeeds.
type unavailable struct {
	err     error
	since   time.Time
	lastLog time.Time // zero: not logged yet
}

// lookupResult is the answer of one lookup round, per partition.
type lookupResult struct {
	start map[int32]int64
	end   map[int32]int64
	errs  map[int32]error
}

// readiness is what Readiness reports, published by the subtask goroutine.
type readiness struct {
	mu      sync.Mutex
	reading bool   // the subtask reads every partition it owns
	detail  string // why not, when it does not
}

// Readiness reports whether the subtask reads every partition it was given
// (its start offsets are known, it polls, and no partition is unavailable)
// and, when it does not, why: the partitions still looked up or
// unavailable, named topic/partition with the error. Safe for concurrent
// use; the HTTP API's /readyz.
func (s *KafkaSource) Readiness() (bool, string) {
	s.ready.mu.Lock()
	defer s.ready.mu.Unlock()
	return s.ready.reading, s.ready.detail
}

// publishReadiness recomputes Readiness from the subtask's state.
func (s *KafkaSource) publishReadiness(started bool) {
	var parts []string
	if !started {
		parts = append(parts, "not reading yet")
	}
	var waiting []string
	for _, p := range sortedKeys(s.lookups) {
		if l := s.lookups[p]; l.start != 0 && s.unavail[p] == nil {
			waiting = append(waiting, s.tpName(p))
		}
	}
	if len(waiting) > 0 {
		parts = append(parts, "looking up the start offset of partition "+strings.Join(waiting, ", "))
	}
	for _, p := range sortedKeys(s.unavail) {
		u := s.unavail[p]
		parts = append(parts, fmt.Sprintf("partition %s unavailable since %s: %v", s.tpName(p), u.since.UTC().Format(time.RFC3339), u.err))
	}
	detail := ""
	if len(parts) > 0 {
		detail = fmt.Sprintf("source %s subtask %d: %s", s.cfg.Name, s.cfg.Subtask, strings.Join(parts, "; "))
	}
	s.ready.mu.Lock()
	s.ready.reading, s.ready.detail = len(parts) == 0, detail
	s.ready.mu.Unlock()
}

// needLookup schedules a lookup of partition p now: its start offset
// (start: EarliestOffset or LatestOffset; 0 for none) and/or its catch-up
// target (end).
func (s *KafkaSource) needLookup(p int32, start int64, end bool) {
	l := s.lookups[p]
	if l == nil {
		l = &partLookup{backoff: lookupBackoffMin}
		s.lookups[p] = l
	}
	if start != 0 {
		l.start = start
	}
	l.end = l.end || end
}

// markUnavailable records that partition p cannot be read because of err,
// counts it in kstreamd_source_partitions_unavailable{source} and logs it
// (once per unavailableLogEvery); a probe lookup finds out when it is back.
func (s *KafkaSource) markUnavailable(p int32, err error) {
	now := time.Now()
	u := s.unavail[p]
	if u == nil {
		u = &unavailable{since: now}
		s.unavail[p] = u
		s.cfg.Metrics.unavailableAdd(s.cfg.Name, 1)
		// Not fetched until a probe finds it back: a partition whose
		// fetches fail at once would otherwise be fetched again at once,
		// a busy loop. Its cursor stays where the last record polled
		// left it (franz-go drops what it buffered for a paused
		// partition and fetches it again after the resume).
		if s.cl != nil {
			t, part := s.tp(p)
			s.cl.PauseFetchPartitions(map[string][]int32{t: {part}})
		}
	}
	u.err = err
	t, part := s.tp(p)
	if l := s.lookups[p]; l == nil || (l.start == 0 && !l.end && !l.probe) {
		s.needLookup(p, 0, false)
		l = s.lookups[p]
		l.probe, l.next = true, now.Add(l.backoff)
	} else {
		l.probe = true
	}
	if u.lastLog.IsZero() || now.Sub(u.lastLog) >= unavailableLogEvery {
		u.lastLog = now
		s.logger.Warn("partition unavailable; retrying it on its own while the other partitions are read",
			"topic", t, "partition", part, "unavailable_for", now.Sub(u.since).Round(time.Millisecond), "err", err)
	}
}

// markAvailable records that partition p is read again.
func (s *KafkaSource) markAvailable(p int32) {
	u := s.unavail[p]
	if u == nil {
		return
	}
	delete(s.unavail, p)
	s.cfg.Metrics.unavailableAdd(s.cfg.Name, -1)
	t, part := s.tp(p)
	if s.cl != nil && (s.align == nil || !s.align.paused[p]) {
		// A partition watermark alignment holds stays paused: its
		// update resumes it once the group's least catches up.
		s.cl.ResumeFetchPartitions(map[string][]int32{t: {part}})
	}
	if l := s.lookups[p]; l != nil {
		l.probe = false
		if l.start == 0 && !l.end {
			delete(s.lookups, p)
		}
	}
	s.logger.Info("partition available again", "topic", t, "partition", part, "unavailable_for", time.Since(u.since).Round(time.Millisecond))
}

// clearUnavailable takes the subtask's unavailable partitions out of the
// gauge when it stops.
func (s *KafkaSource) clearUnavailable() {
	if n := len(s.unavail); n > 0 {
		s.cfg.Metrics.unavailableAdd(s.cfg.Name, -float64(n))
	}
	s.unavail = map[int32]*unavailable{}
}

// partitionError reports whether fe is a retriable error of one partition
// (no leader, not the leader, the leader's epoch unknown, ...): the
// partition is retried on its own (franz-go keeps fetching it) and marked
// unavailable meanwhile.
func partitionError(fe kgo.FetchError) bool {
	return fe.Partition >= 0 && (kerr.IsRetriable(fe.Err) || kafkaretry.IsTransient(fe.Err))
}

// maybeLookup starts a lookup round, in a goroutine of its own, for the
// partitions whose lookup is due, unless one is in flight. Its result is
// applied on the subtask goroutine (applyLookup, through the mailbox).
func (s *KafkaSource) maybeLookup(ctx context.Context, adm *kadm.Client) {
	if s.lookupBusy || len(s.lookups) == 0 {
		return
	}
	now := time.Now()
	start := map[int32]int64{}
	var end []int32
	for p, l := range s.lookups {
		if l.next.After(now) {
			continue
		}
		if l.start != 0 {
			start[p] = l.start
		}
		if l.end || l.probe {
			end = append(end, p)
		}
	}
	if len(start) == 0 && len(end) == 0 {
		return
	}
	s.lookupBusy = true
	qs := s.splitLookup(start, end)
	s.lookupWG.Add(1)
	go func() {
		defer s.lookupWG.Done()
		res := lookupResult{start: map[int32]int64{}, end: map[int32]int64{}, errs: map[int32]error{}}
		for _, q := range qs {
			r := lookupOffsets(ctx, adm, q.topic, q.start, q.end)
			for _, m := range [][2]map[int32]int64{{r.start, res.start}, {r.end, res.end}} {
				for p, o := range m[0] {
					m[1][q.base|p] = o
				}
			}
			for p, err := range r.errs {
				res.errs[q.base|p] = err
			}
		}
		s.mailbox.Execute(func() { s.applyLookup(res) })
	}()
}

// topicLookup is the share of a lookup round of one topic: partitions,
// not ids; base is the topic's id prefix (topics.go).
type topicLookup struct {
	topic string
	base  int32
	start map[int32]int64
	end   []int32
}

// splitLookup groups a lookup round's partition ids by topic, on the
// subtask goroutine (the id table is its own).
func (s *KafkaSource) splitLookup(start map[int32]int64, end []int32) []topicLookup {
	var qs []topicLookup
	at := map[string]int{}
	get := func(id int32) (*topicLookup, int32) {
		t, p := s.tp(id)
		i, ok := at[t]
		if !ok {
			i = len(qs)
			at[t] = i
			qs = append(qs, topicLookup{topic: t, base: id &^ maxPartition, start: map[int32]int64{}})
		}
		return &qs[i], p
	}
	for id, o := range start {
		q, p := get(id)
		q.start[p] = o
	}
	for _, id := range end {
		q, p := get(id)
		q.end = append(q.end, p)
	}
	return qs
}

// lookupOffsets lists the start offsets (earliest or latest) of start's
// partitions and the last stable offsets of end's, each listing bounded by
// attemptTimeout; a partition whose listing failed has its error in errs.
func lookupOffsets(ctx context.Context, adm *kadm.Client, topic string, start map[int32]int64, end []int32) lookupResult {
	res := lookupResult{start: map[int32]int64{}, end: map[int32]int64{}, errs: map[int32]error{}}
	list := func(parts []int32, into map[int32]int64, fn func(context.Context, ...string) (kadm.ListedOffsets, error)) {
		if len(parts) == 0 {
			return
		}
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		defer cancel()
		offs, err := fn(actx, topic)
		// kadm returns what the answering brokers listed along with the
		// error of the partitions that could not be listed (a shard
		// error when a partition has no leader): each partition is
		// judged on its own.
		for _, p := range parts {
			o, ok := offs.Lookup(topic, p)
			switch {
			case ok && o.Err != nil:
				res.errs[p] = o.Err
			case ok:
				into[p] = max(o.Offset, 0)
			case err != nil:
				res.errs[p] = err
			default:
				terr := errors.New("no offset listed")
				if to, ok := offs[topic][-1]; ok && to.Err != nil {
					terr = to.Err
				}
				res.errs[p] = terr
			}
		}
	}
	var earliest, latest []int32
	for _, p := range sortedKeys(start) {
		if start[p] == LatestOffset {
			latest = append(latest, p)
		} else {
			earliest = append(earliest, p)
		}
	}
	list(earliest, res.start, adm.ListStartOffsets)
	list(latest, res.start, adm.ListEndOffsets)
	slices.Sort(end)
	list(end, res.end, adm.ListCommittedOffsets)
	return res
}

// applyLookup applies a lookup round: a partition whose start offset is
// now known is handed to the consuming client at it; a known catch-up
// target joins the pending targets; a partition looked up without error is
// available again; a failed one backs off and is marked unavailable.
func (s *KafkaSource) applyLookup(res lookupResult) {
	s.lookupBusy = false
	if s.lookupsStopped {
		return
	}
	now := time.Now()
	add := map[int32]kgo.Offset{}
	started := map[int32]int64{}
	for p, err := range res.errs {
		l := s.lookups[p]
		if l == nil {
			continue
		}
		l.next = now.Add(l.backoff)
		l.backoff = min(2*l.backoff, lookupBackoffMax)
		s.markUnavailable(p, err)
	}
	for p, off := range res.start {
		l := s.lookups[p]
		if l == nil || l.start == 0 {
			continue
		}
		if _, failed := res.errs[p]; failed {
			continue
		}
		l.start = 0
		s.pos[p] = off
		add[p] = kgo.NewOffset().At(off)
		started[p] = off
	}
	for p, end := range res.end {
		l := s.lookups[p]
		if l == nil {
			continue
		}
		if _, failed := res.errs[p]; failed {
			continue
		}
		if l.end {
			l.end = false
			s.ends[p] = end
		}
	}
	for p, l := range s.lookups {
		if _, failed := res.errs[p]; failed {
			continue
		}
		_, gotStart := res.start[p]
		_, gotEnd := res.end[p]
		if gotStart || gotEnd {
			s.markAvailable(p)
			l.probe = false
			l.backoff = lookupBackoffMin
		}
		if l.start == 0 && !l.end && !l.probe {
			delete(s.lookups, p)
		}
	}
	s.settleCatchUp()
	if len(add) > 0 {
		s.logger.Info("start offsets looked up; reading the partitions", "offsets", byTopic(s, started))
		s.cl.AddConsumePartitions(byTopic(s, add))
	}
	s.publishReadiness(true)
}

// settleCatchUp turns the known catch-up targets of partitions whose start
// offset is known into pending targets (none when the partition is read up
// to it already).
func (s *KafkaSource) settleCatchUp() {
	for p, end := range s.ends {
		pos := s.pos[p]
		if pos < 0 {
			continue // its start offset is still looked up
		}
		delete(s.ends, p)
		if end > pos {
			s.pending[p] = end
		}
	}
}

// catchUpKnown reports whether every catch-up target is known and
// settled, so that an empty pending set means caught up.
func (s *KafkaSource) catchUpKnown() bool {
	if len(s.ends) > 0 {
		return false
	}
	for _, l := range s.lookups {
		if l.end {
			return false
		}
	}
	return true
}
