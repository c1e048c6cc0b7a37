package job_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/job"
	"github.com/kstreamd/kstreamd/source"
)

// storeMetadata reads the _metadata of the unit checkpoint directory dir
// of a filesystem store: version 4 when the upload put small files into
// it (checkpoint.Metadata.InlineFiles), which ReadMetadata, a reader of
// local directories, refuses.
func storeMetadata(dir string) (*checkpoint.Metadata, error) {
	b, err := os.ReadFile(filepath.Join(dir, checkpoint.MetadataFile))
	if err != nil {
		return nil, err
	}
	var m checkpoint.Metadata
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// counterSum is the sum of every series of the counter name in reg whose
// labels include match.
func counterSum(t *testing.T, reg *prometheus.Registry, name string, match map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range match {
				if labels[k] != v {
					continue series
				}
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// heads reads every HEAD of a unit's namespace, HEAD-1 first; it stops at
// the first missing sequence.
func heads(t *testing.T, ns string) []checkpoint.Head {
	t.Helper()
	var out []checkpoint.Head
	for k := 1; ; k++ {
		b, err := os.ReadFile(filepath.Join(ns, fmt.Sprintf("HEAD-%d", k)))
		if os.IsNotExist(err) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		var h checkpoint.Head
		if err := json.Unmarshal(b, &h); err != nil {
			t.Fatal(err)
		}
		out = append(out, h)
	}
}

// TestRevokeTakesFinalCheckpoint: a member runs the one unit of a copy job
// whose periodic checkpoints never come (interval 1h); when the member
// stops, the revoke triggers the unit's final checkpoint at once: the
// unit's HEAD chain is exactly its claim and one checkpoint (chk-1) by the
// member, and that checkpoint's transaction is committed: read_committed
// output holds every record once.
func TestRevokeTakesFinalCheckpoint(t *testing.T) {
	f := newUnitFixture(t, "copy.yaml", copyYAML, kfake.SeedTopics(1, "in", "out"))
	opts, st, dir, set := f.opts, f.st, f.dir, f.set
	set.Interval = time.Hour // only the revoke's checkpoint can commit
	const n = 20
	produceEach(t, opts, "in", 0, n, copyValue)
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	joined := make(chan *job.Member, 1)
	go func() {
		done <- job.RunMember(ctx, st, set, job.Deps{Registerer: reg, ClientOpts: opts}, job.MemberConfig{
			GroupID: "copy-cluster", MemberID: "m1",
			SessionTimeout: 10 * time.Second, RebalanceTimeout: time.Minute, RevokeTimeout: 50 * time.Second,
			OnJoined: func(m *job.Member) { joined <- m },
		})
	}()
	var mem *job.Member
	select {
	case mem = <-joined:
	case err := <-done:
		t.Fatalf("RunMember returned before joining: %v", err)
	}
	if !testkit.Poll(2*time.Minute, func() bool {
		return counterSum(t, reg, "kstreamd_operator_records_in_total", map[string]string{"operator": "out"}) == n
	}) {
		t.Fatal("the unit's sink never received every record")
	}
	// The API's view: joined, the one unit running here, and the group's
	// assignment naming this member with it.
	if !testkit.Poll(time.Minute, mem.Ready) {
		t.Fatal("the member never became ready")
	}
	status := mem.Status(ctx)
	var host string // the client host the broker saw
	if len(status.Members) > 0 {
		host = status.Members[0].Host
	}
	wantStatus := job.ClusterStatus{Job: "copy", Member: "m1", Group: "copy-cluster", Joined: true,
		Units:   []job.UnitStatus{{UnitID: job.UnitID{Stage: 0, Unit: 0}, Running: true, State: job.StateRunning}},
		Members: []job.MemberUnits{{Member: "m1", Host: host, Units: []job.UnitID{{Stage: 0, Unit: 0}}, Fingerprint: st.Fingerprint[:12]}},
	}
	if fmt.Sprintf("%+v", status) != fmt.Sprintf("%+v", wantStatus) {
		t.Errorf("status %+v, want %+v", status, wantStatus)
	}
	cancel() // the member leaves: every unit is revoked
	if err := memberReturned(t, done); err != nil {
		t.Fatalf("RunMember: %v", err)
	}
	got := heads(t, dir+"/store/copy/units/0/0")
	if len(got) == 2 && (got[0].Token == "" || got[1].Token != got[0].Token) {
		t.Errorf("HEAD tokens %q, %q: want the claim's token in both", got[0].Token, got[1].Token)
	}
	for i := range got {
		got[i].Token = ""
	}
	want := []checkpoint.Head{
		{Seq: 1, CheckpointID: 0, Owner: "m1", Claim: true, Fingerprint: st.Fingerprint, Units: 1},
		{Seq: 2, CheckpointID: 1, Owner: "m1", Fingerprint: st.Fingerprint, Units: 1, MetadataClaim: 1}, // its files are all inline: the _metadata is the owner marker,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("HEAD chain %+v, want %+v", got, want)
	}
	unit := map[string]string{"stage": "0", "unit": "0"}
	for _, m := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"kstreamd_cluster_unit_takeovers_total", unit, 1},
		{"kstreamd_cluster_unit_restores_total", unit, 0},
		{"kstreamd_cluster_unit_checkpoints_total", unit, 1},
		{"kstreamd_cluster_unit_head", unit, 2},
		{"kstreamd_cluster_units", map[string]string{"stage": "0"}, 0},
		{"kstreamd_cluster_unit_stops_total", map[string]string{"outcome": job.StopFinalCheckpoint}, 1},
		{"kstreamd_cluster_unit_stops_total", nil, 1},
	} {
		if got := counterSum(t, reg, m.name, m.labels); got != m.want {
			t.Errorf("%s%v = %v, want %v", m.name, m.labels, got, m.want)
		}
	}
	out := testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), "out", 10*time.Second)
	seen := map[string]int{}
	for _, r := range out {
		seen[string(r.Value)]++
	}
	for i := range n {
		if v := fmt.Sprintf(`{"i":%d}`, i); seen[v] != 1 {
			t.Errorf("record %s in the output %d times, want once", v, seen[v])
		}
	}
	if len(out) != n {
		t.Errorf("output holds %d records, want %d", len(out), n)
	}
}

