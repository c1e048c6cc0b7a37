package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/sink"
)

// The tests in this file are issue 5's acceptance tests of the exactly-once
// sink. They run the kstreamd binary as a child process against a kfake
// broker in the test process, which outlives the SIGKILLed daemons, and
// read the output topic with read_committed (and read_uncommitted).
//
// The window between a pre-commit and its commit (the checkpoint completed,
// the sink has not ended the transaction yet) lasts a few milliseconds.
// commitHold makes it deterministic: while armed, the broker swallows every
// EndTxn(commit) of the sink, so the sink subtask waits on a commit the
// broker never performs, the test is told, and it SIGKILLs the daemon then.
// The transaction stays open on the broker with its checkpoint completed;
// the next start must commit it (its log says "committed restored
// transaction").

// eoOptions varies eoConfig.
type eoOptions struct {
	parallelism int
	interval    string // checkpoints.interval
	timeout     string // transaction_timeout
	sinkExtra   string // more sink fields, each line indented by 4 spaces
	delivery    string // default exactly-once
}

// eoConfig is the reference job on the broker at broker with an
// exactly-once sink (unless o.delivery says otherwise).
func eoConfig(dir, broker, metrics string, o eoOptions) string {
	if o.delivery == "" {
		o.delivery = "exactly-once"
	}
	if o.timeout == "" {
		o.timeout = "1m"
	}
	cfg := jobHead("colorshape", o.parallelism, dir, brokersKafka(broker), metrics, "info") +
		"checkpoints:\n  interval: " + o.interval + "\n" + referencePipeline + "    delivery: " + o.delivery + "\n"
	if o.delivery == "exactly-once" {
		cfg += "    transaction_timeout: " + o.timeout + "\n"
	}
	return cfg + o.sinkExtra
}

// heldCommit is an EndTxn(commit) the broker swallowed.
type heldCommit struct {
	TransactionalID string
	ProducerID      int64
	Epoch           int16
}

// commitHold swallows the sink's EndTxn(commit) requests while armed (see
// the file comment); others pass.
type commitHold struct {
	armed  atomic.Bool
	caught chan heldCommit
}

func holdCommits(c *kfake.Cluster) *commitHold {
	h := &commitHold{caught: make(chan heldCommit, 64)}
	c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.EndTxnRequest)
		if !h.armed.Load() || !r.Commit {
			return nil, nil, false
		}
		select {
		case h.caught <- heldCommit{r.TransactionalID, r.ProducerID, r.ProducerEpoch}:
		default:
		}
		return nil, nil, true // no answer: the commit never happens
	})
	return h
}

// wait returns the first swallowed commit, failing the test after limit.
func (h *commitHold) wait(t *testing.T, p *proc, limit time.Duration) heldCommit {
	t.Helper()
	select {
	case hc := <-h.caught:
		return hc
	case <-p.done:
		t.Fatalf("kstreamd exited while the test waited for a commit:\n%s", p.out.String())
	case <-time.After(limit):
		t.Fatalf("no sink commit within %v of arming the hold:\n%s", limit, p.out.String())
	}
	return heldCommit{}
}

// disarm stops swallowing and drops what was caught.
func (h *commitHold) disarm() {
	h.armed.Store(false)
	for {
		select {
		case <-h.caught:
		default:
			return
		}
	}
}

// itemShapes are the generated shapes; SQUARE matches no rule.
var itemShapes = []string{"RECTANGLE", "TRIANGLE", "CIRCLE", "SQUARE"}

// genItems returns n items with ids from first, random colours of colors
// and random shapes.
func genItems(rng *rand.Rand, first, n int, colors []string) []*kgo.Record {
	recs := make([]*kgo.Record, 0, n)
	for id := first; id < first+n; id++ {
		recs = append(recs, item(id, colors[rng.IntN(len(colors))], itemShapes[rng.IntN(len(itemShapes))]))
	}
	return recs
}

// eoRules are the fixed rules: R1 RECTANGLE then TRIANGLE, R2 CIRCLE then
// CIRCLE.
func eoRules() []*kgo.Record {
	return []*kgo.Record{rule("R1", "RECTANGLE", "TRIANGLE"), rule("R2", "CIRCLE", "CIRCLE")}
}

// expectedMatches applies the matcher's semantics (operators.ShapePairMatcher)
// for the rules of eoRules, independently of it: per colour, in the order
// of the items topic's partitions (a colour is a Kafka key, so one colour's
// items are in one partition, in produce order). R1 stores RECTANGLEs and
// a TRIANGLE pairs with every stored one; R2 pairs each CIRCLE with the
// CIRCLE before it. Rendered and sorted as matchStrings does.
func expectedMatches(t *testing.T, items []*kgo.Record) []string {
	t.Helper()
	type stored struct{ r1, r2 []int }
	byColor := map[string]*stored{}
	var out []string
	for _, r := range items {
		var it struct {
			ID    int    `json:"id"`
			Color string `json:"color"`
			Shape string `json:"shape"`
		}
		if err := json.Unmarshal(r.Value, &it); err != nil {
			t.Fatalf("item %s: %v", r.Value, err)
		}
		s := byColor[it.Color]
		if s == nil {
			s = &stored{}
			byColor[it.Color] = s
		}
		if it.Shape == "TRIANGLE" {
			for _, f := range s.r1 {
				out = append(out, fmt.Sprintf("R1 %s %d,%d", it.Color, f, it.ID))
			}
			s.r1 = nil
		}
		if it.Shape == "RECTANGLE" {
			s.r1 = append(s.r1, it.ID)
		}
		if it.Shape == "CIRCLE" {
			for _, f := range s.r2 {
				out = append(out, fmt.Sprintf("R2 %s %d,%d", it.Color, f, it.ID))
			}
			s.r2 = []int{it.ID}
		}
	}
	slices.Sort(out)
	return out
}

