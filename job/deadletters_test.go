package job_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/job"
	"github.com/kstreamd/kstreamd/source"
)

// copyDLQYAML is copyYAML with bad records dead-lettered.
var copyDLQYAML = strings.Replace(copyYAML, "    topic: in\n", "    topic: in\n    on_error: dead-letter\n    dead_letter_topic: dlq\n", 1)

// malformed is the kstreamd.error header of the bad value `[1,2`.
const malformed = "malformed_json: unexpected end of JSON input at offset 4"

// produced is a record written to the input and its offset there.
type produced struct {
	key    string
	value  string
	offset int64
}

// produceAll writes recs to topic in one batch (one partition) and returns
// them with their offsets.
func produceAll(t *testing.T, opts []kgo.Opt, topic string, recs []produced) []produced {
	t.Helper()
	cl, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic(topic))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	krs := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		krs[i] = &kgo.Record{Key: []byte(r.key), Value: []byte(r.value)}
	}
	res := cl.ProduceSync(context.Background(), krs...)
	if err := res.FirstErr(); err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		recs[i].offset = r.Record.Offset
	}
	return recs
}

// checkDeadLetters asserts that dlq holds exactly the records of want, once
// each, in order, with their value and the error headers naming where they
// were read (topic, partition 0, their offset) and errText(key) (a text
// ending in "*": its prefix).
func checkDeadLetters(t *testing.T, dlq []*kgo.Record, want []produced, topic string, errText func(key string) string) {
	t.Helper()
	if len(dlq) != len(want) {
		t.Errorf("the read_committed dead-letter topic holds %d records, want %d", len(dlq), len(want))
	}
	for i, r := range dlq {
		if i >= len(want) {
			t.Errorf("extra dead letter %q", r.Key)
			continue
		}
		w := want[i]
		h := map[string]string{}
		for _, rh := range r.Headers {
			h[rh.Key] = string(rh.Value)
		}
		if string(r.Key) != w.key || string(r.Value) != w.value {
			t.Errorf("dead letter %d = %q/%q, want %q/%q", i, r.Key, r.Value, w.key, w.value)
		}
		wantErr := errText(w.key)
		if p, ok := strings.CutSuffix(wantErr, "*"); (ok && !strings.HasPrefix(h[source.HeaderError], p)) || (!ok && h[source.HeaderError] != wantErr) {
			t.Errorf("dead letter %q: %s = %q, want %q", w.key, source.HeaderError, h[source.HeaderError], wantErr)
		}
		if h[source.HeaderTopic] != topic {
			t.Errorf("dead letter %q: %s = %q, want %q", w.key, source.HeaderTopic, h[source.HeaderTopic], topic)
		}
		if h[source.HeaderPartition] != "0" || h[source.HeaderOffset] != fmt.Sprint(w.offset) {
			t.Errorf("dead letter %q: read at %s/%s, want 0/%d", w.key, h[source.HeaderPartition], h[source.HeaderOffset], w.offset)
		}
	}
}

// restoredCommit is one "committed restored transaction" log line.
type restoredCommit struct {
	ID           string `json:"transactional_id"`
	CheckpointID int64  `json:"checkpoint_id"`
	Records      int64  `json:"records"`
}

