package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/source"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// windowClusterPipeline is an event-time tumbling window count per user
// after the key-group exchange: stage 0 reads clicks (event time from the
// record's ts, a partition quiet for 1s is idle), stage 1 counts each
// user's clicks per 10s window and writes a result per (user, window) to
// windows, late clicks to late.
const windowClusterPipeline = `sources:
  - name: clicks
    topic: clicks
    timestamp:
      expression: ts
      unit: ms
    watermark:
      idleness: 1s
operators:
  - name: per_window
    type: window
    input: clicks
    key_by: user
    params:
      kind: tumbling
      size: 10s
      aggregates:
        - {name: clicks, fn: count}
sinks:
  - name: windows
    input: per_window
    topic: windows
    delivery: exactly-once
    transaction_timeout: 2m
  - name: late
    input: per_window.late
    topic: late
    delivery: exactly-once
    transaction_timeout: 2m
`

// TestClusterEventTimeWindows is issue 13's acceptance case "event-time
// windows across the exchange with one upstream partition going idle" on two
// daemons (processes of the built binary) and a broker in its own process:
// the window count of windowClusterPipeline as 4 units per stage over an
// input of 2 partitions (stage-0 units reading no partition are idle from
// the start). Partition 1 holds clicks of windows 0 and 1, then goes quiet
// for good; once they crossed the exchange, partition 0 keeps advancing
// event time from window 1 on, above partition 1's timestamps (so no click
// can be late whichever partition a source finds idle when). Once window 0
// closed for every user, the daemon holding the stage-0 unit of partition 0
// is killed with -9 while clicks flow; its units (2 of each stage) move to
// the survivor, which restores their open windows, timers and per-upstream
// watermark state; the killed daemon restarts under its member id and units
// move back to it (revoked from the survivor with a final checkpoint) while
// clicks flow. A second kill -9 moves partition 1's source unit if the first
// did not, else the units of the daemon not holding it: so one kill moves
// stage-1 units away from the quiet unit (idle, it never writes again: their
// new owner knows it is idle only from the restored checkpoint) and one
// moves the quiet unit itself. Then a last click moves time past every
// window. The read_committed output holds every (user, window) of the input
// exactly once with its exact count, no window missing and no other, nothing
// is late, and the quiet partition's source unit wrote its idle marker to
// every repartition partition; and checkExchange holds (each click once in
// its repartition partition, no open transaction, no lost output, no
// unexpected exit). It runs on the filesystem store and on an S3 server the
// test starts.
func TestClusterEventTimeWindows(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"filesystem", "s3"} {
		t.Run(kind, func(t *testing.T) { t.Parallel(); clusterEventTimeWindows(t, kind) })
	}
}

// clusterWindow is one (user, window) of the test's input or output.
type clusterWindow struct {
	user   string
	window int64 // [t0 + 10s*window, t0 + 10s*(window+1))
}

func (w clusterWindow) String() string { return fmt.Sprintf("%s@%d", w.user, w.window) }