// diffMatches describes how got differs from want (both sorted): the
// duplicates in got and the entries missing from it, at most 10 of each.
func diffMatches(got, want []string) string {
	count := map[string]int{}
	for _, w := range want {
		count[w]++
	}
	var dups, extra, missing []string
	for _, g := range got {
		switch count[g] {
		case 0:
			if slices.Contains(want, g) {
				dups = append(dups, g)
			} else {
				extra = append(extra, g)
			}
		default:
			count[g]--
		}
	}
	for _, w := range want {
		if count[w] > 0 {
			missing = append(missing, w)
			count[w]--
		}
	}
	head := func(s []string) []string { return s[:min(len(s), 10)] }
	return fmt.Sprintf("%d read, %d expected; %d duplicates %q; %d unexpected %q; %d missing %q",
		len(got), len(want), len(dups), head(dups), len(extra), head(extra), len(missing), head(missing))
}

// waitMatches polls the committed matches until there are at least
// len(want) of them (or limit passes), then until the last stable offsets
// of the topic stay the same for settle (no late write), and returns them
// with the records they were rendered from.
func waitMatches(t *testing.T, p *proc, broker string, want []string, limit, settle time.Duration) ([]string, []*kgo.Record) {
	t.Helper()
	var (
		got  []string
		recs []*kgo.Record
	)
	read := func() {
		recs = testkit.ReadTopic(t, []string{broker}, "matches", 30*time.Second)
		got = matchStrings(t, recs)
	}
	testkit.Poll(limit, func() bool {
		if p != nil && p.exited() {
			return true
		}
		read()
		return len(got) >= len(want)
	})
	if p != nil && p.exited() {
		t.Fatalf("kstreamd exited while the test waited for the matches:\n%s", p.out.String())
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	stable := func() int64 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		l, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, "matches")
		if err != nil {
			t.Fatal(err)
		}
		var sum int64
		l.Each(func(o kadm.ListedOffset) { sum += o.Offset })
		return sum
	}
	for before := stable(); ; {
		time.Sleep(settle)
		after := stable()
		if after == before {
			return got, recs
		}
		read()
		before = stable()
	}
}

// loadRules produces eoRules and waits until every matcher subtask holds
// both.
func loadRules(t *testing.T, cl *kgo.Client, d *proc, p int) {
	t.Helper()
	produce(t, cl, eoRules()...)
	testkit.WaitMetric(t, 15*time.Second, d.url(), "kstreamd_broadcast_rules", map[string]string{"operator": "matcher"}, float64(2*p))
}

// logCount counts the lines of out holding every one of subs.
func logCount(out string, subs ...string) int {
	n := 0
	for l := range strings.Lines(out) {
		ok := true
		for _, s := range subs {
			if !strings.Contains(l, s) {
				ok = false
				break
			}
		}
		if ok {
			n++
		}
	}
	return n
}

// restoredCheckpoint returns the checkpoint id of p's "restoring" log line,
// waiting for it; -1 when p restored nothing.
func restoredCheckpoint(t *testing.T, p *proc) string {
	t.Helper()
	lines := restoreLines(p.out.String())
	if len(lines) == 0 {
		return "-1"
	}
	id := logField(lines[0], "checkpoint_id")
	if id == "" {
		t.Fatalf("restore line without checkpoint_id: %s", lines[0])
	}
	return id
}

// checkNoLoss asserts that p logged no lost transaction and no failure.
func checkNoLoss(t *testing.T, p *proc) {
	t.Helper()
	log := p.out.String()
	for _, bad := range []string{"lost output", "job failed"} {
		if strings.Contains(log, bad) {
			t.Errorf("kstreamd log contains %q", bad)
		}
	}
}