// TestRepartitionPurge: after a stage-1 unit's checkpoint is committed,
// its repartition partition starts at exactly the offset that checkpoint
// recorded (the records before it are deleted, nothing after them), and
// the unit's other partitions are untouched. A zombie, whose HEAD create
// fails, sends no DeleteRecords at all.
func TestRepartitionPurge(t *testing.T) {
	f := newUnitFixture(t, "units.yaml", strings.Replace(unitsYAML, "units: 4", "units: 2", 1), kfake.SeedTopics(2, "clicks", "counts"))
	kc, opts, st, dir, set := f.kc, f.opts, f.st, f.dir, f.set
	var purgeMu sync.Mutex
	purges := map[int32]int{} // DeleteRecords requests per partition of the repartition topic
	kc.ControlKey(21, func(req kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		purgeMu.Lock()
		for _, tp := range req.(*kmsg.DeleteRecordsRequest).Topics {
			for _, p := range tp.Partitions {
				purges[p.Partition]++
			}
		}
		purgeMu.Unlock()
		return nil, nil, false
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.ensureRepartitions(t)
	rep := st.Repartitions[0].Topic
	produce := func(from, to int) { produceEach(t, opts, "clicks", from, to, clickOf5) }
	reg := prometheus.NewRegistry()
	m1, err := job.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	build := func(stage, u int, member string, interval time.Duration, m *job.Metrics) *job.Job {
		s := set
		s.Interval = interval
		s.StateDir += "/" + member
		s.Unit = &job.Unit{Stage: stage, Index: u, Units: st.Units, Member: member, Fingerprint: st.Fingerprint}
		j, err := job.Build(ctx, st.Stages[stage].Graph, s, job.Deps{ClientOpts: opts, Metrics: m})
		if err != nil {
			t.Fatalf("build stage %d unit %d: %v", stage, u, err)
		}
		return j
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	run := func(j *job.Job, name string) {
		wg.Go(func() {
			if err := j.Run(ctx); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		})
	}
	for u := range st.Units {
		run(build(0, u, "a", 200*time.Millisecond, nil), fmt.Sprintf("stage 0 unit %d", u))
	}
	// Stage 1 checkpoints only when the test asks (interval 1h).
	var down []*job.Job
	for u := range st.Units {
		down = append(down, build(1, u, "a", time.Hour, m1))
	}
	zombieDone := make(chan error, 1)
	go func() { zombieDone <- down[0].Run(ctx) }()
	run(down[1], "stage 1 unit 1")
	const n = 40
	produce(0, n)
	in := func() float64 {
		return counterSum(t, reg, "kstreamd_operator_records_in_total", map[string]string{"operator": "per_user"})
	}
	if !testkit.Poll(2*time.Minute, func() bool { return in() == n }) {
		t.Fatalf("stage 1 read %v records, want %d", in(), n)
	}
	adm := newAdmin(t, opts)
	start := func(p int32) int64 {
		offs, err := adm.ListStartOffsets(ctx, rep)
		if err != nil {
			t.Fatal(err)
		}
		o, _ := offs.Lookup(rep, p)
		return o.Offset
	}
	// checkpointed is the offset of partition u in stage-1 unit u's
	// checkpoint id.
	checkpointed := func(u int, id int64) int64 {
		m, err := storeMetadata(fmt.Sprintf("%s/store/clicks/units/1/%d/chk-%d", dir, u, id))
		if err != nil {
			t.Fatal(err)
		}
		states, err := checkpoint.DecodeTaskStates(m.Operators["repartition.1"])
		if err != nil {
			t.Fatal(err)
		}
		for _, ts := range states {
			for _, e := range ts.Operator[source.SplitsState].Entries {
				var sp source.Split
				if err := json.Unmarshal(e, &sp); err != nil {
					t.Fatal(err)
				}
				if sp.Partition == int32(u) {
					return sp.Offset
				}
			}
		}
		t.Fatalf("checkpoint %d of unit %d has no offset of partition %d", id, u, u)
		return 0
	}
	want := map[int32]int64{}
	for u, j := range down {
		id, err := j.Coordinator().TriggerCheckpoint(ctx, false)
		if err != nil {
			t.Fatalf("stage 1 unit %d checkpoint: %v", u, err)
		}
		p := int32(u)
		want[p] = checkpointed(u, id)
		if want[p] <= 0 {
			t.Fatalf("unit %d checkpointed offset %d: the partition holds no records", u, want[p])
		}
		if !testkit.Poll(time.Minute, func() bool { return start(p) == want[p] }) {
			t.Fatalf("partition %d starts at %d, want the checkpointed offset %d", p, start(p), want[p])
		}
	}
	for p, w := range want {
		l := map[string]string{"stage": "1", "unit": fmt.Sprint(p)}
		got := func() float64 { return counterSum(t, reg, "kstreamd_cluster_repartition_start_offset", l) }
		if !testkit.Poll(time.Minute, func() bool { return got() == float64(w) }) { // set once the DeleteRecords response is in
			t.Errorf("kstreamd_cluster_repartition_start_offset%v = %v, want %d", l, got(), w)
		}
	}
	// Each checkpoint read every record (a reader's position skips the
	// last commit marker): the partitions are empty now.
	ends, err := adm.ListEndOffsets(ctx, rep)
	if err != nil {
		t.Fatal(err)
	}
	for p, w := range want {
		if e, _ := ends.Lookup(rep, p); e.Offset != w {
			t.Errorf("partition %d ends at %d, want the purged offset %d", p, e.Offset, w)
		}
	}
	// Zombie: unit 0 reads more, but b took it over before its checkpoint.
	purgeMu.Lock()
	before := purges[0]
	purgeMu.Unlock()
	produce(n, 2*n)
	if !testkit.Poll(2*time.Minute, func() bool { return in() == 2*n }) {
		t.Fatalf("stage 1 read %v records, want %d", in(), 2*n)
	}
	build(1, 0, "b", time.Hour, nil) // claims the next HEAD of unit 0
	if _, err := down[0].Coordinator().TriggerCheckpoint(ctx, false); !errors.Is(err, checkpoint.ErrHeadExists) {
		t.Fatalf("zombie's checkpoint: %v, want ErrHeadExists", err)
	}
	if err := <-zombieDone; !errors.Is(err, checkpoint.ErrHeadExists) {
		t.Fatalf("zombie stopped with %v, want ErrHeadExists", err)
	}
	purgeMu.Lock()
	after := purges[0]
	purgeMu.Unlock()
	if after != before {
		t.Errorf("the zombie sent %d DeleteRecords for partition 0, want none", after-before)
	}
	if got := start(0); got != want[0] {
		t.Errorf("after the zombie partition 0 starts at %d, want %d", got, want[0])
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestRepartitionPurgeAfterCommits: a stage-1 unit purges its repartition
// partition only once its sink's commit of the checkpoint returned
// (invariant 1, step 5). The broker holds the sink's commit (EndTxn) of
// the unit's first checkpoint until a DeleteRecords arrives, for at most
// 2s (the bound only lets the test go on when the purge rightly waits):
// no DeleteRecords arrives while the commit is held, and once it returned
// the partition starts at exactly the checkpointed offset.
func TestRepartitionPurgeAfterCommits(t *testing.T) {
	f := newUnitFixture(t, "units.yaml", strings.Replace(unitsYAML, "units: 4", "units: 2", 1), kfake.SeedTopics(2, "clicks", "counts"))
	kc, opts, st, dir, set := f.kc, f.opts, f.st, f.dir, f.set
	var holding atomic.Bool
	var held, purgesWhileHeld atomic.Int64
	purged := make(chan struct{}, 1)
	kc.ControlKey(int16(kmsg.DeleteRecords), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		if holding.Load() {
			purgesWhileHeld.Add(1)
		}
		select {
		case purged <- struct{}{}:
		default:
		}
		return nil, nil, false
	})
	kc.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		r := req.(*kmsg.EndTxnRequest)
		if !r.Commit || !strings.HasPrefix(r.TransactionalID, "kstreamd-clicks-counts-1-0-") || held.Load() > 0 {
			return nil, nil, false
		}
		held.Add(1)
		holding.Store(true)
		kc.SleepControl(func() {
			select {
			case <-purged:
			case <-time.After(2 * time.Second):
			}
		})
		holding.Store(false)
		return nil, nil, false // then the broker commits it
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.ensureRepartitions(t)
	rep := st.Repartitions[0].Topic
	const n = 40
	produceEach(t, opts, "clicks", 0, n, clickOf5)
	reg := prometheus.NewRegistry()
	m, err := job.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	build := func(stage, u int, interval time.Duration, m *job.Metrics) *job.Job {
		s := set
		s.Interval = interval
		s.Unit = &job.Unit{Stage: stage, Index: u, Units: st.Units, Member: "a", Fingerprint: st.Fingerprint}
		j, err := job.Build(ctx, st.Stages[stage].Graph, s, job.Deps{ClientOpts: opts, Metrics: m})
		if err != nil {
			t.Fatalf("build stage %d unit %d: %v", stage, u, err)
		}
		return j
	}
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	run := func(j *job.Job, name string) {
		wg.Go(func() {
			if err := j.Run(ctx); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		})
	}
	for u := range st.Units {
		run(build(0, u, 200*time.Millisecond, nil), fmt.Sprintf("stage 0 unit %d", u))
	}
	down := build(1, 0, time.Hour, m) // checkpoints only when the test asks
	run(down, "stage 1 unit 0")
	adm := newAdmin(t, opts)
	ends := func() int64 {
		offs, err := adm.ListEndOffsets(ctx, rep)
		if err != nil {
			t.Fatal(err)
		}
		o, _ := offs.Lookup(rep, 0)
		return o.Offset
	}
	// Stage 0 committed every record it routed to partition 0, and stage 1
	// read them all (the position of a read_committed reader skips the
	// last commit marker: it reaches the end offset).
	in := func() float64 {
		return counterSum(t, reg, "kstreamd_operator_records_in_total", map[string]string{"operator": "per_user"})
	}
	routed := func() int {
		return len(testkit.WithoutMarkers(testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), rep, 5*time.Second)))
	}
	if !testkit.Poll(2*time.Minute, func() bool { return routed() == n && in() > 0 && float64(countPartition(t, opts, rep, 0)) == in() }) {
		t.Fatalf("stage 1 unit 0 read %v records of its partition", in())
	}
	id, err := down.Coordinator().TriggerCheckpoint(ctx, false)
	if err != nil {
		t.Fatalf("stage 1 unit 0 checkpoint: %v", err)
	}
	// The offset of partition 0 in the checkpoint.
	meta, err := storeMetadata(fmt.Sprintf("%s/store/clicks/units/1/0/chk-%d", dir, id))
	if err != nil {
		t.Fatal(err)
	}
	states, err := checkpoint.DecodeTaskStates(meta.Operators["repartition.1"])
	if err != nil {
		t.Fatal(err)
	}
	var sp source.Split
	if err := json.Unmarshal(states[0].Operator[source.SplitsState].Entries[0], &sp); err != nil {
		t.Fatal(err)
	}
	want := sp.Offset
	if want <= 0 || want > ends() {
		t.Fatalf("checkpoint %d holds offset %d of partition 0 (end offset %d)", id, want, ends())
	}
	start := func() int64 {
		offs, err := adm.ListStartOffsets(ctx, rep)
		if err != nil {
			t.Fatal(err)
		}
		o, _ := offs.Lookup(rep, 0)
		return o.Offset
	}
	if !testkit.Poll(time.Minute, func() bool { return start() == want }) {
		t.Fatalf("after checkpoint %d partition 0 starts at %d, want the checkpointed offset %d", id, start(), want)
	}
	if held.Load() != 1 {
		t.Errorf("the broker held %d commits of the unit's sink, want 1", held.Load())
	}
	if p := purgesWhileHeld.Load(); p != 0 {
		t.Errorf("%d DeleteRecords reached the broker while the sink's commit was held, want none", p)
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// countPartition returns the records (markers excluded) partition p of
// topic holds, read_committed.
func countPartition(t *testing.T, opts []kgo.Opt, topic string, p int32) int {
	t.Helper()
	n := 0
	for _, r := range testkit.WithoutMarkers(testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), topic, 5*time.Second)) {
		if r.Partition == p {
			n++
		}
	}
	return n
}