// restoredCommits returns the transactions a log records as "committed
// restored transaction", in order.
func restoredCommits(t *testing.T, log string) []restoredCommit {
	t.Helper()
	var out []restoredCommit
	for _, l := range strings.Split(log, "\n") {
		if !strings.Contains(l, `"msg":"committed restored transaction"`) {
			continue
		}
		var e restoredCommit
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

// TestUnitDeadLettersExactlyOnce: a unit of the copy job dead-letters the
// malformed records of its input. Its dead letters are written into a
// transaction of the unit (ids kstreamd-copy-in.dead-letters-0-0-<slot>)
// committed with the unit's checkpoint: owner a crashes (the coordinator's
// fault seam) in the first checkpoint after the first phase whose epoch
// holds records, whose first record is a bad one. At the crash the
// read_committed dead-letter topic holds exactly the first phase's 3 dead
// letters while read_uncommitted shows the crashed epoch's written too.
// Owner b takes over: after the HEAD it commits the restored dead-letter
// transaction (with exactly the epoch's bad records) and replays only what
// followed; before the HEAD the crashed epoch's dead letters are aborted
// by b's fencing and written once more. Either way the read_committed
// dead-letter topic holds each of the 6 bad records exactly once, with
// its error, topic, partition and offset headers, and the output each
// good record once.
func TestUnitDeadLettersExactlyOnce(t *testing.T) {
	for _, tc := range crashPoints {
		t.Run(tc.name, func(t *testing.T) {
			f := newUnitFixture(t, "copy.yaml", copyDLQYAML, kfake.SeedTopics(1, "in", "out", "dlq"))
			opts, dir := f.opts, f.dir
			ns := dir + "/store/copy/units/0/0"
			read := func(iso kgo.IsolationLevel, topic string) []*kgo.Record {
				return testkit.ReadTopicWith(t, opts, iso, topic, 5*time.Second)
			}
			var armed atomic.Bool
			var crashID, crashOffset int64 // written by a's coordinator only, read after a stopped
			fault := func(p checkpoint.FaultPoint, id int64) bool {
				if !armed.Load() {
					return false
				}
				if p == checkpoint.FaultBeforeHead && crashID == 0 {
					if off := sourceOffset(t, fmt.Sprintf("%s/chk-%d", ns, id)); off > 13 {
						crashID, crashOffset = id, off
					}
				}
				return p == tc.point && id == crashID
			}
			// Phase 1: 10 good records and 3 bad ones (offsets 0..12).
			var phase1, phase2 []produced
			for i := range 10 {
				phase1 = append(phase1, produced{key: fmt.Sprint("g", i), value: fmt.Sprintf(`{"i":%d}`, i)})
				if i%3 == 2 {
					phase1 = append(phase1, produced{key: fmt.Sprint("bad", len(phase1)), value: `[1,2`})
				}
			}
			// Phase 2 starts with a bad record, so the crashed epoch holds
			// at least one dead letter (offsets 13..25).
			phase2 = append(phase2, produced{key: "bad13", value: `[1,2`})
			for i := 10; i < 20; i++ {
				phase2 = append(phase2, produced{key: fmt.Sprint("g", i), value: fmt.Sprintf(`{"i":%d}`, i)})
				if i%5 == 2 {
					phase2 = append(phase2, produced{key: fmt.Sprint("bad", 13+len(phase2)), value: `[1,2`})
				}
			}
			phase1 = produceAll(t, opts, "in", phase1)
			bad := func(rs []produced) []produced {
				var out []produced
				for _, r := range rs {
					if strings.HasPrefix(r.key, "bad") {
						out = append(out, r)
					}
				}
				return out
			}
			a := f.buildOwner(t, "a", fault, &testkit.SyncBuffer{})
			aDone := make(chan error, 1)
			go func() { aDone <- a.Run(context.Background()) }()
			if !testkit.Poll(time.Minute, func() bool {
				return len(read(kgo.ReadCommitted(), "out")) == 10 && len(read(kgo.ReadCommitted(), "dlq")) == 3
			}) {
				t.Fatal("a never committed the first phase")
			}
			armed.Store(true)
			phase2 = produceAll(t, opts, "in", phase2)
			stoppedByFault(t, aDone)
			// The crashed epoch's dead letters were written, inside a's
			// transaction: read_committed does not see them.
			committedAtCrash, uncommittedAtCrash := read(kgo.ReadCommitted(), "dlq"), read(kgo.ReadUncommitted(), "dlq")
			checkDeadLetters(t, committedAtCrash, bad(phase1), "in", func(string) string { return malformed })
			if len(uncommittedAtCrash) < 4 {
				t.Fatalf("read_uncommitted, the dead-letter topic holds %d records at the crash, want the first phase's 3 and at least bad13 of the crashed epoch", len(uncommittedAtCrash))
			}
			if k := string(uncommittedAtCrash[3].Key); k != "bad13" {
				t.Errorf("the first uncommitted dead letter is %q, want bad13", k)
			}
			var inEpoch, afterEpoch int64 // bad records of phase 2 in the crashed epoch, after it
			for _, r := range bad(phase2) {
				if r.offset < crashOffset {
					inEpoch++
				} else {
					afterEpoch++
				}
			}

			blog := &testkit.SyncBuffer{}
			b := f.buildOwner(t, "b", nil, blog)
			bctx, bcancel := context.WithCancel(context.Background())
			bDone := make(chan error, 1)
			go func() { bDone <- b.Run(bctx) }()
			if !testkit.Poll(time.Minute, func() bool {
				return len(read(kgo.ReadCommitted(), "out")) >= 20 && len(read(kgo.ReadCommitted(), "dlq")) >= 6
			}) {
				t.Fatalf("b never committed the second phase\nb:\n%s", blog.String())
			}
			bcancel()
			if err := <-bDone; err != nil {
				t.Errorf("b: %v", err)
			}
			checkDeadLetters(t, read(kgo.ReadCommitted(), "dlq"), append(bad(phase1), bad(phase2)...), "in", func(string) string { return malformed })
			if out := read(kgo.ReadCommitted(), "out"); len(out) != 20 {
				t.Errorf("the read_committed output holds %d records, want 20", len(out))
			}
			restored := restoredCommits(t, blog.String())
			var dlRestored [][2]int64 // checkpoint id, records
			for _, c := range restored {
				if strings.HasPrefix(c.ID, "kstreamd-copy-in.dead-letters-0-0-") {
					dlRestored = append(dlRestored, [2]int64{c.CheckpointID, c.Records})
				} else if !strings.HasPrefix(c.ID, "kstreamd-copy-out-0-0-") {
					t.Errorf("b committed the restored transaction %s of no writer of the unit", c.ID)
				}
			}
			uncommitted := len(read(kgo.ReadUncommitted(), "dlq"))
			t.Logf("crash in checkpoint %d at offset %d; b committed restored %v", crashID, crashOffset, restored)
			switch tc.point {
			case checkpoint.FaultAfterHead:
				if want := [][2]int64{{crashID, inEpoch}}; !slices.Equal(dlRestored, want) {
					t.Errorf("b committed restored dead-letter transactions %v, want %v (checkpoint, records)", dlRestored, want)
				}
				if want := len(uncommittedAtCrash) + int(afterEpoch); uncommitted != want {
					t.Errorf("read_uncommitted, the dead-letter topic holds %d records, want %d (only the %d after the crashed epoch written again)", uncommitted, want, afterEpoch)
				}
			case checkpoint.FaultBeforeHead:
				// b commits the restored checkpoint's dead letters again,
				// idempotently (a committed them), none of the crashed one.
				for _, c := range dlRestored {
					if c[0] >= crashID {
						t.Errorf("b committed the restored dead-letter transaction of checkpoint %d (%d records), which has no HEAD", c[0], c[1])
					}
				}
				if want := len(uncommittedAtCrash) + 3; uncommitted != want {
					t.Errorf("read_uncommitted, the dead-letter topic holds %d records, want %d (the 3 of phase 2 aborted and written again)", uncommitted, want)
				}
			}
		})
	}
}

// filterDLQYAML is a single-process exactly-once job whose source
// dead-letters malformed records and whose filter dead-letters the records
// its condition fails on.
const filterDLQYAML = `
job:
  name: dl
  parallelism: 1
  max_parallelism: 8
kafka:
  brokers: [localhost:9092]
checkpoints:
  interval: 100ms
  timeout: 1m
sources:
  - name: events
    topic: in
    on_error: dead-letter
    dead_letter_topic: dlq
operators:
  - name: big
    type: filter
    input: events
    params:
      condition: amount > 100
sinks:
  - name: out
    input: big
    topic: out
    delivery: exactly-once
    transaction_timeout: 5m
`

// TestDeadLettersExactlyOnce: a single-process exactly-once job dead-letters
// 2 malformed records (in the source task) and 2 records the filter's
// condition fails on (in the filter task), each through its task's
// transactional writer. Every commit (EndTxn) is held by the broker, so the
// process dies after the checkpoint holding them completed and before any
// commit: the read_committed dead-letter topic is empty then while
// read_uncommitted holds the 4, so the writes are inside transactions. The
// restarted job commits the restored committables of both writers (2
// records each, ids kstreamd-dl-events.dead-letters-0-<slot> and
// kstreamd-dl-big.dead-letters-0-<slot>) and the sink's: the read_committed
// dead-letter topic holds each bad record exactly once with its headers,
// nothing is written twice, and the output holds the 6 records above 100.
func TestDeadLettersExactlyOnce(t *testing.T) {
	kc, opts := newKafka(t, kfake.SeedTopics(1, "in", "out", "dlq"))
	var hold atomic.Bool
	hold.Store(true)
	var held atomic.Int64
	release := make(chan struct{})
	kc.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		r := req.(*kmsg.EndTxnRequest)
		if !r.Commit || !hold.Load() {
			return nil, nil, false
		}
		held.Add(1)
		kc.SleepControl(func() { <-release })
		resp := r.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		return resp, nil, true
	})
	cfg := parseConfig(t, "dl.yaml", filterDLQYAML)
	g, err := cfg.Plan()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	set := cfg.Settings()
	set.CheckpointDir, set.StateDir, set.StateBackend = dir+"/chk", dir+"/state", "hashmap"
	build := func(log *testkit.SyncBuffer) *job.Job {
		j, err := job.Build(context.Background(), g, set, job.Deps{ClientOpts: opts, DrainTimeout: time.Second,
			Logger: slog.New(slog.NewJSONHandler(log, nil))})
		if err != nil {
			t.Fatalf("build: %v", err)
		}
		return j
	}
	read := func(iso kgo.IsolationLevel, topic string) []*kgo.Record {
		return testkit.ReadTopicWith(t, opts, iso, topic, 5*time.Second)
	}
	var recs []produced
	for i := range 10 {
		recs = append(recs, produced{key: fmt.Sprint("g", i), value: fmt.Sprintf(`{"id":%d,"amount":%d}`, i, 97+i)})
		switch i {
		case 2, 6:
			recs = append(recs, produced{key: fmt.Sprint("malformed", i), value: `[1,2`})
		case 4, 8:
			recs = append(recs, produced{key: fmt.Sprint("eval", i), value: fmt.Sprintf(`{"id":%d,"amount":"x"}`, i)})
		}
	}
	recs = produceAll(t, opts, "in", recs)
	var bad []produced
	for _, r := range recs {
		if !strings.HasPrefix(r.key, "g") {
			bad = append(bad, r)
		}
	}
	errText := func(key string) string {
		if strings.HasPrefix(key, "malformed") {
			return malformed
		}
		return `eval_error: expression "amount > 100"*` // the engine's message follows
	}

	alog := &testkit.SyncBuffer{}
	a := build(alog)
	actx, acancel := context.WithCancel(context.Background())
	aDone := make(chan error, 1)
	go func() { aDone <- a.Run(actx) }()
	// The checkpoint holding every record completed: its commits (the
	// two dead-letter writers' and the sink's) reach the broker, which
	// holds them.
	if !testkit.Poll(time.Minute, func() bool { return held.Load() >= 3 }) {
		t.Fatalf("%d commits reached the broker, want 3\na:\n%s", held.Load(), alog.String())
	}
	if n := len(read(kgo.ReadCommitted(), "dlq")); n != 0 {
		t.Errorf("before any commit the read_committed dead-letter topic holds %d records, want 0", n)
	}
	if n := len(read(kgo.ReadUncommitted(), "dlq")); n != 4 {
		t.Errorf("before any commit the read_uncommitted dead-letter topic holds %d records, want the 4 written", n)
	}
	acancel() // the process dies with its commits in flight
	<-aDone
	hold.Store(false)
	close(release)

	blog := &testkit.SyncBuffer{}
	b := build(blog)
	bctx, bcancel := context.WithCancel(context.Background())
	bDone := make(chan error, 1)
	go func() { bDone <- b.Run(bctx) }()
	if !testkit.Poll(time.Minute, func() bool { return len(read(kgo.ReadCommitted(), "out")) >= 6 }) {
		t.Fatalf("the restarted job never committed the output\nb:\n%s", blog.String())
	}
	bcancel()
	if err := <-bDone; err != nil {
		t.Errorf("b: %v", err)
	}
	if b.RestoredFrom() == "" {
		t.Fatal("the restarted job restored no checkpoint")
	}
	dlq := read(kgo.ReadCommitted(), "dlq")
	// The source's dead letters and the filter's are in two transactions:
	// compare them in offset order of the input.
	slices.SortFunc(dlq, func(x, y *kgo.Record) int { return cmp.Compare(offsetHeader(t, x), offsetHeader(t, y)) })
	checkDeadLetters(t, dlq, bad, "in", errText)
	if n := len(read(kgo.ReadUncommitted(), "dlq")); n != 4 {
		t.Errorf("read_uncommitted, the dead-letter topic holds %d records, want 4 (none written twice)", n)
	}
	if out := read(kgo.ReadCommitted(), "out"); len(out) != 6 {
		t.Errorf("the read_committed output holds %d records, want the 6 above 100", len(out))
	}
	got := map[string]int64{}
	for _, c := range restoredCommits(t, blog.String()) {
		got[c.ID[:strings.LastIndex(c.ID, "-")]] += c.Records // by writer: the prefix and subtask
	}
	want := map[string]int64{"kstreamd-dl-events.dead-letters-0": 2, "kstreamd-dl-big.dead-letters-0": 2, "kstreamd-dl-out-0": 6}
	if !maps.Equal(got, want) {
		t.Errorf("the restarted job committed restored transactions %v (records by writer), want %v", got, want)
	}
}