func clusterEventTimeWindows(t *testing.T, kind string) {
	began := time.Now()
	defer func() { t.Logf("%s took %v", t.Name(), time.Since(began).Round(100*time.Millisecond)) }()
	b := startTestBroker(t, map[string]int{"clicks": 2, "windows": 4, "late": 1})
	const units, users = 4, 8
	c := newCluster(t, clusterJob{Units: units, Pipeline: windowClusterPipeline, Output: "windows", Store: kind}, b.addr)
	// The users: two of each stage-1 unit.
	var names []string
	perUnit := map[int]int{}
	for i := 0; len(names) < users; i++ {
		name := fmt.Sprintf("user-%d", i)
		if u := keygroup.OperatorIndex(keygroup.Assign([]byte(name), 24), 24, units); perUnit[u] < users/units {
			perUnit[u]++
			names = append(names, name)
		}
	}

	prod := newClient(t, b.addr, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	want := map[clusterWindow]int{} // the exact count of every (user, window) of the input
	n := 0                          // input records so far: the next one's i
	var maxTs int64                 // the largest timestamp of the input
	click := func(p int32, user string, ts int64) *kgo.Record {
		r := &kgo.Record{Topic: "clicks", Partition: p, Key: fmt.Appendf(nil, "%d", n),
			Value: fmt.Appendf(nil, `{"user":%q,"ts":%d,"i":%d}`, user, ts, n)}
		n++
		maxTs = max(maxTs, ts)
		want[clusterWindow{user, (ts - t0) / 10_000}]++
		return r
	}
	// Partition 1: clicks of windows 0 and 1 (up to t0+10.443s), then quiet.
	var quiet []*kgo.Record
	for k := range 60 {
		quiet = append(quiet, click(1, names[k%users], t0+int64(k)*177))
	}
	produce(t, prod, quiet...)
	// Partition 0: click k at t0 + 11s + k*37ms (windows 1 to 4), its user
	// irregular so the counts differ.
	advancing := func(k int) *kgo.Record {
		return click(0, names[(k+k/5)%users], t0+11_000+int64(k)*37)
	}
	const phase = 300 // clicks of partition 0 per phase (11.1s of event time)
	paced := func(phaseIndex int) *pacedProducer {
		// The records are built here, in order, so that n and want are
		// only touched by the test goroutine.
		var recs []*kgo.Record
		for k := phaseIndex * phase; k < (phaseIndex+1)*phase; k++ {
			recs = append(recs, advancing(k))
		}
		return producePaced(t, prod, phase, 5, 100*time.Millisecond, func(i, j int) []*kgo.Record { return recs[i:j] })
	}

	c.start("a")
	c.start("b")
	var by map[string][]string
	// spread waits until every unit is held once and cond holds.
	spread := func(what string, cond func(map[string][]string) bool) {
		t.Helper()
		if !testkit.Poll(2*time.Minute, func() bool {
			var ok bool
			by, ok = c.held()
			return ok && cond(by)
		}) {
			t.Fatalf("%s never happened: held %v\n%s", what, by, c.logs())
		}
		t.Logf("%v: %s: held %v", time.Since(began).Round(100*time.Millisecond), what, by)
	}
	spread("the units spread 4/4", func(by map[string][]string) bool {
		return len(by["a"]) == units && len(by["b"]) == units
	})
	// Partition 0 starts only once partition 1's clicks crossed the
	// exchange: whichever partition a source finds idle (a source that
	// takes longer than the idleness to fetch), none of them can be late.
	opts := []kgo.Opt{kgo.SeedBrokers(b.addr)}
	if !testkit.Poll(time.Minute, func() bool {
		return len(testkit.WithoutMarkers(testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), "clicks-1-repartition", 30*time.Second))) == len(quiet)
	}) {
		t.Fatalf("the repartition topic never held partition 1's %d clicks\n%s", len(quiet), c.logs())
	}

	type fired struct {
		Key    string `json:"key"`
		Start  string `json:"window_start"`
		End    string `json:"window_end"`
		Clicks int    `json:"clicks"`
	}
	output := func() map[clusterWindow][]int {
		t.Helper()
		out := map[clusterWindow][]int{}
		for _, r := range testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), "windows", 30*time.Second) {
			var f fired
			if err := json.Unmarshal(r.Value, &f); err != nil {
				t.Fatalf("output record %s: %v", r.Value, err)
			}
			start, err1 := time.Parse(time.RFC3339, f.Start)
			end, err2 := time.Parse(time.RFC3339, f.End)
			if err1 != nil || err2 != nil || end.Sub(start) != 10*time.Second || (start.UnixMilli()-t0)%10_000 != 0 {
				t.Fatalf("output record %s: not a 10s window of the test", r.Value)
			}
			w := clusterWindow{f.Key, (start.UnixMilli() - t0) / 10_000}
			out[w] = append(out[w], f.Clicks)
		}
		return out
	}

	// Phase 1: partition 0 advances; window 0 (of partition 1 only) closes
	// once partition 1's unit is idle. The daemon holding partition 0's
	// source unit is killed while the phase's clicks flow, with windows
	// closed and others open.
	p := paced(0)
	var got map[clusterWindow][]int
	if !testkit.Poll(time.Minute, func() bool {
		got = output()
		for _, u := range names {
			if len(got[clusterWindow{u, 0}]) == 0 {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("window 0 never closed for every user: fired %v\n%s", got, c.logs())
	}
	// sourceUnit is the stage-0 unit reading input partition p.
	sourceUnit := func(p int32) string {
		for u := range units {
			if slices.Contains(source.PartitionsFor("clicks", 2, u, units), p) {
				return fmt.Sprintf("0/%d", u)
			}
		}
		t.Fatalf("no stage-0 unit of %d reads partition %d", units, p)
		return ""
	}
	advancingUnit, quietUnit := sourceUnit(0), sourceUnit(1)
	// kill kills victim with -9 while p produces and waits until the
	// other daemon holds every unit.
	kill := func(victim, why string, p *pacedProducer) {
		t.Helper()
		survivor := map[string]string{"a": "b", "b": "a"}[victim]
		if survivor == "" {
			t.Fatalf("%s: the victim is %q, want a or b", why, victim)
		}
		got = output()
		t.Logf("%v: killing %s (%s, holding %v) with %d windows fired, %d clicks of the phase produced",
			time.Since(began).Round(100*time.Millisecond), victim, why, by[victim], len(got), p.produced.Load())
		c.kill(victim)
		p.wait(t, time.Minute)
		spread("the killed daemon's units moved to the survivor", func(by map[string][]string) bool {
			return len(by[survivor]) == 2*units
		})
	}
	// The first kill moves partition 0's source unit; the second moves
	// partition 1's (idle, it never writes again) if the first did not,
	// else the stage-1 units of the daemon not holding it: one of the two
	// moves stage-1 units away from the quiet unit, whose new owner knows
	// that unit is idle only from the restored checkpoint, the other moves
	// the quiet unit itself (restored, it goes idle again).
	owners := c.owners()
	first := owners[advancingUnit]
	quietMoved := owners[quietUnit] == first
	kill(first, fmt.Sprintf("partition 0's source unit %s, partition 1's %s on %s", advancingUnit, quietUnit, owners[quietUnit]), p)

	// Phase 2 on the survivor alone; phase 3 while the restarted daemon
	// takes units back.
	paced(1).wait(t, time.Minute)
	p = paced(2)
	c.start(first)
	spread("the restarted daemon got units back", func(by map[string][]string) bool {
		return len(by["a"]) == units && len(by["b"]) == units
	})
	p.wait(t, time.Minute)
	// Phase 4: the second kill.
	p = paced(3)
	owners = c.owners()
	second, why := owners[quietUnit], "partition 1's source unit "+quietUnit
	if quietMoved {
		second, why = map[string]string{"a": "b", "b": "a"}[second], "not holding partition 1's source unit "+quietUnit
	}
	kill(second, why, p)
	// The last click moves partition 0's watermark past every window of
	// the input; its own window stays open.
	last := (maxTs - t0) / 10_000 // the last window of the input
	closer := click(0, "closer", t0+(last+1)*10_000+10)
	delete(want, clusterWindow{"closer", last + 1})
	produce(t, prod, closer)
	if !testkit.Poll(time.Minute, func() bool { got = output(); return len(got) >= len(want) }) {
		t.Fatalf("the output never held the %d windows of the input: fired %v\n%s", len(want), got, c.logs())
	}

	c.checkExchange(n, "i") // also waits until no transaction is open
	got = output()
	for _, w := range slices.SortedFunc(maps.Keys(want), func(x, y clusterWindow) int { return strings.Compare(x.String(), y.String()) }) {
		if counts := got[w]; len(counts) != 1 || counts[0] != want[w] {
			t.Errorf("window %v fired with counts %v, want once with %d", w, counts, want[w])
		}
	}
	for w, counts := range got {
		if _, ok := want[w]; !ok {
			t.Errorf("window %v fired with counts %v, but is not a closed window of the input", w, counts)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d windows fired, want %d", len(got), len(want))
	}
	if late := testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), "late", 30*time.Second); len(late) != 0 {
		t.Errorf("%d clicks went to the late output, want none; the first: %s", len(late), late[0].Value)
	}
	// Partition 1's source unit went idle: its idle marker is in every
	// partition of the repartition topic.
	idle := map[int32]bool{}
	for _, r := range testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), "clicks-1-repartition", 30*time.Second) {
		var headers []runtime.Header
		for _, h := range r.Headers {
			headers = append(headers, runtime.Header{Key: h.Key, Value: h.Value})
		}
		if runtime.IsExchangeBatch(headers) {
			continue // data records
		}
		m, ok, err := runtime.DecodeMarker(headers, r.Value)
		if err != nil {
			t.Errorf("repartition partition %d offset %d: %v", r.Partition, r.Offset, err)
		}
		if ok && m.Unit == quietUnit && m.Kind == runtime.MarkerIdle {
			idle[r.Partition] = true
		}
	}
	if len(idle) != units {
		t.Errorf("the idle marker of partition 1's source unit %s is in repartition partitions %v, want all %d", quietUnit, slices.Sorted(maps.Keys(idle)), units)
	}
	t.Logf("%d input clicks, %d windows fired exactly once", n, len(want))
}