// TestExactlyOnceChaos is issue 5's chaos test: the reference job on
// 100,000 generated items (8 colours, 4 shapes) with R1 RECTANGLE->TRIANGLE
// and R2 CIRCLE->CIRCLE, checkpoints every 500 ms, an exactly-once sink at
// parallelism 2. The items are produced at a steady pace (15 to 25 s) while
// the daemon is SIGKILLed at five random moments and restarted each time.
// One of the five (chosen at random) lands between a pre-commit and its
// commit through commitHold: after the kill the broker still reports that
// transaction ongoing at the held producer epoch, the next start logs that
// it committed it, and its records are read with read_committed. (Random
// kills soon after a restart also make two starts restore the same
// checkpoint; the second finds the transactions already committed.) In the
// end the read_committed matches equal the list computed by
// expectedMatches, with no duplicate and none missing, and
// read_uncommitted holds more records: aborted transactions exist.
func TestExactlyOnceChaos(t *testing.T) {
	const (
		total  = 100_000
		batch  = 1000
		p      = 2
		kills  = 5
		pacing = 150 * time.Millisecond
	)
	start := time.Now()
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	held := 1 + rng.IntN(kills)
	t.Logf("seed %d; kill %d is the one between pre-commit and commit", seed, held)

	c, broker := startKfake(t, referenceTopics)
	hold := holdCommits(c)
	dir := t.TempDir()
	metrics := testkit.FreeAddr(t)
	cfg := eoConfig(dir, broker, metrics, eoOptions{parallelism: p, interval: "500ms"})

	cl := newClient(t, broker)
	d := startProc(t, dir, cfg, broker, metrics)
	loadRules(t, cl, d, p)

	colors := []string{"red", "blue", "green", "yellow", "black", "white", "orange", "purple"}
	items := genItems(rng, 1, total, colors)
	prod := producePaced(t, cl, total, batch, pacing, func(i, j int) []*kgo.Record { return items[i:j] })

	completed := map[string]string{"kind": "checkpoint", "result": "completed"}
	restoredCommits := 0
	adm := kadm.NewClient(cl)
	var heldTxn heldCommit
	for k := 1; k <= kills; k++ {
		// Kill k at a random moment of the k-th sixth of the production,
		// and not before this process ran 300 ms.
		sixth := int64(total / 6)
		after := int64(k)*sixth + rng.Int64N(sixth) - sixth/2
		started := time.Now()
		if !testkit.Poll(40*time.Second, func() bool {
			return d.exited() || prod.produced.Load() >= after && time.Since(started) > 300*time.Millisecond
		}) {
			t.Fatalf("kill %d: %d items produced after 40s, want >= %d", k, prod.produced.Load(), after)
		}
		if d.exited() {
			t.Fatalf("kstreamd exited on its own before kill %d:\n%s", k, d.out.String())
		}
		how := "random moment"
		if k == held {
			// Wait for a checkpoint of this process, then hold the next
			// commit of a non-empty transaction and kill while it is held.
			if !testkit.Poll(30*time.Second, func() bool {
				v, err := testkit.Scrape(d.url(), "kstreamd_checkpoints_total", completed)
				return d.exited() || err == nil && v >= 1
			}) || d.exited() {
				t.Fatalf("kill %d: this process completed no checkpoint within 30s:\n%s", k, d.out.String())
			}
			hold.armed.Store(true)
			heldTxn = hold.wait(t, d, 20*time.Second)
			how = fmt.Sprintf("commit of %s (producer %d, epoch %d) held", heldTxn.TransactionalID, heldTxn.ProducerID, heldTxn.Epoch)
		}
		chk := d.scrape(t, "kstreamd_checkpoints_total", completed)
		d.kill(t)
		hold.disarm()
		if k == held {
			// The broker still has the transaction open: the kill came
			// between its pre-commit and its commit.
			ds, err := adm.DescribeTransactions(context.Background(), heldTxn.TransactionalID)
			if st := ds[heldTxn.TransactionalID]; err != nil || st.State != "Ongoing" || st.ProducerID != heldTxn.ProducerID || st.ProducerEpoch != heldTxn.Epoch {
				t.Fatalf("held transaction %s after the kill: %+v (err %v), want ongoing at producer %d epoch %d",
					heldTxn.TransactionalID, st, err, heldTxn.ProducerID, heldTxn.Epoch)
			}
		}
		t.Logf("kill %d at %v (%s): this process completed %v checkpoints; %d items produced",
			k, time.Since(start).Round(time.Millisecond), how, chk, prod.produced.Load())
		d = startProc(t, dir, cfg, broker, metrics)
		n := logCount(d.out.String(), `msg="committed restored transaction"`)
		t.Logf("restart %d restored checkpoint %s and committed %d restored transactions (%d already committed)",
			k, restoredCheckpoint(t, d), n, logCount(d.out.String(), `msg="restored transaction was already committed"`))
		if k == held && logCount(d.out.String(), "committed restored transaction", "transactional_id="+heldTxn.TransactionalID+" ") != 1 {
			t.Fatalf("restart after the held commit did not commit %s:\n%s", heldTxn.TransactionalID, d.out.String())
		}
		restoredCommits += n
	}

	prod.wait(t, 60*time.Second)
	t.Logf("all %d items produced at %v", total, time.Since(start).Round(time.Millisecond))

	// One producer wrote the items batch after batch, and a colour is a
	// Kafka key: each colour's items are in one partition in the order of
	// the slice, the order the matcher sees them in.
	ends := topicEnds(t, adm, "items", total)
	want := expectedMatches(t, items)
	// Done when a checkpoint covering every item completed (the
	// monitoring group's offsets reach the end offsets); its commit follows.
	waitGroupAt(t, adm, "kstreamd-colorshape", "items", ends, 60*time.Second, d)
	t.Logf("a checkpoint covering every item completed at %v", time.Since(start).Round(time.Millisecond))
	got, recs := waitMatches(t, d, broker, want, 30*time.Second, time.Second)
	t.Logf("%d matches read with read_committed at %v", len(got), time.Since(start).Round(time.Millisecond))
	if !slices.Equal(got, want) {
		t.Fatalf("read_committed matches differ from the expected list: %s", diffMatches(got, want))
	}
	heldRecs := 0
	for _, r := range recs {
		if r.ProducerID == heldTxn.ProducerID && r.ProducerEpoch == heldTxn.Epoch {
			heldRecs++
		}
	}
	if heldRecs == 0 {
		t.Fatalf("no committed record of the held transaction %+v: the restart did not commit it", heldTxn)
	}
	t.Logf("the held transaction's %d records are committed", heldRecs)
	all := readUncommitted(t, broker, "matches")
	t.Logf("read_uncommitted: %d records, %d committed, %d of aborted (or open) transactions; %d restored transactions committed by restarts",
		len(all), len(got), len(all)-len(got), restoredCommits)
	if len(all) <= len(got) {
		t.Fatalf("read_uncommitted holds %d records, read_committed %d: no aborted transaction, so transactions were not in use", len(all), len(got))
	}
	checkNoLoss(t, d)
	if v := d.scrape(t, "kstreamd_sink_transactions_total", map[string]string{"result": "lost"}); v != 0 {
		t.Errorf("lost transactions = %v, want 0", v)
	}
	t.Logf("finished in %v", time.Since(start).Round(time.Millisecond))
}

