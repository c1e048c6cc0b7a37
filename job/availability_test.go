package job_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/checkpoint/s3store"
	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/job"
)

// memberRun is one RunMember of a test: its registry, logs and result.
type memberRun struct {
	reg  *prometheus.Registry
	logs *testkit.SyncBuffer
	mem  *job.Member
	done chan error
}

// startMember runs RunMember of f.st as member id of group "clicks-cluster" with a
// 10 s session timeout until ctx ends, and waits until it joined.
func startMember(t *testing.T, ctx context.Context, f *unitFixture, set job.Settings, id string, mc job.MemberConfig) *memberRun {
	t.Helper()
	return startMemberOf(t, ctx, f, f.st, set, id, mc)
}

// startMemberOf is startMember running st.
func startMemberOf(t *testing.T, ctx context.Context, f *unitFixture, st *graph.Stages, set job.Settings, id string, mc job.MemberConfig) *memberRun {
	t.Helper()
	r := &memberRun{reg: prometheus.NewRegistry(), logs: &testkit.SyncBuffer{}, done: make(chan error, 1)}
	joined := make(chan *job.Member, 1)
	mc.GroupID, mc.MemberID = "clicks-cluster", id
	if mc.SessionTimeout == 0 {
		mc.SessionTimeout = 10 * time.Second
	}
	mc.RebalanceTimeout, mc.RevokeTimeout = time.Minute, 50*time.Second
	mc.OnJoined = func(m *job.Member) { joined <- m }
	go func() {
		r.done <- job.RunMember(ctx, st, set, job.Deps{Registerer: r.reg, ClientOpts: f.opts,
			Logger: slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))}, mc)
	}()
	select {
	case r.mem = <-joined:
	case err := <-r.done:
		t.Fatalf("RunMember returned before joining: %v", err)
	}
	return r
}

// produceClicksBatch is produceClicks in one ProduceSync call: for each i
// in [0, perUser) and user u in [0, users), {"user":"u<u>","i":<i>}.
func produceClicksBatch(t *testing.T, opts []kgo.Opt, users, perUser int) {
	t.Helper()
	prod, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic("clicks"), kgo.MaxBufferedRecords(users*perUser+1))...)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	recs := make([]*kgo.Record, 0, users*perUser)
	for k := range users * perUser {
		recs = append(recs, &kgo.Record{Value: fmt.Appendf(nil, `{"user":"u%d","i":%d}`, k%users, k/users)})
	}
	if err := prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// TestUnitsS3LostHeadAnswers is issue 28's acceptance test for stuck