// offsetHeader returns the input offset a dead letter's header names.
func offsetHeader(t *testing.T, r *kgo.Record) int64 {
	t.Helper()
	for _, h := range r.Headers {
		if h.Key == source.HeaderOffset {
			o, err := strconv.ParseInt(string(h.Value), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return o
		}
	}
	t.Fatalf("dead letter %q has no %s header", r.Key, source.HeaderOffset)
	return 0
}

// TestRevokeCommitsDeadLetters: a unit whose periodic checkpoints never come
// (interval 1h) dead-letters 3 of 13 records; when its member stops, the
// revoke's final checkpoint (stop-after) is committed by the source's
// dead-letter writer before the source finishes: the read_committed
// dead-letter topic holds each bad record exactly once, and no other
// owner was needed to commit it.
func TestRevokeCommitsDeadLetters(t *testing.T) {
	f := newUnitFixture(t, "copy.yaml", copyDLQYAML, kfake.SeedTopics(1, "in", "out", "dlq"))
	opts, st, set := f.opts, f.st, f.set
	set.Interval = time.Hour // only the revoke's checkpoint can commit
	var recs []produced
	for i := range 10 {
		recs = append(recs, produced{key: fmt.Sprint("g", i), value: fmt.Sprintf(`{"i":%d}`, i)})
		if i%3 == 1 {
			recs = append(recs, produced{key: fmt.Sprint("bad", i), value: `[1,2`})
		}
	}
	recs = produceAll(t, opts, "in", recs)
	var bad []produced
	for _, r := range recs {
		if strings.HasPrefix(r.key, "bad") {
			bad = append(bad, r)
		}
	}
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- job.RunMember(ctx, st, set, job.Deps{Registerer: reg, ClientOpts: opts}, job.MemberConfig{
			GroupID: "copy-cluster", MemberID: "m1",
			SessionTimeout: 10 * time.Second, RebalanceTimeout: time.Minute, RevokeTimeout: 50 * time.Second,
		})
	}()
	if !testkit.Poll(2*time.Minute, func() bool {
		return counterSum(t, reg, "kstreamd_operator_records_in_total", map[string]string{"operator": "out"}) == 10 &&
			counterSum(t, reg, "kstreamd_source_records_dead_lettered_total", map[string]string{"source": "in"}) == 3
	}) {
		t.Fatal("the unit never read every record")
	}
	if n := len(testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), "dlq", 5*time.Second)); n != 0 {
		t.Errorf("before the final checkpoint the read_committed dead-letter topic holds %d records, want 0", n)
	}
	cancel() // the member leaves: the unit is revoked
	if err := memberReturned(t, done); err != nil {
		t.Fatalf("RunMember: %v", err)
	}
	checkDeadLetters(t, testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), "dlq", 5*time.Second), bad, "in", func(string) string { return malformed })
	if n := len(testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), "out", 5*time.Second)); n != 10 {
		t.Errorf("the read_committed output holds %d records, want 10", n)
	}
}