// TestExactlyOnceRestoreTwice: the daemon is killed after a pre-commit
// whose checkpoint completed (commit held); the next start commits the
// restored transaction, fences the ids and is killed before it completes a
// checkpoint (its checkpoint interval is 1 minute); the third start
// restores the same checkpoint again, where the broker answers the repeated
// EndTxn with PRODUCER_FENCED (the id moved on), and must recognise the
// transaction as committed. Every match is read once.
func TestExactlyOnceRestoreTwice(t *testing.T) {
	const p = 2
	c, broker := startKfake(t, referenceTopics)
	hold := holdCommits(c)
	dir := t.TempDir()
	metrics := testkit.FreeAddr(t)
	cfg := eoConfig(dir, broker, metrics, eoOptions{parallelism: p, interval: "500ms"})
	slow := eoConfig(dir, broker, metrics, eoOptions{parallelism: p, interval: "1m", timeout: "2m"})
	cl := newClient(t, broker)
	rng := rand.New(rand.NewPCG(1, 2))
	colors := []string{"red", "blue", "green", "yellow"}

	d := startProc(t, dir, cfg, broker, metrics)
	loadRules(t, cl, d, p)
	produce(t, cl, genItems(rng, 1, 2000, colors)...)
	testkit.WaitMetric(t, 20*time.Second, d.url(), "kstreamd_operator_records_in_total", map[string]string{"operator": "matcher"}, 2000+2*p)
	hold.armed.Store(true)
	produce(t, cl, genItems(rng, 2001, 2000, colors)...)
	hc := hold.wait(t, d, 20*time.Second)
	last := d.scrape(t, "kstreamd_checkpoint_last_completed_id", nil)
	d.kill(t)
	hold.disarm()
	t.Logf("killed with the commit of %s (checkpoint %v) held", hc.TransactionalID, last)

	// Second start: commits, fences, then dies before any checkpoint.
	d = startProc(t, dir, slow, broker, metrics)
	first := restoredCheckpoint(t, d)
	committed := logCount(d.out.String(), `msg="committed restored transaction"`)
	if fmt.Sprint(last) != first || committed == 0 || logCount(d.out.String(), "transactional_id="+hc.TransactionalID, "committed restored transaction") != 1 {
		t.Fatalf("second start restored checkpoint %s (want %v) and committed %d restored transactions (want %s among them):\n%s",
			first, last, committed, hc.TransactionalID, d.out.String())
	}
	// Records of this start go into transactions that no checkpoint
	// covers: the third start aborts them (fencing) and writes them again.
	adm := kadm.NewClient(cl)
	matchesEnd := func() int64 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ends, err := endOffsets(ctx, adm, "matches")
		if err != nil {
			return -1
		}
		var sum int64
		for _, o := range ends {
			sum += o
		}
		return sum
	}
	before := matchesEnd()
	if before < 0 {
		t.Fatalf("cannot list the end offsets of matches")
	}
	produce(t, cl, genItems(rng, 4001, 1000, colors)...)
	if !testkit.Poll(20*time.Second, func() bool {
		v, err := testkit.Scrape(d.url(), "kstreamd_operator_records_in_total", map[string]string{"operator": "items"})
		return err == nil && v >= 1000
	}) {
		t.Fatalf("the second start did not read the new items:\n%s", d.out.String())
	}
	// The matcher's output of this start reaches the broker: the high
	// watermarks of matches grow.
	if !testkit.Poll(20*time.Second, func() bool { return matchesEnd() > before }) {
		t.Fatalf("no match of the second start reached the broker (matches end offsets sum to %d, %d at its start):\n%s",
			matchesEnd(), before, d.out.String())
	}
	d.kill(t)

	// Third start: the same checkpoint again.
	d = startProc(t, dir, cfg, broker, metrics)
	if got := restoredCheckpoint(t, d); got != first {
		t.Fatalf("third start restored checkpoint %s, want %s again", got, first)
	}
	log := d.out.String()
	if n := logCount(log, `msg="restored transaction was already committed"`); n != committed {
		t.Errorf("third start found %d restored transactions already committed, want %d:\n%s", n, committed, log)
	}
	if n := logCount(log, `msg="committed restored transaction"`); n != 0 {
		t.Errorf("third start committed %d restored transactions again, want 0", n)
	}
	produce(t, cl, genItems(rng, 5001, 1000, colors)...)
	want := expectedMatches(t, testkit.ReadTopic(t, []string{broker}, "items", 20*time.Second))
	got, _ := waitMatches(t, d, broker, want, 30*time.Second, time.Second)
	if !slices.Equal(got, want) {
		t.Fatalf("read_committed matches: %s", diffMatches(got, want))
	}
	if all := readUncommitted(t, broker, "matches"); len(all) <= len(got) {
		t.Errorf("read_uncommitted %d records, read_committed %d: want aborted records of the second start", len(all), len(got))
	}
	checkNoLoss(t, d)
}