// units, at package level: the two stages of a keyed count run as 4 units
// (2 per stage) of one member on an S3 store whose server loses 1 in 40
// HEAD answers after writing the HEAD (alternately a 503 and a closed
// connection; the client's retry gets 412, "exists"). 20,000 records of
// 100 users: the read_committed output holds, per user, exactly the
// counts 1..200; every lost answer read back as the owner's own HEAD
// (kstreamd_cluster_head_unknown_outcomes_total{outcome="own"} equals the
// answers lost, at least 3), no unit was fenced or claimed twice (4
// takeovers, one per unit) and every unit is up at the end.
func TestUnitsS3LostHeadAnswers(t *testing.T) {
	f := newUnitFixture(t, "units.yaml", strings.Replace(unitsYAML, "units: 4", "units: 2", 1), kfake.SeedTopics(2, "clicks", "counts"))
	loss := &testkit.AnswerLoss{Every: 40, Match: func(r *http.Request) bool { return strings.Contains(r.URL.Path, "/"+checkpoint.HeadPrefix) }}
	store, err := s3store.New(s3store.Config{Endpoint: testkit.S3ServerWith(t, "chk", true, loss.Wrap), Bucket: "chk", Region: "us-east-1",
		PathStyle: true, AccessKey: testkit.S3AccessKey, SecretKey: testkit.S3SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	set := f.set
	set.Store = store
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := startMember(t, ctx, f, set, "m1", job.MemberConfig{})
	const users, perUser = 100, 200
	produceClicksBatch(t, f.opts, users, perUser)
	sunk := func() float64 {
		return counterSum(t, m.reg, "kstreamd_operator_records_in_total", map[string]string{"operator": "counts"})
	}
	if !testkit.Poll(2*time.Minute, func() bool { return sunk() >= users*perUser && loss.Lost() >= 3 }) {
		t.Fatalf("the sinks received %v records (want %d), %d HEAD answers lost (want >= 3); logs:\n%s", sunk(), users*perUser, loss.Lost(), m.logs.String())
	}
	var out []*kgo.Record
	if !testkit.Poll(time.Minute, func() bool {
		out = testkit.ReadTopicWith(t, f.opts, kgo.ReadCommitted(), "counts", 10*time.Second)
		return len(out) >= users*perUser
	}) {
		t.Fatalf("read_committed output holds %d records, want %d; logs:\n%s", len(out), users*perUser, m.logs.String())
	}
	checkUserCounts(t, out, users, perUser)
	lost := float64(loss.Lost())
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"kstreamd_cluster_unit_fenced_total", nil, 0},
		{"kstreamd_cluster_unit_takeovers_total", nil, 4},
		{"kstreamd_cluster_unit_up", nil, 4},
		{"kstreamd_cluster_head_unknown_outcomes_total", map[string]string{"outcome": checkpoint.HeadOther}, 0},
		{"kstreamd_cluster_head_unknown_outcomes_total", map[string]string{"outcome": checkpoint.HeadUnknown}, 0},
	} {
		if got := counterSum(t, m.reg, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// Answers lost on a claim or a checkpoint HEAD, each read back as the
	// owner's own (one more may be in flight).
	if own := counterSum(t, m.reg, "kstreamd_cluster_head_unknown_outcomes_total", map[string]string{"outcome": checkpoint.HeadOwn}); own < lost-1 || own > lost {
		t.Errorf("%v unknown outcomes resolved as own, want the %v answers lost", own, lost)
	}
	if ok, why := m.mem.Readiness(); !ok {
		t.Errorf("member not ready: %s", why)
	}
	cancel()
	if err := memberReturned(t, m.done); err != nil {
		t.Errorf("RunMember: %v", err)
	}
	if strings.Contains(m.logs.String(), "taken over") {
		t.Errorf("a unit was taken for taken over:\n%s", m.logs.String())
	}
}

// TestUnitTakenOverWhileAssignedIsRebuilt: member m1 runs the two units of
// a keyed count (one per stage); another claim ("intruder", which the
// group never assigned anything) takes HEAD of unit 1/0. The unit's next
// checkpoint finds that claim's HEAD and stops (fenced once), but the
// group still assigns the unit to m1: it is claimed again with the restart
// strategy (a second takeover by m1, the newest HEAD m1's), restores the
// checkpoint the intruder's claim names, and the read_committed output
// holds, per user, exactly the counts 1..n. Every unit is up at the end.
func TestUnitTakenOverWhileAssignedIsRebuilt(t *testing.T) {
	f := newUnitFixture(t, "units.yaml", strings.Replace(unitsYAML, "units: 4", "units: 1", 1), kfake.SeedTopics(2, "clicks", "counts"))
	set := f.set
	set.Restart = job.RestartConfig{Strategy: job.RestartFixedDelay, Attempts: 3, Delay: 100 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := startMember(t, ctx, f, set, "m1", job.MemberConfig{})
	const users, perUser = 5, 20
	committed := func() []*kgo.Record {
		return testkit.ReadTopicWith(t, f.opts, kgo.ReadCommitted(), "counts", 10*time.Second)
	}
	produceClicks(t, f.opts, 0, perUser/2, users)
	if !testkit.Poll(time.Minute, func() bool { return len(committed()) >= users*perUser/2 }) {
		t.Fatalf("output holds %d records, want %d; logs:\n%s", len(committed()), users*perUser/2, m.logs.String())
	}
	ns := checkpoint.Namespace{Store: set.Store, Prefix: checkpoint.UnitPrefix("clicks", 1, 0)}
	if _, _, err := checkpoint.Claim(ctx, ns, "intruder", f.st.Fingerprint, 1, 1); err != nil {
		t.Fatal(err)
	}
	unit := map[string]string{"stage": "1", "unit": "0"}
	if !testkit.Poll(time.Minute, func() bool {
		return counterSum(t, m.reg, "kstreamd_cluster_unit_takeovers_total", unit) == 2
	}) {
		t.Fatalf("unit 1/0 was not claimed again; logs:\n%s", m.logs.String())
	}
	produceClicks(t, f.opts, perUser/2, perUser, users)
	if !testkit.Poll(time.Minute, func() bool { return len(committed()) >= users*perUser }) {
		t.Fatalf("output holds %d records, want %d; logs:\n%s", len(committed()), users*perUser, m.logs.String())
	}
	checkUserCounts(t, committed(), users, perUser)
	if got := counterSum(t, m.reg, "kstreamd_cluster_unit_fenced_total", unit); got != 1 {
		t.Errorf("unit 1/0 fenced %v times, want 1", got)
	}
	if !testkit.Poll(30*time.Second, func() bool { return counterSum(t, m.reg, "kstreamd_cluster_unit_up", nil) == 2 }) {
		t.Errorf("%v units up, want 2", counterSum(t, m.reg, "kstreamd_cluster_unit_up", nil))
	}
	if !testkit.Poll(30*time.Second, m.mem.Ready) {
		_, why := m.mem.Readiness()
		t.Errorf("member not ready: %s", why)
	}
	hd, err := ns.Heads().Latest(ctx)
	if err != nil || hd.Owner != "m1" {
		t.Errorf("newest HEAD of unit 1/0 %+v (%v), want one of m1", hd, err)
	}
	for _, want := range []string{"unit taken over by another claim: stopped", "the group still assigns the taken-over unit here: claiming it again"} {
		if !strings.Contains(m.logs.String(), want) {
			t.Errorf("no log line %q:\n%s", want, m.logs.String())
		}
	}
	cancel()
	if err := memberReturned(t, m.done); err != nil {
		t.Errorf("RunMember: %v", err)
	}
}

// TestUnitsRideOutBrokerOutage is issue 28's broker-blip acceptance test
// at package level: a member runs the 4 units of a two-stage keyed count
// (2 per stage) with a 10 s session timeout against a broker (kfake
// persisting to a data directory) that is stopped for 5 s while records
// are in flight and then started again on the same port and data, once
// the assignment settled. No unit moves, counted from the broker's stop:
// no takeover (claim), none fenced, no unit stopped; the client's lost
// session (it gives up on the heartbeat's dial errors within seconds) kept
// every unit running and the rejoin assigned each to the member again,
// and the read_committed output holds, per user, exactly the counts 1..n.
//
// One member, not two: kfake forgets a group's members when it restarts
// (Kafka keeps them in __consumer_offsets), so of two members the one that
// rejoins first is given every unit, and under CI load the other's rejoin
// came late enough for that to move units (a failure of the test broker's
// model, not of the member); docs/scale-out.md's outage table measures two.
func TestUnitsRideOutBrokerOutage(t *testing.T) {
	const members = 1
	r := brokerOutage(t, members, 5*time.Second, 10*time.Second)
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"kstreamd_cluster_unit_takeovers_total", r.takeovers, 0},
		{"kstreamd_cluster_unit_fenced_total", r.fenced, 0},
		{"kstreamd_cluster_unit_stops_total", r.stops, 0},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	// The outage did end the client's group session (units lost), and
	// the rejoin assigned every unit here again: all kept running.
	if r.sessionsLost < members || r.kept != 4/members*r.sessionsLost {
		t.Errorf("%v group sessions lost, %v lost units kept; want >= %d (one per member) and %d per session (each member's units)", r.sessionsLost, r.kept, members, 4/members)
	}
	if t.Failed() {
		t.Logf("logs:\n%s", r.logs)
	}
}

// outageResult is what brokerOutage counted.
type outageResult struct {
	takeovers, fenced, stops, sessionsLost, kept, restarts float64
	// They count from the broker's stop. caughtUp is the time from the
	// broker's restart until the
	// read_committed output was complete.
	caughtUp time.Duration
	logs     string
}

// brokerOutage runs the two stages of a keyed count as 4 units (2 per
// stage) on members members (m1, m2, ...; all 4 units run before the
// outage) with session timeout session against a kfake
// broker persisting to a data directory, stops the broker for outage once
// half the input is committed, starts it again on the same port and data,
// produces the second half, checks the read_committed output (per user
// exactly the counts 1..n) and returns the counts summed over the members.
func brokerOutage(t *testing.T, members int, outage, session time.Duration) outageResult {
	t.Helper()
	addr := testkit.FreeAddr(t)
	_, portText, _ := strings.Cut(addr, ":")
	var port int
	if _, err := fmt.Sscan(portText, &port); err != nil {
		t.Fatal(err)
	}
	brokerOpts := []kfake.Opt{kfake.Ports(port), kfake.DataDir(t.TempDir()), kfake.SeedTopics(2, "clicks", "counts")}
	f := newUnitFixture(t, "units.yaml", strings.Replace(unitsYAML, "units: 4", "units: 2", 1), brokerOpts...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ms []*memberRun
	for i := range members {
		set := f.set
		id := fmt.Sprintf("m%d", i+1)
		set.CheckpointDir, set.StateDir = f.dir+"/"+id+"/staging", f.dir+"/"+id+"/state"
		ms = append(ms, startMember(t, ctx, f, set, id, job.MemberConfig{SessionTimeout: session}))
	}
	logs := func() string {
		var b strings.Builder
		for _, m := range ms {
			b.WriteString(m.logs.String())
		}
		return b.String()
	}
	// The assignment settles before the outage: every member runs its
	// share of the 4 units.
	if !testkit.Poll(time.Minute, func() bool {
		for _, m := range ms {
			if counterSum(t, m.reg, "kstreamd_cluster_unit_up", nil) != float64(4/members) {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("the units never all ran; logs:\n%s", logs())
	}
	const users, perUser = 20, 40
	committed := func() []*kgo.Record {
		return testkit.ReadTopicWith(t, f.opts, kgo.ReadCommitted(), "counts", 10*time.Second)
	}
	produceClicks(t, f.opts, 0, perUser/2, users)
	if !testkit.Poll(time.Minute, func() bool { return len(committed()) >= users*perUser/2 }) {
		t.Fatalf("output holds %d records, want %d; logs:\n%s", len(committed()), users*perUser/2, logs())
	}
	var r outageResult
	counters := []struct {
		name string
		into *float64
	}{
		{"kstreamd_cluster_unit_takeovers_total", &r.takeovers},
		{"kstreamd_cluster_unit_fenced_total", &r.fenced},
		{"kstreamd_cluster_unit_stops_total", &r.stops},
		{"kstreamd_cluster_group_sessions_lost_total", &r.sessionsLost},
		{"kstreamd_cluster_lost_units_kept_total", &r.kept},
		{"kstreamd_job_restarts_total", &r.restarts},
	}
	// The counts from here on: the assignment's own moves before the
	// outage (the second member's units) are not the outage's.
	sum := func(name string) float64 {
		v := 0.0
		for _, m := range ms {
			v += counterSum(t, m.reg, name, nil)
		}
		return v
	}
	before := map[string]float64{}
	for _, c := range counters {
		before[c.name] = sum(c.name)
	}
	f.kc.Close()
	time.Sleep(outage)
	kc, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, brokerOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	back := time.Now()
	produceClicks(t, f.opts, perUser/2, perUser, users)
	if !testkit.Poll(2*time.Minute, func() bool { return len(committed()) >= users*perUser }) {
		t.Fatalf("output holds %d records, want %d; logs:\n%s", len(committed()), users*perUser, logs())
	}
	r.caughtUp = time.Since(back)
	checkUserCounts(t, committed(), users, perUser)
	// The units keep running through the lost session, so the output can
	// catch up before the rejoin is through: wait for the rejoin to have
	// assigned the lost units (kept) or stopped them, up to the grace.
	testkit.Poll(time.Minute, func() bool {
		lost := sum("kstreamd_cluster_group_sessions_lost_total") - before["kstreamd_cluster_group_sessions_lost_total"]
		settled := sum("kstreamd_cluster_lost_units_kept_total") - before["kstreamd_cluster_lost_units_kept_total"] +
			sum("kstreamd_cluster_unit_stops_total") - before["kstreamd_cluster_unit_stops_total"]
		return lost >= float64(members) && settled >= float64(4/members)*lost
	})
	for _, c := range counters {
		*c.into = sum(c.name) - before[c.name]
	}
	cancel()
	for _, m := range ms {
		if err := memberReturned(t, m.done); err != nil {
			t.Errorf("RunMember: %v", err)
		}
	}
	r.logs = logs()
	return r
}

// TestClusterOutputUnstableOffsets: a member measures, per partition of
// its job's output topics (the sink's "counts" and the repartition
// topic), the high watermark minus the last stable offset. With the job's
// output committed it is 0 everywhere; a transaction another producer
// leaves open on counts/0 with 3 records shows as exactly 3 there (a stuck
// transaction), and 0 again once it is aborted.
func TestClusterOutputUnstableOffsets(t *testing.T) {
	f := newUnitFixture(t, "units.yaml", strings.Replace(unitsYAML, "units: 4", "units: 1", 1), kfake.SeedTopics(2, "clicks", "counts"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := startMember(t, ctx, f, f.set, "m1", job.MemberConfig{OutputWatchInterval: 100 * time.Millisecond})
	const users, perUser = 5, 4
	produceClicks(t, f.opts, 0, perUser, users)
	if !testkit.Poll(time.Minute, func() bool {
		return len(testkit.ReadTopicWith(t, f.opts, kgo.ReadCommitted(), "counts", 10*time.Second)) >= users*perUser
	}) {
		t.Fatalf("output incomplete; logs:\n%s", m.logs.String())
	}
	unstable := func(topic string, p int) float64 {
		return counterSum(t, m.reg, "kstreamd_cluster_output_unstable_offsets", map[string]string{"topic": topic, "partition": fmt.Sprint(p)})
	}
	series := func() int {
		mfs, err := m.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "kstreamd_cluster_output_unstable_offsets" {
				return len(mf.GetMetric())
			}
		}
		return 0
	}
	// counts has 2 partitions, the repartition topic 1 (one unit).
	if !testkit.Poll(30*time.Second, func() bool { return series() == 3 && unstable("counts", 0)+unstable("counts", 1) == 0 }) {
		t.Fatalf("%d series, counts unstable %v/%v; want 3 series, 0", series(), unstable("counts", 0), unstable("counts", 1))
	}
	stray, err := kgo.NewClient(append(f.opts, kgo.TransactionalID("stray"), kgo.DefaultProduceTopic("counts"), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer stray.Close()
	if err := stray.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := stray.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: fmt.Appendf(nil, "stray-%d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if !testkit.Poll(30*time.Second, func() bool { return unstable("counts", 0) == 3 }) {
		t.Fatalf("counts/0 unstable %v with a transaction of 3 records open, want 3", unstable("counts", 0))
	}
	if err := stray.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	if !testkit.Poll(30*time.Second, func() bool { return unstable("counts", 0) == 0 }) {
		t.Errorf("counts/0 unstable %v after the abort, want 0", unstable("counts", 0))
	}
	if got := unstable(f.st.Repartitions[0].Topic, 0); got != 0 {
		t.Errorf("repartition topic unstable %v, want 0", got)
	}
	cancel()
	if err := memberReturned(t, m.done); err != nil {
		t.Errorf("RunMember: %v", err)
	}
}

// TestClusterStatusShowsExcludedMembers: member m1 runs the job's graph
// and holds both units; member m2 joins with another graph fingerprint and
// gets none. The group's view (Member.Status, /api/v1/job) names each
// member's fingerprint and marks m2, and only m2, excluded.
func TestClusterStatusShowsExcludedMembers(t *testing.T) {
	f := newUnitFixture(t, "units.yaml", strings.Replace(unitsYAML, "units: 4", "units: 1", 1), kfake.SeedTopics(2, "clicks", "counts"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m1 := startMember(t, ctx, f, f.set, "m1", job.MemberConfig{})
	if !testkit.Poll(time.Minute, m1.mem.Ready) {
		t.Fatal("m1 never became ready")
	}
	// Another graph whose state m1's HEADs cannot restore (another key):
	// one that only differs in params that keep state would be an
	// upgrade and win (docs/scale-out.md, "Upgrades").
	other := planStages(t, "other.yaml", strings.Replace(strings.Replace(unitsYAML, "units: 4", "units: 1", 1), "key_by: user", "key_by: i", 1))
	set2 := f.set
	set2.CheckpointDir, set2.StateDir = f.dir+"/m2/staging", f.dir+"/m2/state"
	m2 := startMemberOf(t, ctx, f, other, set2, "m2", job.MemberConfig{})
	var st job.ClusterStatus
	if !testkit.Poll(time.Minute, func() bool {
		st = m1.mem.Status(ctx)
		return len(st.Members) == 2 && st.Members[0].Fingerprint != "" && st.Members[1].Fingerprint != "" && len(st.Members[0].Units) == 2
	}) {
		t.Fatalf("the group never showed two settled members: %+v", st)
	}
	got := fmt.Sprint(st.Members[0].Member, st.Members[0].Fingerprint, st.Members[0].Excluded, len(st.Members[0].Units),
		st.Members[1].Member, st.Members[1].Fingerprint, st.Members[1].Excluded, len(st.Members[1].Units))
	want := fmt.Sprint("m1", f.st.Fingerprint[:12], false, 2, "m2", other.Fingerprint[:12], true, 0)
	if got != want {
		t.Errorf("members %s, want %s (%+v)", got, want, st.Members)
	}
	cancel()
	for _, m := range []*memberRun{m1, m2} {
		if err := memberReturned(t, m.done); err != nil {
			t.Errorf("RunMember: %v", err)
		}
	}
}