// TestExactlyOnceDownscale: a job at parallelism 3 is killed while its
// sink subtasks hold open transactions with records; it restarts at
// parallelism 2. The removed subtask 2's lingering transaction
// (kstreamd-colorshape-matches-2-<slot>), which no checkpoint carries, is
// aborted by the fencing, and a read_committed consumer reaches the end of
// the topic: the last stable offset equals the high watermark. The matches
// are exactly the expected ones.
func TestExactlyOnceDownscale(t *testing.T) {
	_, broker := startKfake(t, referenceTopics)
	dir := t.TempDir()
	metrics := testkit.FreeAddr(t)
	cl := newClient(t, broker)
	adm := kadm.NewClient(cl)
	rng := rand.New(rand.NewPCG(3, 4))
	colors := make([]string, 24)
	for i := range colors {
		colors[i] = fmt.Sprintf("c%02d", i)
	}
	const prefix = "kstreamd-colorshape-matches"
	removed := make([]string, 5)
	for slot := range removed {
		removed[slot] = fmt.Sprintf("%s-2-%d", prefix, slot)
	}

	d := startProc(t, dir, eoConfig(dir, broker, metrics, eoOptions{parallelism: 3, interval: "500ms"}), broker, metrics)
	loadRules(t, cl, d, 3)
	// A steady stream, so that every sink subtask's open transaction holds
	// records; the kill comes once subtask 2 has an ongoing transaction
	// and two checkpoints completed.
	next := 1
	completed := map[string]string{"kind": "checkpoint", "result": "completed"}
	var ongoing map[string]kadm.DescribedTransaction
	if !testkit.Poll(30*time.Second, func() bool {
		produce(t, cl, genItems(rng, next, 100, colors)...)
		next += 100
		if v, err := testkit.Scrape(d.url(), "kstreamd_checkpoints_total", completed); err != nil || v < 2 {
			return false
		}
		ds, err := adm.DescribeTransactions(context.Background(), removed...)
		if err != nil {
			return false
		}
		ongoing = map[string]kadm.DescribedTransaction{}
		for id, dt := range ds {
			if dt.State == "Ongoing" {
				ongoing[id] = dt
			}
		}
		return len(ongoing) > 0
	}) {
		t.Fatalf("subtask 2 never had an ongoing transaction:\n%s", d.out.String())
	}
	d.kill(t)
	// The daemon is dead: what is ongoing now lingers.
	ds, err := adm.DescribeTransactions(context.Background(), removed...)
	if err != nil {
		t.Fatal(err)
	}
	ongoing = map[string]kadm.DescribedTransaction{}
	for id, dt := range ds {
		if dt.State == "Ongoing" {
			ongoing[id] = dt
		}
	}
	if len(ongoing) == 0 {
		t.Fatalf("no transaction of subtask 2 ongoing after the kill")
	}
	t.Logf("killed after %d items; ongoing transactions of subtask 2: %v", next-1, slices.Sorted(func(yield func(string) bool) {
		for id := range ongoing {
			if !yield(id) {
				return
			}
		}
	}))

	d = startProc(t, dir, eoConfig(dir, broker, metrics, eoOptions{parallelism: 2, interval: "500ms"}), broker, metrics)
	log := d.out.String()
	lingering := 0
	for id, before := range ongoing {
		if logCount(log, "committed restored transaction", "transactional_id="+id+" ") > 0 {
			continue // the pre-committed one the checkpoint carried: committed
		}
		lingering++
		after, err := adm.DescribeTransactions(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if st := after[id]; st.State == "Ongoing" || st.ProducerEpoch <= before.ProducerEpoch {
			t.Errorf("lingering transaction %s (epoch %d) after the restart: state %q, epoch %d; want it aborted by a fence (newer epoch)",
				id, before.ProducerEpoch, st.State, st.ProducerEpoch)
		}
	}
	if lingering == 0 {
		t.Fatalf("every ongoing transaction of subtask 2 was a restored pre-commit; none lingered:\n%s", log)
	}
	produce(t, cl, genItems(rng, next, 500, colors)...)
	next += 500
	want := expectedMatches(t, testkit.ReadTopic(t, []string{broker}, "items", 20*time.Second))
	got, _ := waitMatches(t, d, broker, want, 30*time.Second, time.Second)
	if !slices.Equal(got, want) {
		t.Fatalf("read_committed matches: %s", diffMatches(got, want))
	}
	// The job is idle: no open transaction holds records, so the last
	// stable offset of every partition is its high watermark.
	var lso, hwm map[int32]int64
	if !testkit.Poll(20*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l, err := adm.ListCommittedOffsets(ctx, "matches")
		if err != nil {
			return false
		}
		lso = map[int32]int64{}
		l.Each(func(o kadm.ListedOffset) { lso[o.Partition] = o.Offset })
		if hwm, err = endOffsets(ctx, adm, "matches"); err != nil {
			return false
		}
		for p, o := range hwm {
			if lso[p] != o {
				return false
			}
		}
		return len(hwm) == 4
	}) {
		t.Fatalf("last stable offsets %v never reached the high watermarks %v", lso, hwm)
	}
	if all := readUncommitted(t, broker, "matches"); len(all) <= len(got) {
		t.Errorf("read_uncommitted %d records, read_committed %d: the lingering transactions' records should be there, aborted", len(all), len(got))
	}
	checkNoLoss(t, d)
}

// TestExactlyOnceEmptyEpochs: checkpoints without records in between
// (empty epochs) commit or skip cleanly: no error, no aborted or lost
// transaction, no failed checkpoint, the job keeps running and later
// records are committed as usual.
func TestExactlyOnceEmptyEpochs(t *testing.T) {
	const p = 2
	_, broker := startKfake(t, referenceTopics)
	dir := t.TempDir()
	metrics := testkit.FreeAddr(t)
	cl := newClient(t, broker)
	d := startProc(t, dir, eoConfig(dir, broker, metrics, eoOptions{parallelism: p, interval: "100ms"}), broker, metrics)
	loadRules(t, cl, d, p)
	completed := map[string]string{"kind": "checkpoint", "result": "completed"}
	txns := func(result string) float64 {
		return d.scrape(t, "kstreamd_sink_transactions_total", map[string]string{"sink": "matches", "result": result})
	}
	idle := func(n float64) {
		t.Helper()
		base := d.scrape(t, "kstreamd_checkpoints_total", completed)
		if !testkit.Poll(15*time.Second, func() bool {
			v, err := testkit.Scrape(d.url(), "kstreamd_checkpoints_total", completed)
			return d.exited() || err == nil && v >= base+n
		}) || d.exited() {
			t.Fatalf("%v empty checkpoints did not complete:\n%s", n, d.out.String())
		}
	}
	idle(10)
	for _, r := range []string{"committed", "aborted", "lost"} {
		if v := txns(r); v != 0 {
			t.Errorf("after 10 empty epochs: %s transactions = %v, want 0", r, v)
		}
	}
	produce(t, cl, item(1, "red", "RECTANGLE"), item(2, "red", "TRIANGLE"), item(3, "red", "CIRCLE"), item(4, "red", "CIRCLE"))
	want := []string{"R1 red 1,2", "R2 red 3,4"}
	if got, _ := waitMatches(t, d, broker, want, 15*time.Second, 300*time.Millisecond); !slices.Equal(got, want) {
		t.Fatalf("matches = %q, want %q", got, want)
	}
	committed := txns("committed")
	if committed < 1 || committed > 2 {
		t.Fatalf("committed transactions = %v after 2 matches, want 1 or 2", committed)
	}
	idle(10)
	for r, want := range map[string]float64{"committed": committed, "aborted": 0, "lost": 0} {
		if v := txns(r); v != want {
			t.Errorf("after 10 more empty epochs: %s transactions = %v, want %v", r, v, want)
		}
	}
	if v := d.scrape(t, "kstreamd_checkpoints_total", map[string]string{"result": "failed"}); v != 0 {
		t.Errorf("failed checkpoints = %v, want 0", v)
	}
	if got := matchStrings(t, testkit.ReadTopic(t, []string{broker}, "matches", 10*time.Second)); !slices.Equal(got, want) {
		t.Errorf("matches after idling = %q, want %q", got, want)
	}
	for l := range strings.Lines(d.out.String()) {
		if strings.Contains(l, "level=ERROR") || strings.Contains(l, "level=WARN") && strings.Contains(l, "component=sink") {
			t.Errorf("log line: %s", l)
		}
	}
	if code, _ := d.terminate(t, 15*time.Second); code != 0 {
		t.Fatalf("exit status %d after SIGTERM:\n%s", code, d.out.String())
	}
}

// runUntilExit runs `kstreamd run` on cfg in dir and waits (up to limit)
// for it to exit; it returns the exit status and the output.
func runUntilExit(t *testing.T, dir, cfg string, limit time.Duration) (int, string) {
	t.Helper()
	path := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, kstreamdBinary(t), "run", "--config", path)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("kstreamd run did not exit within %v:\n%s", limit, out)
	}
	if err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

// TestExactlyOnceTimeoutRefused: a transaction timeout not above the
// checkpoint interval is refused by validation (exit 2) naming both values;
// one above the broker's transaction.max.timeout.ms is refused at start
// naming both values. The broker answers DescribeConfigs of the resource
// "" as Kafka does (dynamic defaults only), so the check must describe each
// broker.
func TestExactlyOnceTimeoutRefused(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ timeout, want string }{
		{"400ms", "400ms must exceed checkpoints.interval 500ms"},
		{"500ms", "500ms must exceed checkpoints.interval 500ms"},
	} {
		path := filepath.Join(dir, "short-"+tc.timeout+".yaml")
		cfg := eoConfig(dir, "127.0.0.1:1", testkit.FreeAddr(t), eoOptions{parallelism: 1, interval: "500ms", timeout: tc.timeout})
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, cmd := range []string{"validate", "run"} {
			code, stdout, stderr := runBinary(t, cmd, "--config", path)
			if code != 2 || stdout != "" || !strings.Contains(stderr, "transaction_timeout: "+tc.want) {
				t.Errorf("kstreamd %s with transaction_timeout %s: exit %d, stdout %q, stderr %q; want 2 and %q",
					cmd, tc.timeout, code, stdout, stderr, "transaction_timeout: "+tc.want)
			}
		}
	}

	c, broker := startKfake(t, referenceTopics, kfake.BrokerConfigs(map[string]string{"transaction.max.timeout.ms": "60000"}))
	c.ControlKey(int16(kmsg.DescribeConfigs), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		resp, ok := testkit.DescribeConfigsAsKafka(req)
		return resp, nil, ok
	})
	var inits atomic.Int64
	c.ControlKey(int16(kmsg.InitProducerID), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		inits.Add(1)
		return nil, nil, false
	})
	run := filepath.Join(dir, "run")
	if err := os.MkdirAll(run, 0o755); err != nil {
		t.Fatal(err)
	}
	code, out := runUntilExit(t, run, eoConfig(run, broker, testkit.FreeAddr(t), eoOptions{parallelism: 1, interval: "500ms", timeout: "2m"}), 30*time.Second)
	want := "transaction_timeout 2m0s exceeds the broker's transaction.max.timeout.ms 1m0s"
	if code != 1 || !strings.Contains(out, want) || !strings.Contains(out, "job failed") {
		t.Fatalf("kstreamd run with transaction_timeout 2m against a 60000 ms maximum: exit %d, want 1 and %q:\n%s", code, want, out)
	}
	if n := inits.Load(); n != 0 {
		t.Errorf("%d InitProducerId requests before the refusal, want 0", n)
	}
	// 1m fits.
	metrics := testkit.FreeAddr(t)
	d := startProc(t, run, eoConfig(run, broker, metrics, eoOptions{parallelism: 1, interval: "500ms", timeout: "1m"}), broker, metrics)
	if code, _ := d.terminate(t, 15*time.Second); code != 0 {
		t.Fatalf("transaction_timeout 1m: exit %d:\n%s", code, d.out.String())
	}
}

// TestExactlyOnceLostTransaction: the daemon is killed after a pre-commit
// (commit held) and restarted after the broker aborted the transaction
// for its 2 s timeout. Without the opt-in the job stops with a lost-output
// error naming the transactional id and the checkpoint; with
// ignore_lost_transactions it runs, counts the transaction as lost, and the
// output lacks exactly the lost transaction's records.
func TestExactlyOnceLostTransaction(t *testing.T) {
	const p = 1
	c, broker := startKfake(t, referenceTopics)
	hold := holdCommits(c)
	dir := t.TempDir()
	metrics := testkit.FreeAddr(t)
	opts := eoOptions{parallelism: p, interval: "500ms", timeout: "2s"}
	cl := newClient(t, broker)
	adm := kadm.NewClient(cl)
	rng := rand.New(rand.NewPCG(5, 6))
	colors := []string{"red", "blue", "green"}

	d := startProc(t, dir, eoConfig(dir, broker, metrics, opts), broker, metrics)
	loadRules(t, cl, d, p)
	hold.armed.Store(true)
	produce(t, cl, genItems(rng, 1, 300, colors)...)
	hc := hold.wait(t, d, 20*time.Second)
	last := d.scrape(t, "kstreamd_checkpoint_last_completed_id", nil)
	d.kill(t)
	hold.disarm()
	// kfake aborts the transaction once its 2 s timeout passed.
	if !testkit.Poll(10*time.Second, func() bool {
		ds, err := adm.DescribeTransactions(context.Background(), hc.TransactionalID)
		return err == nil && ds[hc.TransactionalID].State != "Ongoing"
	}) {
		t.Fatalf("the broker did not abort %s after its timeout", hc.TransactionalID)
	}

	code, out := runUntilExit(t, dir, eoConfig(dir, broker, metrics, opts), 30*time.Second)
	want := fmt.Sprintf("lost output: transaction %s of checkpoint %v", hc.TransactionalID, last)
	if code != 1 || !strings.Contains(out, want) || !strings.Contains(out, "ignore_lost_transactions") {
		t.Fatalf("restart after the timeout: exit %d, want 1 and %q:\n%s", code, want, out)
	}

	opts.sinkExtra = "    ignore_lost_transactions: true\n"
	d = startProc(t, dir, eoConfig(dir, broker, metrics, opts), broker, metrics)
	if v := d.scrape(t, "kstreamd_sink_transactions_total", map[string]string{"result": "lost"}); v != 1 {
		t.Fatalf("lost transactions = %v, want 1:\n%s", v, d.out.String())
	}
	if logCount(d.out.String(), "lost output ignored", "transactional_id="+hc.TransactionalID, fmt.Sprintf("checkpoint_id=%v", last)) != 1 {
		t.Errorf("no \"lost output ignored\" line naming %s and checkpoint %v:\n%s", hc.TransactionalID, last, d.out.String())
	}
	produce(t, cl, genItems(rng, 301, 300, colors)...)
	all := expectedMatches(t, testkit.ReadTopic(t, []string{broker}, "items", 20*time.Second))
	// The lost transaction's records are the aborted records of its
	// producer id and epoch.
	var lost []*kgo.Record
	for _, r := range readUncommitted(t, broker, "matches") {
		if r.ProducerID == hc.ProducerID && r.ProducerEpoch == hc.Epoch {
			lost = append(lost, r)
		}
	}
	if len(lost) == 0 {
		t.Fatalf("no record of the lost transaction (producer %d, epoch %d) in the topic", hc.ProducerID, hc.Epoch)
	}
	lostStrings := matchStrings(t, lost)
	var want2 []string
	for _, m := range all {
		if i, ok := slices.BinarySearch(lostStrings, m); ok {
			lostStrings = slices.Delete(lostStrings, i, i+1)
			continue
		}
		want2 = append(want2, m)
	}
	if len(lostStrings) != 0 {
		t.Fatalf("lost records %q are not expected matches", lostStrings)
	}
	got, _ := waitMatches(t, d, broker, want2, 20*time.Second, time.Second)
	if !slices.Equal(got, want2) {
		t.Fatalf("read_committed matches (all but the %d lost): %s", len(lost), diffMatches(got, want2))
	}
	t.Logf("%d matches committed, %d lost with transaction %s of checkpoint %v", len(got), len(lost), hc.TransactionalID, last)
	if d.exited() {
		t.Fatalf("kstreamd exited:\n%s", d.out.String())
	}
}

// TestBufferingSinkSurvivesCrash: an at-least-once sink with
// buffer_threshold far above the input keeps every match in its buffer
// until a checkpoint completes. The broker swallows the sink's produce
// requests, so the flush on completion never lands, and the daemon is
// SIGKILLed while it waits: the checkpoint holds the buffer, the topic
// holds nothing. The restarted job re-reads no item (the checkpoint's
// offsets are past them) and still writes every match: they come from the
// restored operator state.
func TestBufferingSinkSurvivesCrash(t *testing.T) {
	const p = 2
	c, broker := startKfake(t, referenceTopics)
	cl := newClient(t, broker)
	// Produce v13+ names the topic by id.
	tds, err := kadm.NewClient(cl).ListTopics(context.Background(), "matches")
	if err != nil || tds.Error() != nil {
		t.Fatalf("topic id of matches: %v %v", err, tds.Error())
	}
	matchesID := tds["matches"].ID
	var armed atomic.Bool
	swallowed := make(chan struct{}, 1)
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !armed.Load() {
			return nil, nil, false
		}
		for _, tp := range req.(*kmsg.ProduceRequest).Topics {
			if tp.Topic == "matches" || tp.TopicID == matchesID {
				select {
				case swallowed <- struct{}{}:
				default:
				}
				return nil, nil, true
			}
		}
		return nil, nil, false
	})
	dir := t.TempDir()
	metrics := testkit.FreeAddr(t)
	cfg := eoConfig(dir, broker, metrics, eoOptions{parallelism: p, interval: "2s", delivery: "at-least-once",
		sinkExtra: "    buffer_threshold: 1000000\n"})
	rng := rand.New(rand.NewPCG(7, 8))

	d := startProc(t, dir, cfg, broker, metrics)
	loadRules(t, cl, d, p)
	// The matches must reach the sink between two barriers, so that the
	// next checkpoint holds them: a checkpoint whose barrier passed before
	// them, completing meanwhile, flushes them at its notification while
	// holding none (right for at-least-once: they are read again, but
	// then this run proves nothing about the buffer). So produce just
	// after a checkpoint completed, with 2 s before the next one.
	d.checkpointAfter(t)
	armed.Store(true)
	items := genItems(rng, 1, 400, []string{"red", "blue", "green", "yellow", "black", "white"})
	produce(t, cl, items...)
	want := expectedMatches(t, items)
	testkit.WaitMetric(t, 15*time.Second, d.url(), "kstreamd_operator_records_in_total", map[string]string{"operator": "matches"}, float64(len(want)))
	select {
	case <-swallowed:
	case <-time.After(20 * time.Second):
		t.Fatalf("the sink never flushed its buffer:\n%s", d.out.String())
	}
	last := d.scrape(t, "kstreamd_checkpoint_last_completed_id", nil)
	d.kill(t)
	armed.Store(false)
	if got := readUncommitted(t, broker, "matches"); len(got) != 0 {
		t.Fatalf("the topic holds %d records after the crash, want 0", len(got))
	}

	d = startProc(t, dir, cfg, broker, metrics)
	if got := restoredCheckpoint(t, d); got != fmt.Sprint(last) {
		t.Fatalf("restart restored checkpoint %s, want %v", got, last)
	}
	// The checkpoint holds the buffer: every match the sink had received
	// before the checkpoint's barrier (normally all of them; the items
	// behind the barrier, if any, are read again).
	buffered := bufferedInCheckpoint(t, d)
	if buffered == 0 {
		t.Fatalf("checkpoint %v holds no buffered record", last)
	}
	got, _ := waitMatches(t, d, broker, want, 20*time.Second, time.Second)
	if !slices.Equal(got, want) {
		t.Fatalf("matches after the restore: %s", diffMatches(got, want))
	}
	reread := d.scrape(t, "kstreamd_operator_records_in_total", map[string]string{"operator": "items"})
	if reread == 0 && buffered != len(want) {
		t.Errorf("no item read again, yet the checkpoint buffered %d of %d matches", buffered, len(want))
	}
	t.Logf("%d matches written after the restart, %d of them from the buffer restored from checkpoint %v (%v items read again)",
		len(got), buffered, last, reread)
}

// bufferedInCheckpoint returns the number of records the BufferingSink
// "matches" stored in the checkpoint p restored.
func bufferedInCheckpoint(t *testing.T, p *proc) int {
	t.Helper()
	lines := restoreLines(p.out.String())
	if len(lines) == 0 {
		t.Fatalf("no restore line:\n%s", p.out.String())
	}
	dir := logField(lines[0], "dir")
	meta, err := checkpoint.ReadMetadata(dir)
	if err != nil {
		t.Fatalf("read the metadata of %q: %v", dir, err)
	}
	states, err := checkpoint.DecodeTaskStates(meta.Operators["matches"])
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range states {
		n += len(s.Operator[sink.BufferedState].Entries)
	}
	return n
}
